"""relevo as the model of agent frameworks: the engines their models run turns on.

The framework models themselves live in `worker.frameworks.openai_agents` (the OpenAI
Agents SDK, `pip install 'relevo[agents]'`) and `worker.frameworks.pydantic_ai`
(`pip install 'relevo[pydantic-ai]'`); importing this package needs neither.
"""

from worker.frameworks.engine import (
    Engine,
    InProcess,
    OnDegraded,
    ThroughFleet,
    TurnNotAnswered,
    answer,
)

__all__ = ["Engine", "InProcess", "OnDegraded", "ThroughFleet", "TurnNotAnswered", "answer"]
