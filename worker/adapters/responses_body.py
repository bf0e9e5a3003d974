"""The body of a Responses API request (`POST /responses`), field by field.

Stateless on purpose: `store: false`, the whole conversation as `input` each call, and,
for a reasoning model, `include: ["reasoning.encrypted_content"]` so its thinking comes
back as items the next call can send again, whichever provider answered in between (a
model that does not reason refuses that `include`: "Encrypted content is not supported
with this model."). The system prompt that opens the turn is `instructions`; later
system messages stay where they are. An assistant turn is its reasoning items (OpenAI's
own only, and only to a reasoning model: the call was planned with them alone), its
text, then one `function_call` item per tool call; a tool result is a
`function_call_output`, its images and PDFs as content parts. Function tools
are sent with `strict: false`: the API's default is strict, which the turn never asked for.
The API has no `stop` and no `seed`: stop sequences are applied to the answer
(`worker.adapters.stop_cut`), a seed is not sent.
"""

from __future__ import annotations

import json
from typing import Any

from worker.adapters.base import ProviderCall
from worker.adapters.body import Verbatim
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Part,
    Reasoning,
    TextPart,
    ToolChoice,
)

__all__ = ["ORIGIN", "responses_body"]

ORIGIN = "openai"  # the `Reasoning.origin` of a Responses reasoning item
_INCLUDE = ["reasoning.encrypted_content"]


def responses_body(call: ProviderCall) -> dict[str, Any]:
    """Every field of `call` as the Responses API names it."""
    leading = 0
    while leading < len(call.messages) and call.messages[leading].role == "system":
        leading += 1
    body: dict[str, Any] = {"model": call.model_id}
    if leading:
        body["instructions"] = "\n\n".join(m.text for m in call.messages[:leading])
    body["input"] = [
        item for m in call.messages[leading:] for item in _items(m, reasoning=call.reasoning)
    ]
    body["store"] = False
    if call.reasoning:
        body["include"] = list(_INCLUDE)
    body["max_output_tokens"] = call.max_tokens
    if call.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool in call.tools
        ]
        if call.tool_choice is not None:
            body["tool_choice"] = _tool_choice(call.tool_choice)
        if call.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = call.parallel_tool_calls
    if call.response_format is not None:
        body["text"] = {"format": _format(call.response_format)}
    if call.reasoning:
        # OpenAI's reasoning models refuse temperature and top_p, as on Chat Completions.
        if call.reasoning_effort is not None:
            body["reasoning"] = {"effort": call.reasoning_effort}
    else:
        sampling = {"temperature": call.temperature, "top_p": call.top_p}
        body.update((name, value) for name, value in sampling.items() if value is not None)
    if call.stream:
        body["stream"] = True
    return body


def _items(message: Message, *, reasoning: bool) -> list[dict[str, Any]]:
    if message.role == "tool":
        output: str | list[dict[str, Any]] = (
            message.text if not message.attachments else [_part(p) for p in message.parts]
        )
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": output}]
    if message.role != "assistant":
        content = message.text if not message.attachments else [_part(p) for p in message.parts]
        return [{"type": "message", "role": message.role, "content": content}]
    items = [
        _reasoning(r) for r in message.reasoning if reasoning and r.origin == ORIGIN and r.encrypted
    ]
    if message.text:
        items.append({"type": "message", "role": "assistant", "content": message.text})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments),
        }
        for call in message.tool_calls
    )
    return items


def _reasoning(item: Reasoning) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": item.text}] if item.text else []
    return {
        "type": "reasoning",
        "id": item.id,
        "summary": summary,
        "encrypted_content": item.encrypted,
    }


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        url = (
            part.url
            if part.data is None
            else Verbatim(f"data:{part.media_type};base64,{part.data}")
        )
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    return _file(part)


def _file(part: DocumentPart) -> dict[str, Any]:
    if part.data is None:
        return {"type": "input_file", "file_url": part.url}
    data = Verbatim(f"data:{part.media_type};base64,{part.data}")
    # As on Chat Completions, inline data goes with a file name.
    return {"type": "input_file", "filename": part.name or "document.pdf", "file_data": data}


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, NamedTool):
        return {"type": "function", "name": choice.name}
    return choice


def _format(wanted: JsonSchemaFormat | JsonObjectFormat) -> dict[str, Any]:
    if isinstance(wanted, JsonObjectFormat):
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "name": wanted.name,
        "schema": wanted.json_schema,
        "strict": wanted.strict,
    }
