"""The turn as callers see it: what goes in (`TurnRequest`) and what comes out (`TurnResult`)."""

from __future__ import annotations

import json
import uuid
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    model_validator,
)

from worker.errors import InputError, TurnFailed

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "DocumentPart",
    "ImagePart",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "Message",
    "NamedTool",
    "Part",
    "Reasoning",
    "Reply",
    "ResponseFormat",
    "Status",
    "TenantId",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "TurnRequest",
    "TurnResult",
    "Usage",
    "parse_turn_request",
]

# Tenant ids and turn ids become parts of Redis keys: a short, plain alphabet.
TenantId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
TurnId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


# Signatures are opaque provider tokens of a few hundred bytes to a few KiB.
_MAX_SIGNATURE_CHARS = 256 * 1024

# Inline attachments are base64 (the standard alphabet, padded); their size is bounded
# by `[limits]` before a request is parsed. URLs are fetched by the provider, over TLS.
Base64Data = Annotated[str, StringConstraints(min_length=4, pattern=r"^[A-Za-z0-9+/]*={0,2}$")]
HttpsUrl = Annotated[str, StringConstraints(max_length=4096, pattern=r"^https://[^\s]+$")]
ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """A call the assistant asked for; `arguments` is the parsed JSON object."""

    id: str = Field(min_length=1, max_length=256)
    name: ToolName
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Gemini's thoughtSignature on this call: Gemini 3 refuses the next request without it.
    signature: str | None = Field(default=None, max_length=_MAX_SIGNATURE_CHARS)


class Reasoning(_Frozen):
    """A model's thinking that its vendor wants back, unchanged, on the next turn.

    Opaque to relevo. `origin` is the model family that wrote it (`anthropic`, `google`,
    `openai`): a call carries only what the target's own family wrote, so a turn that
    falls back to another vendor leaves it out instead of sending something that vendor
    cannot read (the attempt's report counts what was left out).
    """

    origin: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    text: str = ""
    signature: str | None = Field(default=None, max_length=_MAX_SIGNATURE_CHARS)
    # Thinking the provider returns encrypted (Anthropic's redacted_thinking).
    redacted: str | None = Field(default=None, max_length=_MAX_SIGNATURE_CHARS)
    # An OpenAI Responses reasoning item: its id (`rs_...`) and `encrypted_content`;
    # `text` holds its summary.
    id: str | None = Field(default=None, max_length=256)
    encrypted: str | None = Field(default=None, max_length=_MAX_SIGNATURE_CHARS)


class TextPart(_Frozen):
    """Text, as one part of a message's content."""

    type: Literal["text"] = "text"
    text: str


class _Attachment(_Frozen):
    """Inline bytes (`data`, base64) or a URL the provider fetches (never relevo)."""

    data: Base64Data | None = None
    url: HttpsUrl | None = None

    @property
    def size_bytes(self) -> int | None:
        """What `data` decodes to, in bytes (counted, not decoded); None for a URL."""
        data = self.data
        if data is None:
            return None
        return len(data) * 3 // 4 - (2 if data.endswith("==") else data.endswith("="))

    @model_validator(mode="after")
    def _one_source(self) -> _Attachment:
        if (self.data is None) == (self.url is None):
            raise ValueError("give either data (base64) or url, not both or neither")
        return self


class ImagePart(_Attachment):
    """An image: `media_type` says its format (required with `data`)."""

    type: Literal["image"] = "image"
    media_type: ImageType | None = None

    @model_validator(mode="after")
    def _typed(self) -> ImagePart:
        if self.data is not None and self.media_type is None:
            raise ValueError("an image given as data needs its media_type")
        return self


class DocumentPart(_Attachment):
    """A document (a PDF), with the file name it goes by, if any."""

    type: Literal["document"] = "document"
    media_type: Literal["application/pdf"] = "application/pdf"
    name: str | None = Field(default=None, min_length=1, max_length=256)


Part = Annotated[TextPart | ImagePart | DocumentPart, Field(discriminator="type")]


class Message(_Frozen):
    """One message of the conversation, in a provider-neutral shape.

    `content` is text, or a tuple of parts (text, images, documents): images and
    documents come in user messages and tool results only.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str | tuple[Part, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = Field(default=None, max_length=256)
    reasoning: tuple[Reasoning, ...] = ()

    @property
    def parts(self) -> tuple[TextPart | ImagePart | DocumentPart, ...]:
        """The content as parts: text content is one text part (none when empty)."""
        if isinstance(self.content, str):
            return (TextPart(text=self.content),) if self.content else ()
        return self.content

    @property
    def text(self) -> str:
        """The content's text, its text parts joined by blank lines."""
        if isinstance(self.content, str):
            return self.content
        return "\n\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def attachments(self) -> tuple[ImagePart | DocumentPart, ...]:
        """The content's images and documents."""
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if not isinstance(p, TextPart))

    @model_validator(mode="after")
    def _shape(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.reasoning and self.role != "assistant":
            raise ValueError("only assistant messages carry reasoning")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("only tool messages carry a tool_call_id")
        if self.attachments and self.role not in ("user", "tool"):
            raise ValueError("only user and tool messages carry images and documents")
        return self


class Tool(_Frozen):
    """A tool the model may call. `side_effects` marks tools that change the world."""

    name: ToolName
    description: str = Field(default="", max_length=4096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    side_effects: bool = False


class NamedTool(_Frozen):
    """`tool_choice` forcing one tool, by name (it must be one of the turn's tools)."""

    name: ToolName


ToolChoice = Literal["auto", "none", "required"] | NamedTool


class JsonSchemaFormat(_Frozen):
    """Answer with JSON that validates against `schema` (a JSON Schema object)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )

    type: Literal["json_schema"] = "json_schema"
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool = False  # as OpenAI: true asks for its strict subset of JSON Schema

    @model_validator(mode="after")
    def _a_schema(self) -> JsonSchemaFormat:
        try:
            Draft202012Validator.check_schema(self.json_schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(f"not a JSON Schema (at {where}: {exc.message[:200]})") from None
        return self


class JsonObjectFormat(_Frozen):
    """Answer with a JSON object, of no particular schema."""

    type: Literal["json_object"] = "json_object"


ResponseFormat = Annotated[JsonSchemaFormat | JsonObjectFormat, Field(discriminator="type")]


class TurnRequest(_Frozen):
    """One agent turn: one LLM request with its messages and tools.

    The sampling fields, `seed`, `reasoning_effort` and `parallel_tool_calls` are sent
    only when set: unset, each provider's own default applies.
    """

    turn_id: TurnId = Field(default_factory=lambda: uuid.uuid4().hex)
    tenant_id: TenantId
    messages: tuple[Message, ...] = Field(min_length=1)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    max_tokens: int = Field(default=1024, ge=1, le=200_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    # Four: the fewest any provider takes (OpenAI's Chat Completions).
    stop: tuple[Annotated[str, StringConstraints(min_length=1, max_length=256)], ...] | None = (
        Field(default=None, min_length=1, max_length=4)
    )
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    deadline_s: float = Field(default=60.0, gt=0, le=3600)

    @cached_property
    def attachment_kinds(self) -> frozenset[str]:
        """The kinds of attachment the turn carries (`image`, `document`), for fitting."""
        return frozenset(p.type for m in self.messages for p in m.attachments)

    @model_validator(mode="before")
    @classmethod
    def _encodable(cls, data: Any) -> Any:
        # Python's JSON decoder (Celery's) lets lone surrogates through; no request can carry them.
        where = lone_surrogate(data)
        if where is not None:
            raise ValueError(f"{where}: text with a lone surrogate is not valid Unicode")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TurnRequest:
        if self.messages[-1].role not in ("user", "tool"):
            raise ValueError("the last message must come from the user or a tool")
        names = [tool.name for tool in self.tools]
        if len(names) != len(set(names)):
            raise ValueError("tool names must be unique")
        choice = self.tool_choice
        if isinstance(choice, NamedTool) and choice.name not in names:
            raise ValueError(f"tool_choice names {choice.name!r}, which is not one of the tools")
        if choice == "required" and not self.tools:
            raise ValueError("tool_choice is 'required' but the turn has no tools")
        if self.parallel_tool_calls is not None and not self.tools:
            raise ValueError("parallel_tool_calls is set but the turn has no tools")
        return self


def lone_surrogate(value: object) -> str | None:
    """The path of a string (or key) in `value` that cannot be encoded as UTF-8, if any."""
    stack: list[tuple[str, object]] = [("(root)", value)]
    while stack:  # a loop, not recursion: the nesting depth is the sender's choice
        where, item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return where
        elif isinstance(item, dict):
            for key, child in item.items():
                shown = str(key).encode("utf-8", "backslashreplace").decode()
                path = shown if where == "(root)" else f"{where}.{shown}"
                stack.extend(((path, key), (path, child)))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}.{i}".removeprefix("(root)."), c) for i, c in enumerate(item))
    return None


def parse_turn_request(
    data: bytes | str | dict[str, Any], *, ignore_unknown: bool = False
) -> TurnRequest:
    """Validate a turn request from JSON or a dict; `InputError` names the bad field.

    A field the request does not know is refused, as any other mistake of its sender's;
    `ignore_unknown` drops it instead, for a turn a newer release queued (a worker's read).
    """
    extra: Literal["ignore", "forbid"] = "ignore" if ignore_unknown else "forbid"
    try:
        if isinstance(data, dict):
            return TurnRequest.model_validate(data, extra=extra)
        return TurnRequest.model_validate_json(data, extra=extra)
    except ValidationError as exc:
        raise InputError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError, *, most: int | None = None) -> str:
    """One line per problem (the first `most`), each naming its field; never echoes the
    input value."""
    errors = exc.errors(include_input=False, include_url=False)
    lines = []
    for error in errors[:most]:
        where = ".".join(str(part) for part in error["loc"]) or "(root)"
        message = error["msg"]
        if error["type"] == "union_tag_invalid":  # pydantic's message quotes the tag given
            ctx = error.get("ctx", {})
            message = f"{ctx.get('discriminator')} is not one of {ctx.get('expected_tags')}"
        lines.append(f"{where}: {message}")
    if len(errors) > len(lines):
        lines.append(f"and {len(errors) - len(lines)} more")
    return "; ".join(lines)


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


class Usage(_Frozen):
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


class Reply(_Frozen):
    """The assistant's answer: text, tool calls, and the reasoning to send back with them.

    `parsed` is the text read as JSON when the turn asked for a `response_format` (and
    validated against its schema); `refusal` is what the model said when it refused.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[Reasoning, ...] = ()
    parsed: Any = None
    refusal: str | None = None


class Attempt(_Frozen):
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


FinishReasonName = Literal["stop", "length", "tool_calls", "content_filter", "refusal", "other"]


class TurnResult(_Frozen):
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

    _errors: tuple[Exception, ...] = PrivateAttr(default=())

    def raise_for_status(self) -> TurnResult:
        """Raise `TurnFailed` with every attempt's error unless a model answered."""
        if self.status in (Status.FAILED, Status.REJECTED):
            errors = list(self._errors) or [RuntimeError(self.reason or self.status)]
            raise TurnFailed(f"turn {self.turn_id} {self.status}: {self.reason}", errors)
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)
