"""What a pydantic-ai agent gets when relevo cannot carry or answer a request: each error
is relevo's and pydantic-ai's at once.

    InputError, pydantic_ai.UserError
     └── PydanticAIInputError   refused before any call, naming what cannot be carried
    pydantic_ai.AgentRunError, TurnNotAnswered
     └── TurnNotAnsweredError   refused, failed, or degraded without a reply
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.exceptions import AgentRunError, UserError

from worker.errors import InputError
from worker.frameworks.engine import TurnNotAnswered
from worker.types import TurnResult

__all__ = ["PydanticAIInputError", "TurnNotAnsweredError"]


class PydanticAIInputError(InputError, UserError):
    """Something the agent asks for that relevo cannot carry to every model of its chain."""


class TurnNotAnsweredError(AgentRunError, TurnNotAnswered):
    """relevo gave no answer for this request: refused (kill switch, budget), failed
    (every model down), or degraded without a reply; `result` is the whole report.

    An `AgentRunError`, not a `ModelAPIError`, on purpose: relevo has already fallen
    back as far as the turn allowed, and a `FallbackModel` around it must not spend what
    relevo refused to (a tenant's spent budget, a kill switch that is on).
    """

    def __init__(self, result: TurnResult) -> None:
        self.result = result
        AgentRunError.__init__(
            self, f"turn {result.turn_id} {result.status}: {result.reason or 'no reply'}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.result,)
