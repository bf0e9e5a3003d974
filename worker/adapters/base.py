"""The one-method provider interface, and what flows through it.

An adapter translates one `ProviderCall` into one HTTP request and the answer
back into `Event`s. It never retries, never falls back and never sleeps: the
chain wraps adapters, it does not subclass them. Every failure leaves an
adapter as a `worker.errors.ProviderError`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from worker.types import (
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    Reasoning,
    Tool,
    ToolCall,
    ToolChoice,
    Usage,
)

__all__ = [
    "Adapter",
    "Completion",
    "Event",
    "ProviderCall",
    "TextDelta",
    "ToolCallDelta",
    "UsageSoFar",
]


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """One request to one model on one provider.

    The turn's optional fields (`tool_choice` to `parallel_tool_calls`) are None when the
    caller did not set them: an adapter sends what is set, and nothing else.
    """

    model_id: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    max_tokens: int
    stream: bool
    # Anthropic extended thinking's budget (`ModelSettings.thinking_budget_tokens`).
    thinking_budget_tokens: int | None = None
    tool_choice: ToolChoice | None = None
    response_format: JsonSchemaFormat | JsonObjectFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    parallel_tool_calls: bool | None = None
    # The model reasons (`ModelSettings.reasoning`): it takes an effort, and OpenAI's
    # reasoning models refuse the sampling fields.
    reasoning: bool = False


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text, as streamed."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call, as streamed (the name arrives first, arguments later)."""

    index: int
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class UsageSoFar:
    """What the provider says a stream has used before its end (Gemini reports its thinking
    in the chunks ahead of the answer): billed even when the stream is cut. Not content."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class Completion:
    """The whole answer. Always the last event of a successful call."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    # Normalized (`worker.adapters.finish.FinishReason`); None when the provider gave none.
    finish_reason: str | None = None
    reasoning: tuple[Reasoning, ...] = ()
    # What the model said when it refused (finish reason `refusal`).
    refusal: str | None = None
    # The model id the provider says answered (a dated snapshot of an alias), if it says.
    model: str | None = None


Event = TextDelta | ToolCallDelta | UsageSoFar | Completion


class Adapter(Protocol):
    """Speaks one provider API."""

    def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`.

        Only content is yielded: keep-alives and bookkeeping events are consumed
        inside, so the first event marks the first content. Closing the iterator
        early closes the HTTP response.
        """
        ...
