"""What the Gemini API and Vertex AI refuse in a generateContent body, as they say it.

The names follow the APIs' protos (google.ai.generativelanguage.v1beta and
google.cloud.aiplatform.v1: GenerateContentRequest, Content, Part, GenerationConfig,
ToolConfig): a name either does not know is refused as Google's JSON parser refuses it
("Invalid JSON payload received. Unknown name …"), a value of the wrong type as
"Invalid value at …", and what a model cannot take as its validation says it
("* GenerateContentRequest.<field>: …", or the documented sentence where one is
quoted in Google's forums and SDK issues). A model's generation is read from its id as
the adapter reads it: `gemini-3…` or later, else an earlier (2.x) model, which takes no
`thinkingLevel`, no media inside a `functionResponse`, and no JSON response MIME type
beside function declarations. A function's `parameters` is the OpenAPI subset the
`Schema` proto has (one `type` a node, none of JSON Schema's `const`, `oneOf`, `allOf`,
`$defs`, `$ref`, `$schema`), refused as the JSON parser refuses an unknown name; full JSON
Schema goes in `parametersJsonSchema`, and a declaration may have one of the two. A content
with no parts, and a part whose text is empty (without a thought signature), are refused.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from worker.simulator.wire import BadRequest

__all__ = ["check_body"]

_TOP = frozenset(
    {
        "contents",
        "tools",
        "toolConfig",
        "safetySettings",
        "systemInstruction",
        "generationConfig",
        "cachedContent",
    }
)
_VERTEX_TOP = _TOP | {"labels", "modelArmorConfig"}
_GENERATION = frozenset(
    {
        "stopSequences",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "responseModalities",
        "candidateCount",
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "responseLogprobs",
        "logprobs",
        "enableEnhancedCivicAnswers",
        "speechConfig",
        "thinkingConfig",
        "imageConfig",
        "mediaResolution",
    }
)
_THINKING = frozenset({"includeThoughts", "thinkingBudget", "thinkingLevel"})
_LEVELS = frozenset({"MINIMAL", "LOW", "MEDIUM", "HIGH"})
_MODES = frozenset({"AUTO", "ANY", "NONE", "VALIDATED"})
_CALLING = frozenset({"mode", "allowedFunctionNames"})
_PART_DATA = (
    "text",
    "inlineData",
    "functionCall",
    "functionResponse",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)
_PART_META = frozenset({"thought", "thoughtSignature", "videoMetadata", "partMetadata"})
_RESPONSE = frozenset({"id", "name", "response", "parts", "willContinue", "scheduling"})
_CALL = frozenset({"id", "name", "args", "partialArgs", "willContinue"})
_DECLARATION = frozenset(
    {
        "name",
        "description",
        "parameters",
        "parametersJsonSchema",
        "response",
        "responseJsonSchema",
        "behavior",
    }
)
# The `Schema` proto's fields (googleapis/python-genai `types.Schema`, camelCased).
_SCHEMA = frozenset(
    """additionalProperties defs ref anyOf default description enum example format items
    maxItems maxLength maxProperties maximum minItems minLength minProperties minimum
    nullable pattern properties propertyOrdering required title type""".split()  # noqa: SIM905
)
_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
# "Supported file formats" (Gemini API) and the Vertex reference's MIME list, for the
# kinds relevo sends: images and PDFs; GIF is not one of them.
_MEDIA = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif", "application/pdf"}
)
# "Multimodal function responses" (function calling guide): images and documents.
_RESPONSE_MEDIA = frozenset({"image/png", "image/jpeg", "image/webp", "application/pdf"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
_INT32 = range(-(2**31), 2**31)


def check_body(body: Mapping[str, Any], *, model: str, vertex: bool) -> None:
    """Raise `BadRequest` with the API's message when it would refuse `body` for `model`."""
    _known(body, _VERTEX_TOP if vertex else _TOP, None)
    newer = _gemini3(model)
    names = _declared(body.get("tools") or [])
    for i, content in enumerate(body.get("contents") or []):
        parts = content.get("parts") or [] if isinstance(content, dict) else []
        if not parts:
            raise BadRequest(
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n"
            )
        for j, part in enumerate(parts):
            _part(part, f"contents[{i}].parts[{j}]", newer=newer, vertex=vertex)
    config = body.get("generationConfig") or {}
    _generation(config, newer=newer, model=model, tools=bool(names))
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if calling is not None:
        _calling(calling, names)


def _gemini3(model: str) -> bool:
    match = re.match(r"^gemini-(\d+)", model)
    return match is not None and int(match.group(1)) >= 3


def _known(obj: Mapping[str, Any], names: frozenset[str], at: str | None) -> None:
    for name in obj:
        if name not in names:
            where = "" if at is None else f" at '{at}'"
            raise BadRequest(
                f'Invalid JSON payload received. Unknown name "{name}"{where}: Cannot find field.'
            )


def _declared(tools: list[Any]) -> list[str]:
    names: list[str] = []
    for i, tool in enumerate(tools):
        for j, declaration in enumerate(tool.get("functionDeclarations") or []):
            name = str(declaration.get("name", ""))
            if not _NAME.match(name):
                raise BadRequest(
                    f"* GenerateContentRequest.tools[{i}].function_declarations[{j}].name: "
                    "Invalid function name. Must start with a letter or an underscore. Must be "
                    "alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or "
                    "dashes (-), with a maximum length of 64.\n"
                )
            at = f"tools[{i}].function_declarations[{j}]"
            _known(declaration, _DECLARATION, at)
            if "parameters" in declaration and "parametersJsonSchema" in declaration:
                raise BadRequest(
                    f"* GenerateContentRequest.{at}.parameters_json_schema: "
                    "parameters_json_schema must not be set when parameters is set\n"
                )
            if "parameters" in declaration:
                _schema(declaration["parameters"], f"{at}.parameters")
            names.append(name)
    return names


def _schema(node: Any, at: str) -> None:
    """A `Schema` (the OpenAPI subset), as the JSON parser reads it."""
    if not isinstance(node, dict):
        raise BadRequest(f"Invalid value at '{at}' (type.googleapis.com/Schema), {node!r}")
    _known(node, _SCHEMA, at)
    kind = node.get("type")
    if isinstance(kind, list):
        raise BadRequest(
            f"Invalid JSON payload received. Proto field is not repeating, cannot start "
            f"list at '{at}.type'."
        )
    if kind is not None and str(kind).upper() not in _TYPES:
        raise BadRequest(f"Invalid value at '{at}.type' (type.googleapis.com/Type), {kind!r}")
    for k, inner in enumerate((node.get("properties") or {}).values()):
        _schema(inner, f"{at}.properties[{k}].value")
    for name, inner in (node.get("defs") or {}).items():
        _schema(inner, f"{at}.defs[{name}]")
    if "items" in node:
        _schema(node["items"], f"{at}.items")
    for k, inner in enumerate(node.get("anyOf") or ()):
        _schema(inner, f"{at}.any_of[{k}]")


def _part(part: Any, at: str, *, newer: bool, vertex: bool) -> None:
    if not isinstance(part, dict):
        raise BadRequest(f"Invalid value at '{at}' (type.googleapis.com/Part), {part!r}")
    _known(part, frozenset(_PART_DATA) | _PART_META, at)
    data = [key for key in _PART_DATA if key in part]
    if len(data) != 1:
        raise BadRequest(
            f"* GenerateContentRequest.{at}.data: required oneof field 'data' must have one "
            "initialized field\n"
            if not data
            else f"Invalid JSON payload received. Oneof field 'data' is already set. "
            f"Cannot set '{data[1]}'"
        )
    if part.get("text") == "" and "thoughtSignature" not in part:
        # An empty text part is refused, unless it carries the model's own signature (the
        # model sends those back itself).
        raise BadRequest(
            "Unable to submit request because it has an empty text parameter. Add a value "
            "to the parameter and try again."
        )
    if "inlineData" in part:
        _blob(part["inlineData"], f"{at}.inline_data", _MEDIA, vertex=vertex)
    elif "fileData" in part:
        _file(part["fileData"], f"{at}.file_data", vertex=vertex)
    elif "functionCall" in part:
        _known(part["functionCall"], _CALL, f"{at}.function_call")
    elif "functionResponse" in part:
        _function_response(part["functionResponse"], f"{at}.function_response", newer, vertex)


def _blob(blob: Any, at: str, types: frozenset[str], *, vertex: bool) -> None:
    fields = {"mimeType", "data", "displayName"} if vertex else {"mimeType", "data"}
    _known(blob, frozenset(fields), at)
    mime = blob.get("mimeType")
    if not mime:
        raise BadRequest(f"* GenerateContentRequest.{at}.mime_type: a MIME type is required\n")
    data = blob.get("data")
    try:
        base64.b64decode(data if isinstance(data, str) else "", validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"Invalid value at '{at}.data' (TYPE_BYTES), Base64 decoding failed for {data!r}"
        ) from None
    if mime not in types:
        raise BadRequest(f"Unsupported MIME type: {mime}")


def _file(data: Any, at: str, *, vertex: bool) -> None:
    fields = {"mimeType", "fileUri", "displayName"} if vertex else {"mimeType", "fileUri"}
    _known(data, frozenset(fields), at)
    uri = str(data.get("fileUri", ""))
    # Gemini API: an https URL (the Files API's, or one the API fetches); Vertex: gs:// too.
    schemes = ("https://", "http://", "gs://") if vertex else ("https://",)
    if not uri.startswith(schemes):
        raise BadRequest(f"* GenerateContentRequest.{at}.file_uri: Invalid file uri: {uri}\n")
    mime = data.get("mimeType")
    if vertex and not mime:
        raise BadRequest("Request contains an invalid argument.")
    if mime is not None and mime not in _MEDIA:
        raise BadRequest(f"Unsupported MIME type: {mime}")


def _function_response(response: Any, at: str, newer: bool, vertex: bool) -> None:
    _known(response, _RESPONSE, at)
    if not isinstance(response.get("response"), dict):
        raise BadRequest(f"* GenerateContentRequest.{at}.response: a JSON object is required\n")
    parts = response.get("parts") or []
    if parts and not newer:
        raise BadRequest("Multimodal function responses are not supported for this model.")
    for k, part in enumerate(parts):
        inside = f"{at}.parts[{k}]"
        # FunctionResponsePart: inline bytes on both APIs, file data on Vertex only.
        _known(part, frozenset({"inlineData", "fileData"} if vertex else {"inlineData"}), inside)
        if "inlineData" in part:
            _blob(part["inlineData"], f"{inside}.inline_data", _RESPONSE_MEDIA, vertex=vertex)
        elif "fileData" in part:
            _file(part["fileData"], f"{inside}.file_data", vertex=vertex)


def _generation(config: Mapping[str, Any], *, newer: bool, model: str, tools: bool) -> None:
    _known(config, _GENERATION, "generation_config")
    seed = config.get("seed")
    if seed is not None and (not isinstance(seed, int) or seed not in _INT32):
        raise BadRequest(f"Invalid value at 'generation_config.seed' (TYPE_INT32), {seed}")
    json_answer = config.get("responseMimeType") == "application/json"
    schemas = [key for key in ("responseSchema", "responseJsonSchema") if key in config]
    if schemas and not json_answer:
        raise BadRequest(
            "* GenerateContentRequest.generation_config.response_mime_type: must be "
            "application/json when a response schema is set\n"
        )
    if len(schemas) > 1:
        raise BadRequest(
            "* GenerateContentRequest.generation_config.response_json_schema: "
            "response_schema must be omitted when response_json_schema is set\n"
        )
    if json_answer and tools and not newer:
        raise BadRequest(
            "Function calling with a response mime type: 'application/json' is unsupported"
        )
    thinking = config.get("thinkingConfig")
    if thinking is not None:
        _thinking(thinking, newer=newer, model=model)


def _thinking(thinking: Mapping[str, Any], *, newer: bool, model: str) -> None:
    _known(thinking, _THINKING, "generation_config.thinking_config")
    level = thinking.get("thinkingLevel")
    if level is None:
        return
    if "thinkingBudget" in thinking:
        raise BadRequest("You can only set either thinking budget or thinking level, not both.")
    if str(level).upper() not in _LEVELS:
        raise BadRequest(
            "Invalid value at 'generation_config.thinking_config.thinking_level' "
            f"(type.googleapis.com/ThinkingConfig.ThinkingLevel), {level!r}"
        )
    if not newer:
        raise BadRequest("Thinking level is not supported for this model.")
    # "Gemini thinking": Gemini 3 Pro takes LOW and HIGH.
    if model.startswith("gemini-3-pro") and str(level).upper() not in ("LOW", "HIGH"):
        raise BadRequest(f"Thinking level {str(level).upper()} is not supported for this model.")


def _calling(calling: Mapping[str, Any], names: list[str]) -> None:
    at = "tool_config.function_calling_config"
    _known(calling, _CALLING, at)
    mode = str(calling.get("mode", "AUTO"))
    if mode not in _MODES:
        raise BadRequest(
            f"Invalid value at '{at}.mode' (type.googleapis.com/FunctionCallingConfig.Mode), "
            f"{mode!r}"
        )
    allowed = calling.get("allowedFunctionNames") or []
    if allowed and mode not in ("ANY", "VALIDATED"):
        raise BadRequest(
            f"* GenerateContentRequest.{at}.allowed_function_names: only allowed when the "
            "mode is ANY or VALIDATED\n"
        )
    for k, name in enumerate(allowed):
        if name not in names:
            raise BadRequest(
                f"* GenerateContentRequest.{at}.allowed_function_names[{k}]: {name!r} is not "
                "the name of a declared function\n"
            )
