"""pydantic-ai's request (messages, settings, request parameters) as relevo's `TurnRequest`.

Every field is mapped or refused with a `PydanticAIInputError` (a `UserError`) naming
it: nothing an agent sends is dropped to make a turn fit. Two exceptions, said here once:
a `CachePoint` (relevo chooses no cache breakpoints) and thinking another pydantic-ai
model wrote (only the vendor that wrote it can read it, and relevo cannot tell which
vendor that was).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai.messages import (
    BinaryContent,
    CachePoint,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.messages import TextPart as TextResponsePart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models._tool_choice import resolve_tool_choice
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from worker.frameworks.options import TurnOptions
from worker.frameworks.pydantic_ai.errors import PydanticAIInputError
from worker.frameworks.pydantic_ai.reasoning import RELEVO, unseal
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Part,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    TurnRequest,
    describe_validation_error,
)

__all__ = ["to_turn"]

Effort = Literal["low", "medium", "high"]
# pydantic-ai's unified `thinking` levels on relevo's three; `True` is the providers' usual default.
_EFFORT: dict[object, Effort | None] = {
    True: "medium",
    False: None,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# A tool return's outcomes that reach the model as an error (pydantic-ai's ERROR_OUTCOMES):
# the tool raised, or its call was refused before it ran.
_FAILED = frozenset({"failed", "retried"})


def to_turn(
    messages: Sequence[ModelMessage],
    settings: ModelSettings | None,
    params: ModelRequestParameters,
    *,
    instructions: Sequence[str],
    options: TurnOptions,
    stream: bool,
) -> TurnRequest:
    """The turn for one pydantic-ai request (`params` as `Model.prepare_request` left them)."""
    settings = settings or {}
    history = list(_messages(messages))
    # Instructions go after the leading system prompts, as pydantic-ai's own adapters put them.
    lead = next((i for i, m in enumerate(history) if m.role != "system"), len(history))
    history[lead:lead] = [Message(role="system", content=text) for text in instructions if text]
    tools, choice = _tools(settings, params, options.side_effect_tools)
    fields: dict[str, Any] = {
        **options.fields(),
        "messages": history,
        "tools": tools,
        "tool_choice": choice,
        "response_format": _response_format(params),
        "temperature": settings.get("temperature"),
        "top_p": settings.get("top_p"),
        "seed": settings.get("seed"),
        "stop": tuple(settings["stop_sequences"]) if settings.get("stop_sequences") else None,
        "reasoning_effort": _EFFORT.get(params.thinking) if params.thinking is not None else None,
        "parallel_tool_calls": settings.get("parallel_tool_calls") if tools else None,
        "stream": stream,
    }
    if "max_tokens" in settings:
        fields["max_tokens"] = settings["max_tokens"]
    try:
        return TurnRequest.model_validate(fields)
    except ValidationError as exc:
        problem = describe_validation_error(exc)
        raise PydanticAIInputError(f"relevo cannot run this request: {problem}") from None


def _messages(messages: Sequence[ModelMessage]) -> Iterator[Message]:
    for message in messages:
        if isinstance(message, ModelRequest):
            yield from _request(message)
        else:
            reply = _response(message)
            if reply is not None:
                yield reply


def _request(message: ModelRequest) -> Iterator[Message]:
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            yield Message(role="system", content=part.content)
        elif isinstance(part, UserPromptPart):
            yield Message(role="user", content=_content(part.content))
        elif isinstance(part, ToolReturnPart):
            text, files = part.model_response_str_and_user_content()
            content = _content([text, *files]) if files else text
            failed = getattr(part, "outcome", "success") in _FAILED
            yield Message(
                role="tool", tool_call_id=part.tool_call_id, content=content, is_error=failed
            )
        elif isinstance(part, RetryPromptPart):  # the deprecated form, on a direct request
            if part.tool_name is None:
                yield Message(role="user", content=part.model_response())
            else:
                content = part.model_response()
                yield Message(
                    role="tool", tool_call_id=part.tool_call_id, content=content, is_error=True
                )
        elif isinstance(part, RetryFeedbackPart):
            yield Message(role="user", content=part.model_response())
        else:
            raise PydanticAIInputError(f"relevo cannot send a {type(part).__name__} to a model")


def _content(content: str | Sequence[UserContent]) -> str | tuple[Part, ...]:
    if isinstance(content, str):
        return content
    parts: list[Part] = []
    for item in content:
        if isinstance(item, str | TextContent):
            text = item if isinstance(item, str) else item.content
            if text:
                parts.append(TextPart(text=text))
        elif isinstance(item, CachePoint):
            continue
        else:
            parts.append(_attachment(item))
    return tuple(parts)


def _attachment(item: object) -> Part:
    if isinstance(item, ImageUrl):
        return ImagePart(url=_https(item.url))
    if isinstance(item, DocumentUrl) and item.media_type == "application/pdf":
        return DocumentPart(url=_https(item.url))
    if isinstance(item, BinaryContent) and item.media_type in _IMAGE_TYPES:
        return ImagePart(data=item.base64, media_type=item.media_type)
    if isinstance(item, BinaryContent) and item.media_type == "application/pdf":
        return DocumentPart(data=item.base64)
    kind = getattr(item, "media_type", None) or type(item).__name__
    raise PydanticAIInputError(
        f"relevo takes text, images (png, jpeg, gif, webp) and PDFs, not {kind}"
    )


def _https(url: str) -> str:
    # relevo never fetches a URL itself: the provider does, so it must be one it can reach safely.
    if not url.startswith("https://"):
        raise PydanticAIInputError(
            "relevo sends attachments by https:// URL or as bytes, not other URLs"
        )
    return url


def _response(message: ModelResponse) -> Message | None:
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning = []
    for part in message.parts:
        if isinstance(part, TextResponsePart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(_call(part))
        elif isinstance(part, ThinkingPart) and part.provider_name == RELEVO and part.signature:
            reasoning.append(unseal(part.signature))
        # Other parts (another model's thinking, native tools' calls, files) have no place
        # in a turn any vendor can be sent: see the module's docstring.
    if not (texts or calls or reasoning):
        return None
    content = "\n\n".join(t for t in texts if t)
    return Message(
        role="assistant", content=content, tool_calls=tuple(calls), reasoning=tuple(reasoning)
    )


def _call(part: ToolCallPart) -> ToolCall:
    details = part.provider_details or {}
    signature = details.get("signature") if part.provider_name == RELEVO else None
    try:
        arguments = part.args_as_dict(raise_if_invalid=True)
    except ValueError:
        # Arguments that are not JSON were the model's mistake: the next turn shows it as sent.
        arguments = {"_raw": part.args_as_json_str()}
    return ToolCall(
        id=part.tool_call_id, name=part.tool_name, arguments=arguments, signature=signature
    )


def _tools(
    settings: ModelSettings, params: ModelRequestParameters, side_effect_tools: frozenset[str]
) -> tuple[tuple[Tool, ...], ToolChoice | None]:
    definitions = params.declared_tool_defs
    resolved = resolve_tool_choice(settings, params)
    choice: ToolChoice
    if isinstance(resolved, tuple):
        mode, names = resolved
        definitions = {name: d for name, d in definitions.items() if name in names}
        forced = mode == "required" and len(names) == 1
        choice = NamedTool(name=next(iter(names))) if forced else mode
    else:
        choice = resolved
    tools = tuple(_tool(d, side_effect_tools) for d in definitions.values())
    if not tools:
        return (), None
    return tools, None if choice == "auto" else choice


def _tool(definition: ToolDefinition, side_effect_tools: frozenset[str]) -> Tool:
    marked = bool((definition.metadata or {}).get("side_effects", False))
    side_effects = marked or definition.name in side_effect_tools
    return Tool(
        name=definition.name,
        description=definition.description or "",
        parameters=definition.parameters_json_schema,
        side_effects=side_effects,
    )


def _response_format(params: ModelRequestParameters) -> JsonSchemaFormat | None:
    output = params.output_object
    if params.output_mode != "native" or output is None:
        return None
    name = re.sub(r"[^A-Za-z0-9_-]", "_", output.name or "final_result")[:64]
    return JsonSchemaFormat(name=name, json_schema=output.json_schema, strict=bool(output.strict))
