"""A `ProviderCall` as the body of a Gemini generateContent request (Gemini API and Vertex AI).

Three choices depend on the model's generation, read from its id: a model named
`gemini-3…` or later takes `thinkingLevel`, media inside a `functionResponse`, and a
response schema beside function declarations; any other (Gemini 2.x, an alias, a tuned
model) gets what every Gemini model takes: `thinkingBudget`, tool-result media as parts
after the function responses, and the schema as an instruction when the turn has tools.
See docs/providers.md for the table.
"""

from __future__ import annotations

import json
import re
from typing import Any

from worker.adapters.base import ProviderCall
from worker.adapters.body import Verbatim
from worker.adapters.wire_limits import GEMINI_IMAGE_TYPES, image_type
from worker.errors import InvalidRequest
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    Message,
    NamedTool,
    TextPart,
    ToolCall,
)

__all__ = ["ORIGIN", "SKIP_SIGNATURE", "request_body", "thinking_tokens"]

ORIGIN = "google"  # the `Reasoning.origin` of Gemini's signatures, wherever served
# Google's documented stand-in for a function call Gemini did not write (a turn that
# fell back from another vendor): "Thought signatures", Gemini API docs.
SKIP_SIGNATURE = "skip_thought_signature_validator"

# Google's own mapping of an OpenAI reasoning effort to a Gemini 2.5 thinking budget
# ("OpenAI compatibility", Gemini API docs); each fits every 2.5 model's range.
_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576}
_GENERATION = re.compile(r"^gemini-(\d+)")
_INT32 = 2**32


def _gemini3(model_id: str) -> bool:
    """The id names Gemini 3 or later (`gemini-3-pro-preview`, `gemini-3.1-flash`)."""
    match = _GENERATION.match(model_id)
    return match is not None and int(match.group(1)) >= 3


def request_body(call: ProviderCall, *, vertex: bool) -> dict[str, Any]:
    """The JSON body for `call`; `vertex`: Vertex AI, whose `fileData` needs a `mimeType`."""
    newer = _gemini3(call.model_id)
    body: dict[str, Any] = {
        "contents": _contents(call.messages, newer=newer, vertex=vertex),
        "generationConfig": _generation(call, native_schema=newer or not call.tools),
    }
    system = "\n\n".join(m.text for m in call.messages if m.role == "system")
    instruction = None if newer or not call.tools else _schema_instruction(call)
    system = "\n\n".join(s for s in (system, instruction) if s)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if call.tools:
        # `parameters` is an OpenAPI subset (one `type`, no `const`, `oneOf`, `$defs`...);
        # a tool's schema is JSON Schema, which `parametersJsonSchema` takes as it is.
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
            for t in call.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
        if call.tool_choice is not None:
            body["toolConfig"] = {"functionCallingConfig": _calling(call)}
    return body


def _generation(call: ProviderCall, *, native_schema: bool) -> dict[str, Any]:
    # An int32 on both APIs: a wider seed is folded into that range, still one seed.
    seed = None if call.seed is None else (call.seed + _INT32 // 2) % _INT32 - _INT32 // 2
    sampling = {
        "temperature": call.temperature,
        "topP": call.top_p,
        "stopSequences": None if call.stop is None else list(call.stop),
        "seed": seed,
    }
    config: dict[str, Any] = {"maxOutputTokens": call.max_tokens}
    config.update((name, value) for name, value in sampling.items() if value is not None)
    wanted = call.response_format
    if wanted is not None and native_schema:
        config["responseMimeType"] = "application/json"
        if not isinstance(wanted, JsonObjectFormat):
            config["responseJsonSchema"] = wanted.json_schema
    thinking = _thinking(call)
    if thinking is not None:
        config["thinkingConfig"] = thinking
    return config


def thinking_tokens(call: ProviderCall) -> int:
    """The thinking budget `call` sends (`thinkingBudget`), 0 when it sends none. Google
    documents it beside `maxOutputTokens`, not inside it: the call may bill both."""
    thinking = _thinking(call)
    return 0 if thinking is None else int(thinking.get("thinkingBudget", 0))


def _thinking(call: ProviderCall) -> dict[str, Any] | None:
    effort = call.reasoning_effort
    if not call.reasoning or effort is None:
        return None
    if not _gemini3(call.model_id):
        return {"thinkingBudget": _BUDGETS[effort]}
    # Gemini 3 Pro takes LOW and HIGH only ("Gemini thinking"): medium is its default, HIGH.
    if effort == "medium" and call.model_id.startswith("gemini-3-pro"):
        return {"thinkingLevel": "HIGH"}
    return {"thinkingLevel": effort.upper()}


def _calling(call: ProviderCall) -> dict[str, Any]:
    choice = call.tool_choice
    if isinstance(choice, NamedTool):
        return {"mode": "ANY", "allowedFunctionNames": [choice.name]}
    mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
    return {"mode": mode[str(choice)]}


def _schema_instruction(call: ProviderCall) -> str | None:
    """Gemini 2.x refuses a response MIME type beside function declarations: the schema
    goes in the system instruction instead (relevo checks the answer either way)."""
    wanted = call.response_format
    if wanted is None:
        return None
    if isinstance(wanted, JsonObjectFormat):
        return "When you answer without calling a tool, answer with one JSON object only."
    schema = json.dumps(wanted.json_schema, separators=(",", ":"))
    return (
        "When you answer without calling a tool, answer with JSON only, valid against "
        f"this JSON Schema ({wanted.name}): {schema}"
    )


def _contents(messages: tuple[Message, ...], *, newer: bool, vertex: bool) -> list[dict[str, Any]]:
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        # One turn per role change: parallel function responses must share one turn.
        if not out or out[-1]["role"] != role:
            out.append({"role": role, "parts": []})
        parts: list[dict[str, Any]] = out[-1]["parts"]
        if message.role == "tool":
            # The call's id pairs the response with its call (parallel calls to one
            # function); its name is required too.
            call_id = message.tool_call_id or ""
            response, loose = _function_response(
                message, call_id, names.get(call_id, call_id), newer
            )
            # The turn's function responses come first, media after them all.
            at = sum(1 for part in parts if "functionResponse" in part)
            parts.insert(at, response)
            parts.extend(_attachment(p, vertex=vertex) for p in loose)
        elif message.role == "assistant":
            signature = _text_signature(message)
            if message.text or signature:  # an empty text part only to carry its signature
                parts.append(_signed({"text": message.text}, signature))
            parts.extend(_function_calls(message.tool_calls))
        else:
            parts.extend(_part(p, vertex=vertex) for p in message.parts if _kept(p))
    return _joined(out)


def _kept(part: TextPart | ImagePart | DocumentPart) -> bool:
    return not isinstance(part, TextPart) or bool(part.text)


def _joined(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`contents` without those left with no parts (a turn that said nothing: Gemini
    refuses empty parts), the turns either side of one joined."""
    out: list[dict[str, Any]] = []
    for content in contents:
        if not content["parts"]:
            continue
        if out and out[-1]["role"] == content["role"]:
            out[-1]["parts"].extend(content["parts"])
        else:
            out.append(content)
    return out


def _function_response(
    message: Message, call_id: str, name: str, newer: bool
) -> tuple[dict[str, Any], list[ImagePart | DocumentPart]]:
    """The functionResponse part, and the attachments that go beside it instead of in it.

    FunctionResponse.response: the tool's text under "output", or under "error" when
    the tool failed (the keys the API reference names for the two). Gemini 3 takes
    inline images and PDFs in the response ("Multimodal function responses", function
    calling guide); a URL has no place there on the Gemini API.
    """
    output = {"error" if message.is_error else "output": message.text}
    response: dict[str, Any] = {"id": call_id, "name": name, "response": output}
    inside = [(p, p.data) for p in message.attachments if newer and p.data is not None]
    if inside:
        response["parts"] = [{"inlineData": _inline(p, data)} for p, data in inside]
    loose = [p for p in message.attachments if not (newer and p.data is not None)]
    return {"functionResponse": response}, loose


def _part(part: TextPart | ImagePart | DocumentPart, *, vertex: bool) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    return _attachment(part, vertex=vertex)


def _attachment(part: ImagePart | DocumentPart, *, vertex: bool) -> dict[str, Any]:
    """`inlineData` for base64, `fileData` for a URL the provider fetches.

    Capability fit skips a wire for an image type it does not take, or an untyped image
    URL on Vertex (`wire_limits`): the refusals here are a backstop."""
    if part.data is not None:
        return {"inlineData": _inline(part, part.data)}
    mime = _typed(part.media_type if isinstance(part, DocumentPart) else image_type(part))
    if mime is None and vertex:
        raise InvalidRequest(
            "an image given by URL needs its media_type on Vertex AI (fileData.mimeType); "
            "its URL does not name one"
        )
    data = {"fileUri": part.url}
    return {"fileData": data if mime is None else {"mimeType": mime, **data}}


def _inline(part: ImagePart | DocumentPart, data: str) -> dict[str, str]:
    # Validated: an attachment given as data comes with its media type.
    return {"mimeType": _typed(part.media_type) or "", "data": Verbatim(data)}


def _typed(mime: str | None) -> str | None:
    if mime is None or mime == "application/pdf" or mime in GEMINI_IMAGE_TYPES:
        return mime
    raise InvalidRequest(f"Gemini does not take {mime} images (PNG, JPEG, WEBP, HEIC, HEIF)")


def _function_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """Parallel calls: Gemini signs only the first; calls it never signed get the stand-in."""
    signed = any(call.signature for call in calls)
    return [
        _signed(
            {"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}},
            c.signature or (None if signed or i else SKIP_SIGNATURE),
        )
        for i, c in enumerate(calls)
    ]


def _text_signature(message: Message) -> str | None:
    return next((r.signature for r in message.reasoning if r.origin == ORIGIN), None)


def _signed(part: dict[str, Any], signature: str | None) -> dict[str, Any]:
    if signature:
        part["thoughtSignature"] = signature
    return part
