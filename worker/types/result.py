"""What a turn ends with: its status, attempts, usage, reply and cost."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, PrivateAttr

from worker.errors import TurnFailed
from worker.types.base import Frozen
from worker.types.messages import Reasoning, ToolCall


class Status(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"
    REJECTED = "rejected"


class AttemptOutcome(StrEnum):
    OK = "ok"
    ERROR = "error"
    SKIPPED = "skipped"
    HEDGE_LOST = "hedge_lost"  # raced a hedged twin, which sent content first


class Usage(Frozen):
    """The tokens of one call, split by price; every adapter maps its provider to this.

    - `input_tokens`: prompt tokens billed at the plain input price (cache reads and
      writes are not in it, whatever the provider's own `input` count includes).
    - `cache_write_tokens`: prompt tokens written to the provider's prompt cache.
    - `cache_read_tokens`: prompt tokens served from the provider's prompt cache.
    - `output_tokens`: every token billed at the output price, reasoning included.
    - `reasoning_tokens`: the part of `output_tokens` the model spent reasoning
      (thinking); for information only, never priced again; 0 when not reported.
    """

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token, cached or not: what OpenTelemetry's GenAI
        `gen_ai.usage.input_tokens` counts."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


class Reply(Frozen):
    """The assistant's answer: text, tool calls, and the reasoning to send back with them.

    `parsed` is the text read as JSON when the turn asked for a `response_format` (and
    validated against its schema); `refusal` is what the model said when it refused.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[Reasoning, ...] = ()
    parsed: Any = None
    refusal: str | None = None


class Attempt(Frozen):
    """One try or skip of one model on one provider."""

    model: str
    provider: str
    provider_model: str
    outcome: AttemptOutcome
    http_status: int | None = None
    error_class: str | None = None
    detail: str | None = None
    latency_ms: int = 0
    retry_index: int = 0
    charged_micros: int | None = None
    """What the attempt was charged: its cost when answered, its reservation when the
    provider may have billed a call that failed, its prompt when it lost a hedged race;
    None when nothing was charged. The attempts' charges add up to the turn's cost."""
    # When the attempt ended, in ms since the turn began (it began `latency_ms` before),
    # and when its first content streamed, in ms since it began: a timeline of the turn.
    ended_ms: int = 0
    first_byte_ms: int | None = None
    # Reasoning items of the conversation this call did not carry: another vendor wrote
    # them, and only their writer can read them back.
    reasoning_left_out: int = 0
    left_out: tuple[str, ...] = Field(default=(), exclude_if=lambda names: not names)
    """The turn's fields this call's body did not carry (its API has none for them, or
    this model refuses them). Written from `[worker] oldest_release = "0.2.0"` on; before,
    they are named in `detail` ("left out: seed, stop")."""


FinishReasonName = Literal["stop", "length", "tool_calls", "content_filter", "refusal", "other"]


class TurnResult(Frozen):
    """What a turn reports, outside the model's context.

    `finish_reason` says why the answering model stopped (`worker.adapters.finish`):
    `stop` and `tool_calls` are complete answers, `length` was cut at `max_tokens`,
    `content_filter` was withheld by the provider's filter — before any content the
    turn `failed`, after some it is `degraded`, never `ok`.
    """

    turn_id: str
    tenant_id: str
    status: Status
    reason: str | None = None
    error: str | None = None
    primary_model: str
    effective_model: str | None = None
    effective_provider: str | None = None
    step: int | None = None
    attempts: tuple[Attempt, ...] = ()
    reply: Reply | None = None
    finish_reason: FinishReasonName | None = None
    usage: Usage = Usage()
    cost_micros: int = 0
    degradation: str | None = None
    degradation_message: str | None = None
    read_only: bool = False
    dropped_tools: tuple[str, ...] = ()
    trimmed_messages: int = 0
    latency_ms: int = 0
    chain: str | None = Field(default=None, exclude_if=lambda name: name is None)
    """The chain the turn ran on; written when the turn named one, and always from
    `[worker] oldest_release = "0.2.0"` on (relevo 0.1.0 reads results strictly)."""
    metadata: dict[str, str] = Field(default_factory=dict, exclude_if=lambda pairs: not pairs)
    """The turn's metadata, as it was sent."""

    _errors: tuple[Exception, ...] = PrivateAttr(default=())

    def raise_for_status(self) -> TurnResult:
        """Raise `TurnFailed` with every attempt's error unless a model answered."""
        if self.status in (Status.FAILED, Status.REJECTED):
            errors = list(self._errors) or [RuntimeError(self.reason or self.status)]
            raise TurnFailed(f"turn {self.turn_id} {self.status}: {self.reason}", errors)
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)
