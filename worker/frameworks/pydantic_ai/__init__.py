"""relevo as a pydantic-ai model (`pip install 'relevo[pydantic-ai]'`).

`RelevoModel` runs each of an agent's requests as a relevo turn, on an engine of
`worker.frameworks` (a chain in this process, or the fleet). `PydanticAIInputError` is
what relevo refuses to carry, `TurnNotAnsweredError` a request it gives no answer for.
"""

from worker.frameworks.pydantic_ai.errors import PydanticAIInputError, TurnNotAnsweredError
from worker.frameworks.pydantic_ai.model import RelevoModel

__all__ = ["PydanticAIInputError", "RelevoModel", "TurnNotAnsweredError"]
