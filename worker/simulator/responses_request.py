"""What the simulated Responses API refuses, answered with OpenAI's own 400 bodies.

Following the API reference for `POST /responses` and errors OpenAI sends (quoted in
public issues): a parameter it does not know ("Unknown parameter"), input items and
content parts of types it does not take, a `function_call_output` whose call is not in
the input ("No tool call found for function call output with call_id ..."), a reasoning
item with no item after it, one sent back without its encrypted content while nothing is
stored (a 404: "Items are not persisted when `store` is set to false"), and one whose encrypted
content this simulator did not issue: OpenAI's 400 `invalid_encrypted_content`, "The
encrypted content gAAA...DQ== could not be verified." (openai/codex issues). Function
tools are strict unless `strict: false`, and a strict schema outside Structured Outputs'
subset is refused, as is a strict `text.format`. A reasoning model (`o*`, `gpt-5*`)
refuses `temperature` and `top_p`; any other model `reasoning`, and encrypted reasoning:
`include: ["reasoning.encrypted_content"]` ("Encrypted content is not supported with this
model.", `param: include`) and a reasoning item that carries it. `max_output_tokens`
is at least 16.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.simulator.openai_request import REASONING_MODEL, data_url_problem, strict_problem
from worker.simulator.wire import BadRequest, sign

__all__ = ["check_responses_request", "forced_function", "reasoning_signature"]

_FIELDS = frozenset(
    """background conversation include input instructions max_output_tokens max_tool_calls
    metadata model parallel_tool_calls previous_response_id prompt prompt_cache_key
    reasoning safety_identifier service_tier store stream stream_options temperature text
    tool_choice tools top_logprobs top_p truncation user""".split()  # noqa: SIM905
)
_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
_USER_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal")
_ROLES = ("user", "assistant", "system", "developer")
_JSON_OBJECT = {"type": "object"}
_ENCRYPTED = "reasoning.encrypted_content"
_MIN_OUTPUT_TOKENS = 16


def reasoning_signature(item_id: str) -> str:
    """The encrypted content the simulator issues with reasoning item `item_id`."""
    return "gAAA" + sign("openai-reasoning", item_id)


def check_responses_request(body: Mapping[str, Any], model: str) -> Mapping[str, Any] | None:
    """Raise `BadRequest` with OpenAI's body for what it refuses; else the JSON Schema
    the answer must follow (`text.format`), None for free text."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise _refused(f"Unknown parameter: '{unknown[0]}'.", unknown[0], "unknown_parameter")
    items = body.get("input")
    if isinstance(items, list):
        _check_items(items, stored=body.get("store") is not False)
    elif not isinstance(items, str):
        raise _refused("Missing required parameter: 'input'.", "input")
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and limit < _MIN_OUTPUT_TOKENS:
        raise _refused(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{_MIN_OUTPUT_TOKENS}, but got {limit} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )
    names = _check_tools(body)
    _check_sampling(body, model)
    _check_encrypted(body, model)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name") not in names:
        raise _refused(
            f"Tool choice '{choice.get('name')}' not found in 'tools' parameter.", "tool_choice"
        )
    return _output_schema(body.get("text"))


def forced_function(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The function a checked request forces (`required`: the first), with its schema."""
    choice, tools = body.get("tool_choice"), body.get("tools") or []
    if choice == "required" and tools:
        chosen = tools[0]
    elif isinstance(choice, dict):
        chosen = next(t for t in tools if t.get("name") == choice.get("name"))
    else:
        return None
    return chosen["name"], chosen.get("parameters") or {"type": "object", "properties": {}}


def _refused(
    message: str, param: str | None = None, code: str | None = None, *, status: int = 400
) -> BadRequest:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return BadRequest(message, body={"error": error}, status=status)


def _check_items(items: list[Any], *, stored: bool) -> None:
    calls: set[str] = set()
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _refused(f"Invalid type for '{where}': expected an object.", where)
        kind = item.get("type", "message")
        if kind not in _ITEMS:
            raise _refused(f"Invalid value: '{kind}'.", f"{where}.type", "invalid_value")
        if kind == "message":
            _check_message(where, item)
        elif kind == "function_call":
            calls.add(str(item.get("call_id")))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                raise _refused(
                    "No tool call found for function call output with call_id "
                    f"{item.get('call_id')}.",
                    "input",
                )
            output = item.get("output")
            if isinstance(output, list):
                for j, part in enumerate(output):
                    _check_part(f"{where}.output[{j}]", part, _USER_PARTS)
        else:
            _check_reasoning(item, following=items[i + 1 :], stored=stored)


def _check_message(where: str, item: Mapping[str, Any]) -> None:
    role = item.get("role")
    if role not in _ROLES:
        raise _refused(
            f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', "
            "'developer', and 'user'.",
            f"{where}.role",
            "invalid_value",
        )
    content = item.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _refused(f"Missing required parameter: '{where}.content'.", f"{where}.content")
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    for j, part in enumerate(content):
        _check_part(f"{where}.content[{j}]", part, allowed)


def _check_part(where: str, part: Any, allowed: tuple[str, ...]) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in allowed:
        supported = ", ".join(f"'{a}'" for a in allowed)
        raise _refused(
            f"Invalid value: '{kind}'. Supported values are: {supported}.",
            f"{where}.type",
            "invalid_value",
        )
    if kind == "input_image":
        url = part.get("image_url")
        if isinstance(url, str) and url.startswith("data:"):
            problem = data_url_problem(url, lambda mime: mime.startswith("image/"))
            if problem is not None:
                raise _refused(f"Invalid '{where}.image_url': got {problem}.", where)
        elif not isinstance(url, str) or not url.startswith("https://"):
            raise _refused(f"Invalid '{where}.image_url'. Expected a valid URL.", where)
    elif kind == "input_file":
        if "file_data" in part:
            if "filename" not in part:
                raise _refused(f"Missing required parameter: '{where}.filename'.", where)
            problem = data_url_problem(part["file_data"], lambda m: m == "application/pdf")
            if problem is not None:
                raise _refused(f"Invalid file data: '{where}.file_data': got {problem}.", where)
        elif not isinstance(part.get("file_url"), str) and "file_id" not in part:
            raise _refused(f"Missing required parameter: '{where}.file_id'.", where)


def _check_reasoning(item: Mapping[str, Any], *, following: list[Any], stored: bool) -> None:
    item_id = str(item.get("id"))
    encrypted = item.get("encrypted_content")
    if not following:
        raise _refused(
            f"Item '{item_id}' of type 'reasoning' was provided without its required "
            "following item.",
            "input",
        )
    if encrypted is None:
        if stored:
            return  # the item is looked up by id among the stored ones
        raise _refused(
            f"Item with id '{item_id}' not found. Items are not persisted when `store` is set "
            "to false. Try again with `store` set to true, or remove this item from your input.",
            "input",
            status=404,
        )
    if encrypted != reasoning_signature(item_id):
        shown = f"{str(encrypted)[:4]}...{str(encrypted)[-4:]}"
        raise _refused(
            f"The encrypted content {shown} could not be verified.",
            None,
            "invalid_encrypted_content",
        )


def _check_tools(body: Mapping[str, Any]) -> tuple[str, ...]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _refused("Invalid type for 'tools': expected an array.", "tools")
    names: list[str] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _refused(f"Invalid value for 'tools[{i}].type'.", f"tools[{i}].type")
        name = tool.get("name")
        if not isinstance(name, str):
            where = f"tools[{i}].name"
            raise _refused(f"Missing required parameter: '{where}'.", where)
        if tool.get("strict", True) is not False:
            problem = strict_problem(tool.get("parameters") or {})
            if problem is not None:
                raise _refused(
                    f"Invalid schema for function '{name}': {problem}", f"tools[{i}].parameters"
                )
        names.append(name)
    if "tool_choice" in body and not names and body["tool_choice"] != "none":
        raise _refused("Tool choice requires 'tools' to be specified.", "tool_choice")
    return tuple(names)


def _check_sampling(body: Mapping[str, Any], model: str) -> None:
    if not REASONING_MODEL.match(model):
        if "reasoning" in body:
            raise _unsupported("reasoning.effort")
        return
    for field in ("temperature", "top_p"):
        if field in body:
            raise _unsupported(field)


def _check_encrypted(body: Mapping[str, Any], model: str) -> None:
    if REASONING_MODEL.match(model):
        return
    include = body.get("include") or []
    items = body.get("input")
    sent = [
        i for i in items or () if isinstance(i, dict) and i.get("encrypted_content") is not None
    ]
    if _ENCRYPTED in include or sent:
        param = "include" if _ENCRYPTED in include else "input"
        raise _refused("Encrypted content is not supported with this model.", param)


def _unsupported(field: str) -> BadRequest:
    return _refused(
        f"Unsupported parameter: '{field}' is not supported with this model.",
        field,
        "unsupported_parameter",
    )


def _output_schema(text: Any) -> Mapping[str, Any] | None:
    wanted = text.get("format") if isinstance(text, dict) else None
    kind = wanted.get("type") if isinstance(wanted, dict) else None
    if wanted is None or kind == "text":
        return None
    if kind == "json_object":
        return _JSON_OBJECT
    if kind != "json_schema" or not isinstance(wanted.get("name"), str):
        raise _refused("Missing required parameter: 'text.format.name'.", "text.format.name")
    schema = wanted.get("schema") or {}
    if wanted.get("strict") is True:
        problem = strict_problem(schema)
        if problem is not None:
            raise _refused(
                f"Invalid schema for response_format '{wanted['name']}': {problem}",
                "text.format.schema",
            )
    return schema if isinstance(schema, dict) else _JSON_OBJECT
