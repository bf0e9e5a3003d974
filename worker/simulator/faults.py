"""What a simulated model does on its next calls (a `Fault`), and how a call ended (`CallOutcome`).

A fault with nothing set is a healthy call; the shape fields (`tokens`,
`reply_tool`…) change the healthy reply, the others make it misbehave. Faults
queue per model: the head applies until its `times` run out, then the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, TypeAdapter, with_config

__all__ = [
    "API_KEY_PLACEHOLDER",
    "DEFAULT_TOKENS",
    "Body",
    "CallOutcome",
    "Fault",
    "StreamPayload",
    "fault_adapter",
]

DEFAULT_TOKENS = 8
API_KEY_PLACEHOLDER = "$API_KEY"

# A JSON object or array is sent as JSON; text or bytes are sent as they are (HTML, "" for empty).
Body = dict[str, Any] | list[Any] | str | bytes
# A mid-stream error event's JSON: an object, or one in Google's one-element list.
StreamPayload = dict[str, Any] | list[Any]


class CallOutcome(StrEnum):
    """How a call ended, as counted by the simulator."""

    OK = "ok"
    ERROR = "error"  # an HTTP error status was sent
    STREAM_ERROR = "stream_error"  # a provider-shaped error event after some content
    DROPPED = "dropped"  # the simulator cut the connection on purpose
    STALLED = "stalled"  # the call ended (client left, server stopped) while kept silent
    ABANDONED = "abandoned"  # the client left while the answer was flowing


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, slots=True)
class Fault:
    """One behaviour of a model for its next `times` calls (None: until cleared)."""

    status: int | None = None
    """Answer with this HTTP error status instead of a reply."""
    body: Body | None = field(default=None, hash=False)
    """Error body; None gives the API's own error envelope for `status`."""
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Extra response headers, e.g. Retry-After or retry-after-ms."""
    content_type: str | None = None
    """Content-Type of a text `body` (default: text/html if it starts with '<', else text/plain)."""
    echo_key: bool = False
    """Put the request's API key in place of `$API_KEY` in the body (the default body quotes it)."""

    times: int | None = None
    """Apply to the next N calls, then expire; None keeps it until cleared."""
    rate: float = 1.0
    """Probability that a call is affected; an unaffected call is healthy and keeps `times`."""

    latency_s: float = 0.0
    """Added before anything is sent."""
    latency_mix: tuple[tuple[float, float], ...] = ()
    """(share, seconds) pairs: each call adds one of these latencies before anything is
    sent, drawn with these shares from the simulator's seeded random (the shares' rest adds
    none). ((0.9, 0.4), (0.1, 3.0)): 0.4 s for nine calls in ten, 3 s for the tenth."""
    stall_first_byte_s: float = 0.0
    """Send nothing at all for this long (a hang when long)."""
    stall_before_content_s: float = 0.0
    """Send 200 and the headers (and a stream's preamble), then stay silent this long."""
    stall_after_tokens: int | None = None
    """Send this many content pieces, then stay silent for `stall_after_s`."""
    stall_after_s: float = 0.0
    error_after_tokens: int | None = None
    """Send this many content pieces, then the API's mid-stream error event (or drop)."""
    drop: bool = False
    """With `error_after_tokens`: cut the connection instead of sending an error event."""
    stream_error: StreamPayload | None = field(default=None, hash=False)
    """The mid-stream error payload; None gives the API's usual one (e.g. overloaded_error)."""

    tokens: int | None = None
    """Reply length in text tokens (default 8)."""
    reply_tool: str | None = None
    """Answer with a call to this tool."""
    tool_args: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """JSON arguments of that tool call."""
    tool_with_text: bool = False
    """Send the text as well as the tool call (text first)."""
    token_interval_s: float = 0.0
    """Pause between streamed content pieces."""
    cache_write_tokens: int = 0
    """Prompt tokens the reply reports written to the prompt cache, beside the request's
    own estimate. Gemini has no such count: there they are reported as plain prompt tokens."""
    cache_read_tokens: int = 0
    """Prompt tokens the reply reports read from the prompt cache, beside the estimate."""
    reasoning_tokens: int = 0
    """Hidden reasoning tokens the reply reports as output; never sent as content, so
    `stall_after_tokens` and `error_after_tokens` do not count them."""
    content_filter_after_tokens: int | None = None
    """Stop with the API's content-filter finish after this many text tokens (Azure's
    `content_filter` mid-stream); 0 blocks the prompt before any content."""
    redacted_thinking: bool = False
    """When the request asks for extended thinking (Anthropic), add a redacted_thinking
    block after the thinking block."""
    invalid_output: bool = False
    """Answer a structured-output request (a response schema, a forced tool) with JSON
    that does not validate against its schema."""
    refusal: str | None = None
    """Refuse with these words instead of answering (OpenAI's `message.refusal`)."""
    answer_model: str | None = None
    """Say this model answered (a dated snapshot of the alias asked for), not the one asked."""

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        if self.times is not None and self.times < 1:
            raise ValueError("times must be at least 1 (or None)")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")
        seconds = (
            self.latency_s,
            self.stall_first_byte_s,
            self.stall_before_content_s,
            self.stall_after_s,
            self.token_interval_s,
        )
        if any(share < 0 or s < 0 for share, s in self.latency_mix) or (
            sum(share for share, _ in self.latency_mix) > 1 + 1e-9
        ):
            raise ValueError("latency_mix: shares and seconds >= 0, shares summing to <= 1")
        if any(s < 0 for s in seconds):
            raise ValueError("durations must not be negative")
        counts = (
            "stall_after_tokens",
            "error_after_tokens",
            "tokens",
            "cache_write_tokens",
            "cache_read_tokens",
            "reasoning_tokens",
            "content_filter_after_tokens",
        )
        for name in counts:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")
        if self.stall_after_tokens is not None and self.stall_after_s <= 0:
            raise ValueError("stall_after_tokens needs stall_after_s > 0")
        if self.drop and self.error_after_tokens is None:
            raise ValueError("drop needs error_after_tokens")

    @property
    def reply_tokens(self) -> int:
        """The number of text tokens of a healthy reply."""
        return DEFAULT_TOKENS if self.tokens is None else self.tokens


def fault_adapter() -> TypeAdapter[Fault]:
    """The pydantic adapter that reads and writes faults at the admin API."""
    return _ADAPTER


_ADAPTER: TypeAdapter[Fault] = TypeAdapter(Fault)
