"""A turn's messages: text, images and PDFs, tool calls and reasoning."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from worker.types.base import Frozen, ToolName

# Signatures are opaque provider tokens of a few hundred bytes to a few KiB.
_MAX_SIGNATURE_CHARS = 256 * 1024

# Inline attachments are base64 (the standard alphabet, padded); their size is bounded
# by `[limits]` before a request is parsed. URLs are fetched by the provider, over TLS.
Base64Data = Annotated[str, StringConstraints(min_length=4, pattern=r"^[A-Za-z0-9+/]*={0,2}$")]
HttpsUrl = Annotated[str, StringConstraints(max_length=4096, pattern=r"^https://[^\s]+$")]
ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


class ToolCall(Frozen):
    """A call the assistant asked for; `arguments` is the parsed JSON object."""

    id: str = Field(min_length=1, max_length=256)
    name: ToolName
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Gemini's thoughtSignature on this call: Gemini 3 refuses the next request without it.
    signature: str | None = Field(default=None, max_length=_MAX_SIGNATURE_CHARS)


class Reasoning(Frozen):
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


class TextPart(Frozen):
    """Text, as one part of a message's content."""

    type: Literal["text"] = "text"
    text: str


class _Attachment(Frozen):
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


class Message(Frozen):
    """One message of the conversation, in a provider-neutral shape.

    `content` is text, or a tuple of parts (text, images, documents): images and
    documents come in user messages and tool results only. `is_error` marks a tool
    message whose tool failed: its content is the error the model reads.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str | tuple[Part, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = Field(default=None, max_length=256)
    reasoning: tuple[Reasoning, ...] = ()
    # Written only when set: a turn without a failed tool is as relevo 0.1.0 reads it.
    is_error: bool = Field(default=False, exclude_if=lambda set_: not set_)

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
        if self.is_error and self.role != "tool":
            raise ValueError("only tool messages carry is_error")
        if self.attachments and self.role not in ("user", "tool"):
            raise ValueError("only user and tool messages carry images and documents")
        return self
