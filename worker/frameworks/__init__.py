"""relevo as the model of agent frameworks: the engines their models run turns on, and
what every framework's model shares (`TurnOptions`, the reasoning `envelope`).

The framework models themselves live in `worker.frameworks.openai_agents` (the OpenAI
Agents SDK, `pip install 'relevo[agents]'`) and `worker.frameworks.pydantic_ai`
(`pip install 'relevo[pydantic-ai]'`), each a package of the same shape: `model`, `turn`
(the framework's request as a `TurnRequest`), `errors`; importing this package needs
neither.
"""

from worker.frameworks.engine import (
    Engine,
    InProcess,
    OnDegraded,
    ThroughFleet,
    TurnNotAnswered,
    answer,
)
from worker.frameworks.options import TurnOptions

__all__ = [
    "Engine",
    "InProcess",
    "OnDegraded",
    "ThroughFleet",
    "TurnNotAnswered",
    "TurnOptions",
    "answer",
]
