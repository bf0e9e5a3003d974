"""The body of one Converse request: content blocks, tools and tool choice, inference
configuration, Claude's thinking and structured output, as the Bedrock Runtime API
reference (ConverseRequest and the shapes it names) documents them.

What Converse has no field for is either not sent (`seed`, `parallel_tool_calls`: the
API has none) or makes Bedrock unfit for the turn (`tool_choice: "none"`, a temperature
above 1, a document with no text beside it): capability fit skips it (`wire_limits`), and
the `InvalidRequest` raised here is a backstop. Nothing is dropped to make a request fit.
`docs/providers.md` has the whole table.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from worker.adapters.anthropic import may_think
from worker.adapters.base import ProviderCall
from worker.adapters.body import Verbatim
from worker.adapters.claude_options import AnswerTool, generation, thinking_budget
from worker.adapters.claude_options import answer_tool as claude_answer_tool
from worker.adapters.claude_schema import claude_schema
from worker.adapters.wire_limits import converse_tool_family
from worker.errors import InvalidRequest
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Reasoning,
    TextPart,
    Tool,
)

__all__ = ["ANSWER_TOOL", "answer_tool", "converse_body"]

# A `json_object` answer, where Converse has no JSON mode (its `outputConfig.textFormat`
# takes a JSON schema, not "any object"): a tool whose input is the answer, forced. Its
# input comes back as the completion's text.
ANSWER_TOOL = "json_answer"
_ANSWER_SCHEMA = {"type": "object"}
_ANSWER_DESCRIPTION = "Give your answer with this tool: its input is the whole answer."
_MAX_TEMPERATURE = 1.0  # InferenceConfiguration.temperature: 0 to 1
# DocumentBlock.name: alphanumerics, single whitespace, hyphens, parentheses, square
# brackets; 1 to 200 characters; unique in a request.
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9()\[\]-]+")
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_MAX_NAME_CHARS = 200
# ToolUseId, in toolUse and toolResult alike: 1 to 64 of these characters.
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_.:-]{1,64}")


def answer_tool(call: ProviderCall, origin: str) -> AnswerTool | None:
    """The forced tool that carries the answer of `call` (to a model of `origin`'s family),
    if it has one: a `json_object` answer's (`ANSWER_TOOL`, suffixed when one of the
    turn's tools already has that name), or a JSON schema's for a Claude before 4.5, which
    has no structured outputs (as on Anthropic's own API: `claude_options.answer_tool`)."""
    if call.tool_choice == "required" or isinstance(call.tool_choice, NamedTool):
        return None  # the turn forces its own tool: no text answer will come
    if isinstance(call.response_format, JsonSchemaFormat):
        native = origin != "anthropic" or generation(call.model_id).structured_outputs
        return None if native else claude_answer_tool(call, native=False)
    if not isinstance(call.response_format, JsonObjectFormat):
        return None
    taken = {tool.name for tool in call.tools}
    name, n = ANSWER_TOOL, 1
    while name in taken:
        n += 1
        name = f"{ANSWER_TOOL}_{n}"
    return AnswerTool(name, _ANSWER_SCHEMA, wrapped=False)


def converse_body(call: ProviderCall, origin: str) -> dict[str, Any]:
    """The JSON body of a Converse (or ConverseStream) request for `call`, for a model of
    `origin`'s family (`anthropic` for Claude: its thinking, its reasoning blocks)."""
    answer = answer_tool(call, origin)
    tool_config = _tool_config(call, answer)
    forced = tool_config.get("toolChoice", {}).keys() & {"any", "tool"}
    thinking = _thinking(call, origin, forced=bool(forced))
    # A Claude that takes only adaptive thinking refuses the sampling fields, always.
    adaptive_only = origin == "anthropic" and generation(call.model_id).adaptive_only
    body: dict[str, Any] = {
        "messages": _messages(call.messages, origin, call.model_id),
        "inferenceConfig": _inference(call, sampling=thinking is None and not adaptive_only),
    }
    system = "\n\n".join(m.text for m in call.messages if m.role == "system" and m.text)
    if system:
        body["system"] = [{"text": system}]
    if tool_config:
        body["toolConfig"] = tool_config
    if thinking is not None:
        # Claude's own request field, passed through Converse as the model's.
        body["additionalModelRequestFields"] = {"thinking": thinking}
    output: dict[str, Any] = {}
    if adaptive_only and call.reasoning and call.reasoning_effort is not None:
        # OutputConfig.effort: Claude's `output_config.effort`, as on Anthropic's own API.
        output["effort"] = call.reasoning_effort
    if isinstance(call.response_format, JsonSchemaFormat) and answer is None:
        # OutputConfig.textFormat: the schema travels as a JSON string; Bedrock always
        # enforces it (constrained decoding), so `strict` has no field of its own. Claude
        # decodes against its subset of JSON Schema: the schema made to fit it, as on
        # Anthropic's own API (relevo checks the answer against the caller's whole one).
        wanted = call.response_format
        schema = claude_schema(wanted.json_schema) if origin == "anthropic" else wanted.json_schema
        definition = {"schema": json.dumps(schema), "name": wanted.name}
        structure = {"jsonSchema": definition}
        output["textFormat"] = {"type": "json_schema", "structure": structure}
    if output:
        body["outputConfig"] = output
    return body


def _inference(call: ProviderCall, *, sampling: bool) -> dict[str, Any]:
    """InferenceConfiguration; Claude refuses temperature and topP while it thinks, and a
    Claude that takes only adaptive thinking always."""
    config: dict[str, Any] = {"maxTokens": call.max_tokens}
    if call.temperature is not None and call.temperature > _MAX_TEMPERATURE:
        raise InvalidRequest(f"Converse takes a temperature from 0 to 1, not {call.temperature}")
    if sampling:
        if call.temperature is not None:
            config["temperature"] = call.temperature
        if call.top_p is not None:
            config["topP"] = call.top_p
    if call.stop is not None:
        config["stopSequences"] = list(call.stop)
    return config


def _tool_config(call: ProviderCall, answer: AnswerTool | None) -> dict[str, Any]:
    """ToolConfiguration: the tools, and the ToolChoice union (`auto`, `any`, `tool`)."""
    choice = call.tool_choice
    if choice == "none" and call.tools:
        # ToolChoice has no "none", and leaving the tools out would change the turn.
        raise InvalidRequest(
            "Converse has no tool_choice 'none' (its toolChoice is auto, any or tool)"
        )
    tools = [_tool_spec(tool) for tool in call.tools]
    if answer is not None:
        spec = {"name": answer.name, "description": _ANSWER_DESCRIPTION}
        tools.append({"toolSpec": {**spec, "inputSchema": {"json": dict(answer.input_schema)}}})
    if not tools:
        return {}
    config: dict[str, Any] = {"tools": tools}
    if isinstance(choice, NamedTool):
        if not converse_tool_family(call.model_id):
            # Capability fit skips the model (`wire_limits`); `any` would change the turn.
            raise InvalidRequest("Converse takes a named tool_choice from Claude and Nova only")
        config["toolChoice"] = {"tool": {"name": choice.name}}
    elif choice == "required" or answer is not None:
        config["toolChoice"] = {"any": {}}  # a turn tool, or the answer tool
    elif choice == "auto":
        config["toolChoice"] = {"auto": {}}
    return config


def _tool_spec(tool: Tool) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": tool.parameters}}
    if tool.description:
        spec["description"] = tool.description  # Bedrock refuses an empty one
    return {"toolSpec": spec}


def _thinking(call: ProviderCall, origin: str, *, forced: bool) -> dict[str, Any] | None:
    """Claude's `thinking` for this call, or None when it does not think.

    As on Anthropic's own API (`claude_options`): a budget (`thinking_budget`), or
    adaptive thinking for a model that takes only that. Never while a tool is forced
    (Claude refuses thinking with `any` or `tool`), nor on a tool loop another vendor
    wrote (`may_think`)."""
    if origin != "anthropic" or forced or not may_think(call.messages):
        return None
    if generation(call.model_id).adaptive_only:
        effort = call.reasoning_effort if call.reasoning else None
        asked = call.thinking_budget_tokens is not None or effort is not None
        return {"type": "adaptive"} if asked else None
    budget = thinking_budget(call)
    return None if budget is None else {"type": "enabled", "budget_tokens": budget}


def _messages(messages: tuple[Message, ...], origin: str, model_id: str) -> list[dict[str, Any]]:
    """Converse's alternating user and assistant messages. Tool results, and a user message
    that follows them, share one user message (Converse refuses two in a row).

    Converse refuses a blank text block, so none is sent: a message with nothing else
    (an assistant that said nothing, called no tool and kept no reasoning for this
    family; an empty user message) is left out, and the messages either side of it join."""
    names = _DocumentNames()
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if message.role == "assistant":
            blocks = _assistant_blocks(message, origin)
        elif message.role == "tool":
            status = converse_tool_family(model_id)
            blocks = [{"toolResult": _tool_result(message, names, status=status)}]
        else:
            blocks = _part_blocks(message, names)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for converse in out:
        content = converse["content"]
        if any("document" in b for b in content) and not any("text" in b for b in content):
            # Message.content: a document block needs a text block beside it.
            raise InvalidRequest("Converse needs text beside a document in the same user message")
    return out


def _assistant_blocks(message: Message, origin: str) -> list[dict[str, Any]]:
    # Reasoning goes back first, and only what this model's family wrote.
    # Claude refuses thinking without its signature (as the Anthropic adapter drops it).
    blocks = [
        _reasoning_block(r)
        for r in message.reasoning
        if r.origin == origin and (origin != "anthropic" or r.signature or r.redacted)
    ]
    if message.text.strip():
        blocks.append({"text": message.text})
    blocks.extend(
        {"toolUse": {"toolUseId": _tool_use_id(c.id), "name": c.name, "input": c.arguments}}
        for c in message.tool_calls
    )
    return blocks


def _tool_use_id(call_id: str | None) -> str:
    """`call_id` as Converse takes it: itself when it fits ToolUseId, else a stable id
    that does (another vendor's ids may be longer or hold `|`, `=`...). The same call id
    always maps to the same, so a call and its result still pair up, on every turn; the
    ids the model answers with are its own, which fit, so nothing maps back."""
    given = call_id or ""
    if _TOOL_USE_ID.fullmatch(given):
        return given
    return "relevo_" + hashlib.sha256(given.encode()).hexdigest()[:40]


def _tool_result(message: Message, names: _DocumentNames, *, status: bool) -> dict[str, Any]:
    """ToolResultBlock: its content takes text, image and document blocks alike; a failed
    tool's says so in `status`, to the families that take one (`status`)."""
    content = _part_blocks(message, names) or [{"text": message.text}]
    block: dict[str, Any] = {"toolUseId": _tool_use_id(message.tool_call_id), "content": content}
    if message.is_error and status:  # the others refuse it; their report names it left out
        block["status"] = "error"
    return block


def _part_blocks(message: Message, names: _DocumentNames) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text.strip():  # Converse refuses a blank text block
                blocks.append({"text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append({"image": _image(part)})
        else:
            blocks.append({"document": _document(part, names)})
    return blocks


def _image(part: ImagePart) -> dict[str, Any]:
    """ImageBlock: a format and the bytes (base64 in the JSON body); no URL source."""
    if part.data is None or part.media_type is None:
        raise InvalidRequest("Converse takes images as bytes, not by URL")
    # ImageFormat is png | jpeg | gif | webp: the media types' own subtypes.
    return {
        "format": part.media_type.removeprefix("image/"),
        "source": {"bytes": Verbatim(part.data)},
    }


def _document(part: DocumentPart, names: _DocumentNames) -> dict[str, Any]:
    """DocumentBlock: format, a name Converse accepts, and the bytes; no URL source."""
    if part.data is None:
        raise InvalidRequest("Converse takes documents as bytes, not by URL")
    return {
        "format": "pdf",
        "name": names.take(part.name),
        "source": {"bytes": Verbatim(part.data)},
    }


class _DocumentNames:
    """Names for a request's documents: each part's own file name, its extension dropped
    and every character Converse refuses turned into a space ("Q3_report.v2.pdf" is
    "Q3 report v2"); "document" when nothing is left; " (2)", " (3)"... on a repeat."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, name: str | None) -> str:
        base = _NOT_IN_NAME.sub(" ", _EXTENSION.sub("", name or ""))
        base = " ".join(base.split())[:_MAX_NAME_CHARS].strip() or "document"
        chosen, n = base, 1
        while chosen.lower() in self._taken:
            n += 1
            suffix = f" ({n})"
            chosen = base[: _MAX_NAME_CHARS - len(suffix)].rstrip() + suffix
        self._taken.add(chosen.lower())
        return chosen


def _reasoning_block(reasoning: Reasoning) -> dict[str, Any]:
    if reasoning.redacted is not None:
        return {"reasoningContent": {"redactedContent": reasoning.redacted}}
    text: dict[str, str] = {"text": reasoning.text}
    if reasoning.signature is not None:
        text["signature"] = reasoning.signature
    return {"reasoningContent": {"reasoningText": text}}
