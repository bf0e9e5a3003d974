"""relevo as a pydantic-ai model (`pip install 'relevo[pydantic-ai]'`).

`RelevoModel` runs each of an agent's requests as a relevo turn, on an engine of
`worker.frameworks` (a chain in this process, or the fleet); `TurnNotAnsweredError`
is what an agent run raises when relevo gives no answer.
"""

from worker.frameworks.pydantic_ai.model import RelevoModel, TurnNotAnsweredError

__all__ = ["RelevoModel", "TurnNotAnsweredError"]
