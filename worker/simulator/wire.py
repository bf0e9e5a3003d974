"""What the three simulated APIs share: the reply to send and the `Dialect` each API speaks.

A reply is a list of content *pieces* (text tokens, then a tool call's name and
argument fragments); each dialect renders them as its own JSON body or SSE
events, so faults that count tokens work the same way on every API.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from worker.simulator.faults import Fault, StreamPayload
from worker.simulator.json_answer import instance, mismatch

__all__ = [
    "BadRequest",
    "CannedReply",
    "Dialect",
    "Inspection",
    "ToolReply",
    "build_reply",
    "estimate_tokens",
    "fragments",
    "require",
    "sign",
    "sse",
]

_FILLER = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_FRAGMENT_CHARS = 8


class BadRequest(ValueError):
    """The request body is not what the API accepts; answered with a 400 (or `status`).

    `body` is the API's whole error body when the dialect wrote it (a real API's own
    `param` and `code`); None gives the dialect's envelope around the message.
    """

    def __init__(
        self, message: str, *, body: dict[str, Any] | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.body = body
        self.status = status


@dataclass(frozen=True, slots=True)
class Inspection:
    """What the simulator reads from a request body."""

    model: str | None
    stream: bool
    input_tokens: int
    message_count: int
    tools: tuple[str, ...]
    max_tokens: int | None
    include_usage: bool = False
    thinking: bool = False
    """The request asks for extended thinking (Anthropic's `thinking`)."""
    answer_schema: Mapping[str, Any] | None = None
    """The request asks for a JSON answer valid against this schema (structured output)."""
    forced_tool: tuple[str, Mapping[str, Any]] | None = None
    """The request forces a call to this tool (its name and input schema)."""


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A tool call the simulated model makes; each dialect prefixes `id` its own way."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON text OpenAI sends."""
        return json.dumps(dict(self.arguments), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class CannedReply:
    """One answer, before it is put on the wire."""

    seq: int
    model: str
    created: int
    tokens: tuple[str, ...]
    tool: ToolReply | None
    input_tokens: int
    """The prompt's tokens not in the cache (the request's estimate)."""
    truncated: bool
    include_usage: bool
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    filtered: bool = False
    """The provider's content filter stopped the answer after `tokens`."""
    thinking: bool = False
    redacted_thinking: bool = False
    refusal: str | None = None
    """The model refuses, with these words (and no answer)."""

    @property
    def thought(self) -> str:
        """The thinking text of a reply that thinks (Anthropic extended thinking)."""
        return f"The user asks {self.model} something; answer briefly."

    @property
    def text(self) -> str:
        """The whole text."""
        return "".join(self.tokens)

    @property
    def content_tokens(self) -> int:
        """Text tokens plus a rough count for the tool call: the output that is sent."""
        tool = (
            0 if self.tool is None else estimate_tokens(self.tool.name + self.tool.arguments_json)
        )
        return len(self.tokens) + tool

    @property
    def output_tokens(self) -> int:
        """Every output token: the content and the hidden reasoning."""
        return self.content_tokens + self.reasoning_tokens

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt: uncached, written to the cache and read from it."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens."""
        return self.prompt_tokens + self.output_tokens


class Dialect(Protocol):
    """One provider API's request fields, bodies and stream events."""

    api: str
    separator: bytes

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read the request; raise `BadRequest` when the API would refuse it."""
        ...

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """The non-streaming success body."""
        ...

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """Stream events sent before any content (bookkeeping only)."""
        ...

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """One chunk of stream events per content piece."""
        ...

    def ending(self, reply: CannedReply) -> list[bytes]:
        """Stream events after the content: finish reason, usage, end marker."""
        ...

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """A mid-stream error event (`payload` replaces the usual data)."""
        ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The API's error envelope for `status`."""
        ...


def sse(data: Any, *, event: str | None = None, separator: bytes = b"\n\n") -> bytes:
    """One server-sent event whose data is `data` as JSON (or as it is, when a str)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {text}".encode() + separator


def sign(*parts: object) -> str:
    """The simulator's signature over `parts`: a follow-up request must send back what it
    signed, unchanged, as a provider's own signatures are checked."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    return "c2lt" + digest.hexdigest()[:40]


def estimate_tokens(text: str) -> int:
    """About four characters a token, at least one.

    Callers pass JSON with its non-ASCII escaped, so a CJK character (`\\u4e2d`) counts
    1.5 tokens and an emoji 3: what providers bill, not a quarter of it.
    """
    return max(1, len(text) // 4)


def fragments(text: str) -> list[str]:
    """`text` cut in short pieces, as tool-call arguments are streamed."""
    return [text[i : i + _FRAGMENT_CHARS] for i in range(0, len(text), _FRAGMENT_CHARS)] or [""]


def build_reply(seq: int, model: str, fault: Fault, request: Inspection) -> CannedReply:
    """The deterministic answer of `model` to `request`: "Answer from <model>." then filler."""
    words = ["Answer", "from", f"{model}."]
    wanted = fault.reply_tokens
    limit = request.max_tokens
    truncated = fault.reply_tool is None and limit is not None and wanted > limit
    count = min(wanted, limit) if truncated and limit is not None else wanted
    tokens: list[str] = []
    for i in range(count):
        word = words[i] if i < len(words) else _FILLER[(i - len(words)) % len(_FILLER)]
        tokens.append(word if i == 0 else f" {word}")
    tool = None
    if fault.reply_tool is not None:
        tool = ToolReply(f"{seq:08d}", fault.reply_tool, dict(fault.tool_args))
        if not fault.tool_with_text:
            tokens = []
    if request.forced_tool is not None and fault.reply_tool is None:
        name, schema = request.forced_tool
        arguments = mismatch(schema) if fault.invalid_output else instance(schema)
        tool, tokens, truncated = ToolReply(f"{seq:08d}", name, arguments), [], False
    elif request.answer_schema is not None and tool is None:
        schema = request.answer_schema
        answer = mismatch(schema) if fault.invalid_output else instance(schema)
        tokens, truncated = fragments(json.dumps(answer)), False
    filtered = fault.content_filter_after_tokens is not None
    if fault.content_filter_after_tokens is not None:
        tokens, tool, truncated = tokens[: fault.content_filter_after_tokens], None, False
    elif fault.refusal is not None:
        tokens, tool, truncated = [], None, False
    return CannedReply(
        seq=seq,
        model=fault.answer_model or model,
        created=int(time.time()),
        tokens=tuple(tokens),
        tool=tool,
        input_tokens=request.input_tokens,
        truncated=truncated,
        include_usage=request.include_usage,
        cache_write_tokens=fault.cache_write_tokens,
        cache_read_tokens=fault.cache_read_tokens,
        reasoning_tokens=fault.reasoning_tokens,
        filtered=filtered,
        thinking=request.thinking,
        redacted_thinking=request.thinking and fault.redacted_thinking,
        refusal=fault.refusal,
    )


def require(body: Mapping[str, Any], key: str, kind: type) -> Any:
    """`body[key]`, which must be a `kind` (never a bool), else `BadRequest` naming the key."""
    value = body.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"{key}: field required, of type {kind.__name__}")
    return value
