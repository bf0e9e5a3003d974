"""What a framework model adds to every turn, and how it answers: one set of options for
every framework (`worker.frameworks.openai_agents`, `worker.frameworks.pydantic_ai`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.errors import InputError
from worker.frameworks.engine import Engine, OnDegraded, answer, chain_name
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
    - `chain`: the chain the turns run on (`[chains.NAME]`; None: `default`).
    - `metadata`: string pairs every turn carries for attribution (`{"agent": "triage"}`).
    """

    tenant_id: str
    deadline_s: float | None = None
    side_effect_tools: frozenset[str] = field(default_factory=frozenset)
    on_degraded: OnDegraded = "raise"
    on_result: Callable[[TurnResult], None] | None = None
    chain: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def on(
        cls, engine: Engine, chain: str | None, refused: type[InputError], **options: Any
    ) -> TurnOptions:
        """The options of a model on `engine` whose turns run on `chain`; `refused` (the
        framework's input error) for a chain the engine has not."""
        try:
            chosen = chain_name(engine, chain)
        except InputError as exc:
            raise refused(str(exc)) from None
        side_effect_tools = frozenset(options.pop("side_effect_tools", ()))
        metadata = dict(options.pop("metadata", None) or {})
        return cls(chain=chosen, side_effect_tools=side_effect_tools, metadata=metadata, **options)

    def fields(self, deadline_s: float | None = None) -> dict[str, Any]:
        """The turn's tenant, and its deadline when one is set (`deadline_s`, the one
        request's, over the model's)."""
        deadline = deadline_s or self.deadline_s
        fields: dict[str, Any] = {"tenant_id": self.tenant_id}
        if deadline is not None:
            fields["deadline_s"] = deadline
        if self.chain is not None:
            fields["chain"] = self.chain
        if self.metadata:
            fields["metadata"] = dict(self.metadata)
        return fields

    def reply(self, result: TurnResult, *, structured: bool = False) -> Reply:
        """The reply the agent gets for `result`, or `TurnNotAnswered`. A degradation
        message is never the answer to a request for structured output: it is not that
        output."""
        if self.on_result is not None:
            self.on_result(result)
        return answer(result, "raise" if structured else self.on_degraded)
