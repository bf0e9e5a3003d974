"""What a framework model adds to every turn, and how it answers: one set of options for
every framework (`worker.frameworks.openai_agents`, `worker.frameworks.pydantic_ai`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.frameworks.engine import OnDegraded, answer
from worker.types import Reply, TurnResult

__all__ = ["TurnOptions"]


@dataclass(frozen=True)
class TurnOptions:
    """A framework model's options.

    - `tenant_id`: whose budget the turns spend.
    - `deadline_s`: each turn's deadline (None: relevo's default, 60 s); a deadline the
      framework's own settings give for one request wins.
    - `side_effect_tools`: the names of the tools that change the world (the chain's
      read-only fallback leaves them out).
    - `on_degraded`: `"raise"` or `"message"` (the degradation message as the answer) for
      a turn degraded without a reply.
    - `on_result`: called with each turn's `TurnResult`, answered or not.
    """

    tenant_id: str
    deadline_s: float | None = None
    side_effect_tools: frozenset[str] = field(default_factory=frozenset)
    on_degraded: OnDegraded = "raise"
    on_result: Callable[[TurnResult], None] | None = None

    def fields(self, deadline_s: float | None = None) -> dict[str, Any]:
        """The turn's tenant, and its deadline when one is set (`deadline_s`, the one
        request's, over the model's)."""
        deadline = deadline_s or self.deadline_s
        return {"tenant_id": self.tenant_id} | (
            {} if deadline is None else {"deadline_s": deadline}
        )

    def reply(self, result: TurnResult, *, structured: bool = False) -> Reply:
        """The reply the agent gets for `result`, or `TurnNotAnswered`. A degradation
        message is never the answer to a request for structured output: it is not that
        output."""
        if self.on_result is not None:
            self.on_result(result)
        return answer(result, "raise" if structured else self.on_degraded)
