"""What the simulated Chat Completions API refuses, answered with OpenAI's own 400 bodies.

The checks follow the API reference for `POST /chat/completions` and the errors OpenAI
sends (quoted from its responses): a field it does not know, a content part it does not
take or whose data URL is malformed, a `file` part without its file name, `tool_choice`
or `parallel_tool_calls` without tools (or naming no tool), JSON mode with no "json" in
the messages, a strict schema outside Structured Outputs' subset, and the fields a model
family refuses: a reasoning model (`o1`, `o3`, `o4-mini`, `gpt-5`…) refuses `temperature`,
`top_p`, `stop` and `max_tokens` (it takes `max_completion_tokens`), an o-series one
`parallel_tool_calls` too, and any other model `reasoning_effort`. The family is read
from the model name, as OpenAI decides by model; on Azure's route, where the deployment
name is the model, those checks are not made.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from typing import Any

from worker.simulator.wire import BadRequest

__all__ = ["REASONING_MODEL", "check_request", "data_url_problem", "forced_tool", "strict_problem"]

# Every request field of the API reference (and Azure's `data_sources`).
_FIELDS = frozenset(
    """audio data_sources frequency_penalty function_call functions logit_bias logprobs
    max_completion_tokens max_tokens messages metadata modalities model n
    parallel_tool_calls prediction presence_penalty prompt_cache_key reasoning_effort
    response_format safety_identifier seed service_tier stop store stream stream_options
    temperature tool_choice tools top_logprobs top_p user verbosity web_search_options
    """.split()  # noqa: SIM905 - forty names read best as a paragraph
)
_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_USER_PARTS = ("text", "image_url", "input_audio", "refusal", "audio", "file")
REASONING_MODEL = re.compile(r"^(o\d|gpt-5(?!.*-chat))")
_NO_PARALLEL = re.compile(r"^o\d")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_DATA_URL = re.compile(r"^data:([^;,]*)(;base64)?,(.*)$", re.DOTALL)
_JSON_OBJECT = {"type": "object"}


def check_request(
    body: Mapping[str, Any], model: str | None, tools: tuple[str, ...]
) -> Mapping[str, Any] | None:
    """Raise `BadRequest` with OpenAI's body for what it refuses (`tools`: the names of
    the request's tools); else the JSON Schema the answer must follow (`{"type": "object"}`
    in JSON mode), None for free text."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise _refused(f"Unrecognized request argument supplied: {unknown[0]}")
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        _check_message(i, message)
    _check_tools(body, model or "", tools)
    _check_sampling(body, model or "")
    if body.get("stream_options") is not None and body.get("stream") is not True:
        raise _refused(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    return _output_schema(body.get("response_format"), messages)


def forced_tool(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The tool a checked request's `tool_choice` forces (`required`: the first), with its
    parameters' schema."""
    choice, tools = body.get("tool_choice"), body.get("tools") or []
    functions = [t["function"] for t in tools]
    if choice == "required" and functions:
        chosen = functions[0]
    elif isinstance(choice, dict):
        name = choice["function"]["name"]
        chosen = next(f for f in functions if f["name"] == name)
    else:
        return None
    return chosen["name"], chosen.get("parameters") or {"type": "object", "properties": {}}


def _refused(message: str, param: str | None = None, code: str | None = None) -> BadRequest:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return BadRequest(message, body={"error": error})


def _check_message(i: int, message: Any) -> None:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in _ROLES:
        supported = ", ".join(f"'{r}'" for r in _ROLES[:-1]) + f", and '{_ROLES[-1]}'"
        raise _refused(
            f"Invalid value: '{role}'. Supported values are: {supported}.",
            f"messages[{i}].role",
            "invalid_value",
        )
    if role == "tool" and not message.get("tool_call_id"):
        where = f"messages[{i}].tool_call_id"
        raise _refused(
            f"Missing required parameter: '{where}'.", where, "missing_required_parameter"
        )
    content = message.get("content")
    if not isinstance(content, list):
        return
    allowed = (
        _USER_PARTS if role == "user" else ("text", "refusal") if role == "assistant" else ("text",)
    )
    for j, part in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            supported = ", ".join(f"'{a}'" for a in allowed[:-1])
            supported = f"{supported}, and '{allowed[-1]}'" if supported else f"'{allowed[-1]}'"
            raise _refused(
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                f"{where}.type",
                "invalid_value",
            )
        if kind == "image_url":
            _check_image(where, part.get("image_url"))
        elif kind == "file":
            _check_file(where, part.get("file"))


def _check_image(where: str, image: Any) -> None:
    url = image.get("url") if isinstance(image, dict) else None
    where = f"{where}.image_url.url"
    if not isinstance(url, str) or not url.startswith(("https://", "http://", "data:")):
        raise _refused(
            f"Invalid '{where}'. Expected a valid URL, but got a value with an invalid format.",
            where,
            "invalid_value",
        )
    if url.startswith("data:"):
        problem = data_url_problem(url, lambda mime: mime.startswith("image/"))
        if problem is not None:
            raise _refused(
                f"Invalid '{where}'. Expected a base64-encoded data URL with an image MIME "
                f"type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got {problem}.",
                where,
                "invalid_value",
            )


def _check_file(where: str, file: Any) -> None:
    file = file if isinstance(file, dict) else {}
    if "file_id" in file:
        return
    if "file_data" not in file or "filename" not in file:
        # OpenAI names the file id when inline data comes without its file name.
        missing = f"{where}.file.file_id"
        raise _refused(
            f"Missing required parameter: '{missing}'.", missing, "missing_required_parameter"
        )
    data = file["file_data"]
    problem = data_url_problem(data, lambda mime: mime == "application/pdf")
    if problem is not None:
        field = f"{where}.file.file_data"
        raise _refused(
            f"Invalid file data: '{field}'. Expected a base64-encoded data URL with an "
            f"application/pdf MIME type (e.g. 'data:application/pdf;base64,SGVsbG8sIFdvcmxkIQ=='),"
            f" but got {problem}.",
            field,
            "invalid_value",
        )


def data_url_problem(value: Any, wanted: Any) -> str | None:
    match = _DATA_URL.match(value) if isinstance(value, str) else None
    if match is None:
        return "a value with an invalid format"
    mime, is_base64, data = match.groups()
    if not wanted(mime):
        return f"unsupported MIME type '{mime}'"
    if not is_base64:
        return "a value without the ';base64' separator"
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "an invalid base64-encoded value"
    return "empty base64-encoded bytes" if not decoded else None


def _check_tools(body: Mapping[str, Any], model: str, tools: tuple[str, ...]) -> None:
    for field in ("tool_choice", "parallel_tool_calls"):
        if field in body and not tools:
            raise _refused(
                f"Invalid value for '{field}': '{field}' is only allowed when 'tools' are "
                "specified.",
                field,
            )
    if "parallel_tool_calls" in body and _NO_PARALLEL.match(model):
        raise _unsupported("parallel_tool_calls")
    choice = body.get("tool_choice")
    if choice is None or (isinstance(choice, str) and choice in ("none", "auto", "required")):
        return
    if isinstance(choice, str):
        raise _refused(
            f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
            "tool_choice",
            "invalid_value",
        )
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise _refused("Missing required parameter: 'tool_choice.function.name'.", "tool_choice")
    if name not in tools:
        # The wording of this one is ours: OpenAI's is not published.
        raise _refused(
            f"Invalid value for 'tool_choice': function '{name}' is not one of the 'tools'.",
            "tool_choice",
        )


def _check_sampling(body: Mapping[str, Any], model: str) -> None:
    if not REASONING_MODEL.match(model):
        if "reasoning_effort" in body:
            raise _unsupported("reasoning_effort")
        return
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise _refused(
            f"Unsupported value: 'temperature' does not support {temperature} with this "
            "model. Only the default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    for field in ("top_p", "stop"):
        if field in body:
            raise _unsupported(field)
    if "max_tokens" in body:
        raise _refused(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in _EFFORTS:
        raise _refused(
            f"Invalid value: '{effort}'. Supported values are: 'low', 'medium', and 'high'.",
            "reasoning_effort",
            "invalid_value",
        )


def _unsupported(field: str) -> BadRequest:
    return _refused(
        f"Unsupported parameter: '{field}' is not supported with this model.",
        field,
        "unsupported_parameter",
    )


def _output_schema(wanted: Any, messages: list[Any]) -> Mapping[str, Any] | None:
    kind = wanted.get("type") if isinstance(wanted, dict) else None
    if wanted is None or kind == "text":
        return None
    if kind == "json_object":
        if not any("json" in text.lower() for text in _texts(messages)):
            raise _refused(
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'.",
                "messages",
            )
        return _JSON_OBJECT
    if kind != "json_schema":
        raise _refused(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and "
            "'json_schema'.",
            "response_format.type",
            "invalid_value",
        )
    spec = wanted.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        missing = "response_format.json_schema.name"
        raise _refused(
            f"Missing required parameter: '{missing}'.", missing, "missing_required_parameter"
        )
    schema = spec.get("schema") or {}
    if spec.get("strict") is True:
        problem = strict_problem(schema)
        if problem is not None:
            raise _refused(
                f"Invalid schema for response_format '{spec['name']}': {problem}",
                "response_format",
            )
    return schema if isinstance(schema, dict) else _JSON_OBJECT


def strict_problem(schema: Any) -> str | None:
    """What Structured Outputs' strict mode refuses: a root that is no object, an object
    that allows other properties or does not require every one of them."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        kind = schema.get("type") if isinstance(schema, dict) else None
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{kind}\"'."
    for context, node in _objects(schema, ()):
        where = "(" + ", ".join(f"'{c}'" for c in context) + ")"
        if node.get("additionalProperties") is not False:
            return (
                f"In context={where}, 'additionalProperties' is required to be supplied "
                "and to be false."
            )
        required = node.get("required") or []
        missing = [key for key in node.get("properties") or {} if key not in required]
        if missing:
            return (
                f"In context={where}, 'required' is required to be supplied and to be an "
                f"array including every key in properties. Missing '{missing[0]}'."
            )
    return None


def _objects(
    node: Any, context: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every object schema inside `node`, with where it is."""
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" or "properties" in node:
        yield context, node
    for key in ("properties", "$defs", "definitions"):
        for name, child in (node.get(key) or {}).items():
            yield from _objects(child, (*context, key, name))
    if "items" in node:
        yield from _objects(node["items"], (*context, "items"))
    for key in ("anyOf", "oneOf"):
        for i, child in enumerate(node.get(key) or ()):
            yield from _objects(child, (*context, key, str(i)))


def _texts(messages: list[Any]) -> Iterator[str]:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            yield content
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
