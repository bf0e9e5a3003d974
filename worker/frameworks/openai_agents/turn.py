"""What the OpenAI Agents SDK asks a model for, as a relevo `TurnRequest`.

The agent's instructions become the system message; its input items (Responses API
format) become messages: user and system text, images and PDFs; the assistant's text,
function calls and reasoning grouped into one assistant message; function call outputs
as tool messages. Reasoning relevo sealed (`reply.open_carried`) comes back whole;
reasoning items anyone else wrote cannot be read by relevo and are left out. Anything
else relevo cannot carry to every vendor of the chain is refused with `AgentsInputError`
naming it, never dropped: hosted tools, stored prompts and conversations, settings no
vendor-neutral turn has.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem
from agents.model_settings import ModelSettings
from agents.tool import FunctionTool
from agents.tool import Tool as AgentsTool
from pydantic import BaseModel, ValidationError

from worker.frameworks.openai_agents.errors import AgentsInputError
from worker.frameworks.openai_agents.reply import open_carried
from worker.frameworks.options import TurnOptions
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Part,
    Reasoning,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    TurnRequest,
    describe_validation_error,
)

__all__ = ["ModelCall", "turn_request"]

# The SDK's reasoning efforts on relevo's three ("none" asks for no effort: the default).
_EFFORT: dict[str, Literal["low", "medium", "high"] | None] = {
    "none": None,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
# Settings that would change the answer and that no vendor-neutral turn carries.
_REFUSED_SETTINGS = ("frequency_penalty", "presence_penalty", "top_logprobs", "verbosity")
_REFUSED_EXTRAS = ("extra_query", "extra_body", "extra_headers")
# What `extra_args` may carry: the turn's fields the SDK's settings have no name for.
_EXTRA_ARGS = ("seed", "stop")
# The name the SDK's own OpenAI models give the agent's output schema.
_OUTPUT_NAME = "final_output"


@dataclass(frozen=True)
class ModelCall:
    """One call of the SDK's `Model`: what it passes, as it passes it."""

    system_instructions: str | None
    input: str | list[TResponseInputItem]
    model_settings: ModelSettings
    tools: Sequence[AgentsTool]
    output_schema: AgentOutputSchemaBase | None
    handoffs: Sequence[Handoff[Any, Any]]

    @property
    def structured(self) -> bool:
        """The agent wants structured output (its `output_type`), not text."""
        return self.output_schema is not None and not self.output_schema.is_plain_text()


def turn_request(options: TurnOptions, call: ModelCall, *, stream: bool) -> TurnRequest:
    """The turn `call` stands for; `AgentsInputError` names what cannot be carried."""
    messages = []
    if call.system_instructions:
        messages.append(Message(role="system", content=call.system_instructions))
    items = [{"role": "user", "content": call.input}] if isinstance(call.input, str) else call.input
    settings = call.model_settings
    try:
        messages.extend(_Conversation().read(items))
        turn_tools = _tools(call.tools, call.handoffs, options.side_effect_tools)
        fields: dict[str, Any] = {
            **options.fields(settings.timeout),
            "messages": messages,
            "tools": turn_tools,
            "stream": stream,
            **_settings(settings, has_tools=bool(turn_tools)),
        }
        if call.output_schema is not None and call.structured:
            fields["response_format"] = JsonSchemaFormat(
                name=_OUTPUT_NAME,
                json_schema=call.output_schema.json_schema(),
                strict=call.output_schema.is_strict_json_schema(),
            )
        return TurnRequest.model_validate(fields)
    except ValidationError as exc:
        raise AgentsInputError(describe_validation_error(exc)) from None


def _tools(
    tools: Iterable[AgentsTool],
    handoffs: Iterable[Handoff[Any, Any]],
    side_effects: Collection[str],
) -> list[Tool]:
    turn_tools = []
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            raise AgentsInputError(
                f"tool {tool.name!r} is a {type(tool).__name__}: relevo runs function tools only"
            )
        turn_tools.append(
            Tool(
                name=tool.name,
                description=tool.description,
                parameters=tool.params_json_schema,
                side_effects=tool.name in side_effects,
            )
        )
    # The SDK offers a handoff to the model as a function tool it may call.
    turn_tools.extend(
        Tool(name=h.tool_name, description=h.tool_description, parameters=h.input_json_schema)
        for h in handoffs
    )
    return turn_tools


def _settings(settings: ModelSettings, *, has_tools: bool) -> dict[str, Any]:
    for name in (*_REFUSED_SETTINGS, *_REFUSED_EXTRAS):
        if getattr(settings, name) is not None:
            raise AgentsInputError(f"model_settings.{name}: relevo's turns have no such setting")
    extra = dict(settings.extra_args or {})
    unknown = sorted(set(extra) - set(_EXTRA_ARGS))
    if unknown:
        raise AgentsInputError(
            f"model_settings.extra_args: relevo takes seed and stop, not {unknown}"
        )
    fields: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "tool_choice": _tool_choice(settings.tool_choice),
        # The SDK passes its setting with or without tools; a turn without any has no use for it.
        "parallel_tool_calls": settings.parallel_tool_calls if has_tools else None,
        "seed": extra.get("seed"),
        "stop": [extra["stop"]] if isinstance(extra.get("stop"), str) else extra.get("stop"),
    }
    if settings.max_tokens is not None:
        fields["max_tokens"] = settings.max_tokens
    effort = settings.reasoning.effort if settings.reasoning is not None else None
    if effort is not None:
        fields["reasoning_effort"] = _EFFORT.get(effort, effort)
    return fields


def _tool_choice(choice: object) -> ToolChoice | None:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, str):
        return NamedTool(name=choice)
    raise AgentsInputError(f"model_settings.tool_choice: relevo cannot force {choice!r}")


def _item(raw: object) -> Mapping[str, Any]:
    if isinstance(raw, BaseModel):
        return raw.model_dump(exclude_unset=True)
    if isinstance(raw, Mapping):
        return raw
    raise AgentsInputError(f"input item: expected an object, got {type(raw).__name__}")


@dataclass
class _Conversation:
    """Input items read in order; the assistant's items between two others make one message."""

    messages: list[Message] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: list[Mapping[str, Any]] = field(default_factory=list)
    reasoning: list[Reasoning] = field(default_factory=list)
    signatures: dict[str, str] = field(default_factory=dict)

    def read(self, items: Iterable[object]) -> list[Message]:
        for index, raw in enumerate(items):
            item = _item(raw)
            kind = item.get("type", "message")
            if kind == "message" and item.get("role") == "assistant":
                self.text.append(_assistant_text(item.get("content")))
            elif kind == "message":
                self._flush()
                self.messages.append(_message(item))
            elif kind == "function_call":
                self.calls.append(item)
            elif kind == "reasoning":
                carried = open_carried(item.get("encrypted_content"))
                if carried is not None and carried.reasoning is not None:
                    self.reasoning.append(carried.reasoning)
                if carried is not None:
                    self.signatures.update(carried.signatures)
            elif kind == "function_call_output":
                self._flush()
                content = _parts(item.get("output"), where=f"input[{index}].output")
                self.messages.append(
                    Message(role="tool", tool_call_id=item.get("call_id"), content=content)
                )
            else:
                raise AgentsInputError(
                    f"input[{index}]: relevo cannot carry a {kind!r} item (it takes messages, "
                    "function calls and their outputs, and reasoning)"
                )
        self._flush()
        return self.messages

    def _flush(self) -> None:
        if not (self.text or self.calls or self.reasoning):
            return
        calls = tuple(_call(c, self.signatures.get(str(c.get("call_id")))) for c in self.calls)
        text = "\n\n".join(t for t in self.text if t)
        reasoning = tuple(self.reasoning)
        self.messages.append(
            Message(role="assistant", content=text, tool_calls=calls, reasoning=reasoning)
        )
        self.text, self.calls, self.reasoning = [], [], []


def _call(item: Mapping[str, Any], signature: str | None) -> ToolCall:
    raw = item.get("arguments") or "{}"
    try:
        arguments = json.loads(raw)
    except (TypeError, ValueError):
        arguments = None
    if not isinstance(arguments, dict):
        name = item.get("name")
        raise AgentsInputError(f"function call {name!r}: arguments are not a JSON object")
    return ToolCall(
        id=item.get("call_id"), name=item.get("name"), arguments=arguments, signature=signature
    )


def _assistant_text(content: object) -> str:
    if isinstance(content, str):
        return content
    pieces = []
    for raw in content if isinstance(content, list) else []:
        part = _item(raw)
        if part.get("type") == "output_text":
            pieces.append(str(part.get("text", "")))
        elif part.get("type") == "refusal":
            pieces.append(str(part.get("refusal", "")))
    return "".join(pieces)


def _message(item: Mapping[str, Any]) -> Message:
    role = item.get("role")
    if role in ("system", "developer"):
        text = _parts(item.get("content"), where=f"{role} message")
        return Message(role="system", content=text)
    if role != "user":
        raise AgentsInputError(f"input message: relevo cannot carry the role {role!r}")
    return Message(role="user", content=_parts(item.get("content"), where="user message"))


def _parts(content: object, *, where: str) -> str | tuple[Part, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise AgentsInputError(f"{where}: expected text or a list of parts")
    return tuple(_part(_item(p), where) for p in content)


def _part(part: Mapping[str, Any], where: str) -> Part:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(text=str(part.get("text", "")))
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        url: str = part["image_url"]
        if url.startswith("data:"):
            media_type, data = _data_url(url, where)
            return ImagePart.model_validate({"data": data, "media_type": media_type})
        return ImagePart(url=url)
    if kind == "input_file" and (part.get("file_data") or part.get("file_url")):
        name = part.get("filename")
        if part.get("file_url"):
            return DocumentPart(url=part["file_url"], name=name)
        data = str(part["file_data"])
        if data.startswith("data:"):
            media_type, data = _data_url(data, where)
            if media_type != "application/pdf":
                raise AgentsInputError(f"{where}: relevo takes PDF files, not {media_type}")
        return DocumentPart(data=data, name=name)
    raise AgentsInputError(
        f"{where}: relevo cannot carry a {kind!r} part (file ids live on OpenAI's servers)"
        if part.get("file_id")
        else f"{where}: relevo cannot carry a {kind!r} part"
    )


def _data_url(url: str, where: str) -> tuple[str, str]:
    head, _, data = url.partition(",")
    if not head.endswith(";base64") or not data:
        raise AgentsInputError(f"{where}: a data URL must be base64")
    return head.removeprefix("data:").removesuffix(";base64"), data
