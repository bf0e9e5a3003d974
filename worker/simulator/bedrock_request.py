"""What Bedrock's Converse refuses in a request body: each refusal a `BadRequest`, which the
simulator answers as Bedrock does (400, `x-amzn-ErrorType: ValidationException`,
`{"message": ...}`).

First the shape: members, types, unions and required members against the ConverseRequest
shape of botocore's own service model for bedrock-runtime (a member Converse does not
have is refused, wherever it is), then the shape's constraints (enums, ranges, lengths,
patterns), in AWS's words. Then what the API reference says in prose (Message.content,
DocumentBlock, ToolChoice), and what Claude refuses while it thinks (Anthropic's
extended-thinking documentation), or always, on a model that takes only adaptive thinking
(a thinking budget, temperature, topP: as Anthropic's own API refuses them). Where AWS's
own message is quoted in public issues it is used; the others say the same in the
simulator's words.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from worker.simulator.anthropic_request import adaptive_only, check_schema
from worker.simulator.wire import BadRequest

if TYPE_CHECKING:
    from botocore.model import Shape

__all__ = ["check_request", "forced_tool", "output_schema"]

_ALTERNATE = (
    "A conversation must alternate between user and assistant roles. Make sure the "
    "conversation alternates between user and assistant roles and try again."
)
_START = (
    "A conversation must start with a user message. Try again with a conversation that "
    "starts with a user message."
)
_TOOL_CONFIG = (
    "The toolConfig field must be defined when using toolUse and toolResult content blocks."
)
_DUPLICATE_NAMES = (
    "Messages can't contain duplicate document names. Rename the document and retry your request."
)
_DOCUMENT_NAME = (
    "The document file name can only contain alphanumeric characters, whitespace "
    "characters, hyphens, parentheses, and square brackets. The name can't contain more "
    "than one consecutive whitespace character. Check that the file name conforms to these "
    "restrictions and retry your request."
)
_BLANK = (
    "The text field in the ContentBlock object at messages.{i}.content.{j} is blank. Add "
    "text to the text field, and try again."
)
_NAME = re.compile(r"[A-Za-z0-9()\[\] -]+")
# Message.content: 20 images of 3.75 MB at most, 5 documents of 4.5 MB.
_LIMITS = {"image": (20, 3_750_000), "document": (5, 4_500_000)}
_MODEL_ERROR = "The model returned the following errors: "
_THINKING_DOC = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})  # OutputConfig.effort
_SAMPLING = (("temperature", "temperature"), ("topP", "top_p"))
# Claude models before 4.5, which have no structured outputs (Bedrock's "Structured
# outputs" page lists Claude Sonnet 4.5, Haiku 4.5, Opus 4.5 and later).
_EARLIER_CLAUDE = re.compile(
    r"claude-(?:instant|v\d|\d-|(?:opus|sonnet|haiku)-4-(?:[0-4]-)?\d{8}|(?:opus|sonnet|haiku)-4-[0-4]-)"
)


def check_request(body: Mapping[str, Any], model: str = "") -> None:
    """Raise `BadRequest` with Bedrock's message for the first thing it would refuse, in a
    request to `model` (its id or inference profile)."""
    _check_shape({"modelId": "model", **body})
    messages = body.get("messages") or []
    if not messages:
        raise BadRequest(_START)
    _check_roles(messages)
    _check_text(messages)
    _check_attachments(messages)
    config = body.get("toolConfig")
    if config is None and any(
        "toolUse" in block or "toolResult" in block for block in _blocks(messages)
    ):
        raise BadRequest(_TOOL_CONFIG)
    if config is not None:
        _check_tool_schemas(config, model)
        _check_tool_choice(config)
    _check_tool_family(body, messages, model)
    _check_adaptive(body, model)
    _check_thinking(body)
    schema = output_schema(body)
    if schema is not None and "anthropic." in model:
        if _EARLIER_CLAUDE.search(model):
            raise BadRequest(
                "The model returned the following errors: output_config.format: structured "
                "outputs are not supported for this model"
            )
        check_schema("outputConfig.textFormat.structure.jsonSchema.schema", schema)


def output_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema of `outputConfig.textFormat` (sent as a JSON string), if any; refused
    when it is not a JSON Schema."""
    text_format = (body.get("outputConfig") or {}).get("textFormat")
    if text_format is None:
        return None
    raw = text_format["structure"].get("jsonSchema", {}).get("schema", "")
    try:
        schema = json.loads(raw)
        if not isinstance(schema, dict):
            raise TypeError("not an object")
        Draft202012Validator.check_schema(schema)
    except (ValueError, TypeError, SchemaError):
        raise BadRequest("The JSON schema in outputConfig.textFormat is not valid.") from None
    return schema


def forced_tool(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The tool a `tool` or `any` toolChoice makes the model call (for `any`, the first),
    with its input schema."""
    config = body.get("toolConfig") or {}
    choice = config.get("toolChoice") or {}
    specs = [t["toolSpec"] for t in config.get("tools", []) if "toolSpec" in t]
    if "tool" in choice:
        specs = [s for s in specs if s["name"] == choice["tool"]["name"]]
    elif "any" not in choice:
        return None
    return (specs[0]["name"], specs[0]["inputSchema"].get("json", {})) if specs else None


def _check_shape(params: Mapping[str, Any]) -> None:
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(params), _converse_shape())
    if report.has_errors():
        raise BadRequest(report.generate_report())
    problem = next(_violations(_converse_shape(), params, ""), None)
    if problem is not None:
        raise BadRequest(f"1 validation error detected: {problem}")


@cache
def _converse_shape() -> Shape:
    from botocore.loaders import create_loader
    from botocore.model import ServiceModel

    data = create_loader().load_service_model("bedrock-runtime", "service-2")
    return ServiceModel(data).operation_model("Converse").input_shape


def _violations(shape: Shape, value: Any, where: str) -> Iterator[str]:
    """Each value that breaks its shape's constraints, as AWS words it."""
    meta = shape.metadata
    seen = f"Value '{value}' at '{where}' failed to satisfy constraint: Member must"
    if shape.type_name == "structure" and not meta.get("document"):
        for name, member in shape.members.items():
            if name in value:
                yield from _violations(member, value[name], f"{where}.{name}".lstrip("."))
    elif shape.type_name == "list":
        if not meta.get("min", 0) <= len(value) <= meta.get("max", len(value)):
            yield f"{seen} have length between {meta.get('min', 0)} and {meta.get('max')}"
        for i, item in enumerate(value):
            yield from _violations(shape.member, item, f"{where}.{i}")
    else:
        problem = _scalar_violation(shape, value)
        if problem is not None:
            yield f"{seen} {problem}"


def _scalar_violation(shape: Shape, value: Any) -> str | None:
    meta = shape.metadata
    if shape.type_name == "string":
        enum: list[str] = getattr(shape, "enum", [])
        if enum and value not in enum:
            return f"satisfy enum value set: [{', '.join(enum)}]"
        if "max" in meta and len(value) > meta["max"]:
            return f"have length less than or equal to {meta['max']}"
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            return f"satisfy regular expression pattern: {meta['pattern']}"
    elif shape.type_name in ("integer", "long", "float", "double"):
        if "max" in meta and value > meta["max"]:
            return f"have value less than or equal to {meta['max']}"
        if "min" in meta and value < meta["min"]:
            return f"have value greater than or equal to {meta['min']}"
    return None


def _blocks(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in messages:
        yield from message["content"]


def _check_roles(messages: list[dict[str, Any]]) -> None:
    if messages[0]["role"] != "user":
        raise BadRequest(_START)
    for before, after in itertools.pairwise(messages):
        if before["role"] == after["role"]:
            raise BadRequest(_ALTERNATE)


def _check_text(messages: list[dict[str, Any]]) -> None:
    for i, message in enumerate(messages):
        for j, block in enumerate(message["content"]):
            if "text" in block and not block["text"].strip():
                raise BadRequest(_BLANK.format(i=i, j=j))


def _check_attachments(messages: list[dict[str, Any]]) -> None:
    """Message.content and DocumentBlock: images and documents in user messages only (and
    in their tool results), decodable bytes within the caps, a text block beside a
    document, document names of the allowed characters and each one once."""
    counts = dict.fromkeys(_LIMITS, 0)
    names: set[str] = set()
    for message in messages:
        direct = message["content"]
        nested = [c for b in direct if "toolResult" in b for c in b["toolResult"]["content"]]
        for block in (*direct, *nested):
            kind = "image" if "image" in block else "document" if "document" in block else None
            if kind is None:
                continue
            if message["role"] != "user":
                raise BadRequest("You can only include images and documents if the role is user.")
            counts[kind] += 1
            _check_bytes(kind, block[kind]["source"], counts[kind])
            if kind == "document":
                name = block["document"]["name"]
                if not _NAME.fullmatch(name) or "  " in name:
                    raise BadRequest(_DOCUMENT_NAME)
                if name in names:
                    raise BadRequest(_DUPLICATE_NAMES)
                names.add(name)
        if any("document" in b for b in direct) and not any("text" in b for b in direct):
            raise BadRequest(
                "A message that includes a document must also include a text content block."
            )


def _check_bytes(kind: str, source: Mapping[str, Any], count: int) -> None:
    most, cap = _LIMITS[kind]
    if count > most:
        raise BadRequest(f"Too many {kind}s: a request can include up to {most}.")
    if "bytes" not in source:
        return
    try:
        size = len(base64.b64decode(source["bytes"], validate=True))
    except (binascii.Error, ValueError):
        raise BadRequest(f"Invalid base64 in the {kind} bytes.") from None
    if size > cap:
        raise BadRequest(f"The {kind} is {size} bytes; the maximum is {cap} bytes.")


def _check_tool_schemas(config: Mapping[str, Any], model: str) -> None:
    """Claude's own check of a tool's input schema, which Bedrock passes on: its type is
    "object" (Anthropic's `input_schema.type`)."""
    if "anthropic." not in model:
        return
    for i, tool in enumerate(config.get("tools") or ()):
        schema = tool.get("toolSpec", {}).get("inputSchema", {}).get("json")
        if isinstance(schema, dict) and schema.get("type") != "object":
            problem = "Field required" if "type" not in schema else "Input should be 'object'"
            raise BadRequest(f"{_MODEL_ERROR}tools.{i}.custom.input_schema.type: {problem}")


def _check_tool_family(body: Mapping[str, Any], messages: list[Any], model: str) -> None:
    """SpecificToolChoice ("only supported by Anthropic Claude 3 and Amazon Nova models")
    and ToolResultBlock.status (Nova, Claude 3 and 4); Claude's thinking without its
    signature, which Claude refuses."""
    family = any(f in model for f in ("anthropic.", "amazon.nova"))
    choice = (body.get("toolConfig") or {}).get("toolChoice") or {}
    if "tool" in choice and not family:
        raise BadRequest("This model doesn't support the toolConfig.toolChoice.tool field.")
    for i, message in enumerate(messages):
        for j, block in enumerate(message["content"]):
            if "status" in block.get("toolResult", {}) and not family:
                raise BadRequest(
                    f"This model doesn't support the status field in the ToolResultBlock "
                    f"object at messages.{i}.content.{j}."
                )
            text = block.get("reasoningContent", {}).get("reasoningText")
            if "anthropic." in model and text is not None and not text.get("signature"):
                raise BadRequest(
                    f"{_MODEL_ERROR}messages.{i}.content.{j}.thinking.signature: Field required"
                )


def _check_tool_choice(config: Mapping[str, Any]) -> None:
    choice = config.get("toolChoice") or {}
    names = {t["toolSpec"]["name"] for t in config["tools"] if "toolSpec" in t}
    if "tool" in choice and choice["tool"]["name"] not in names:
        name = choice["tool"]["name"]
        raise BadRequest(f"The tool {name} in toolConfig.toolChoice is not one of the tools.")


def _check_adaptive(body: Mapping[str, Any], model: str) -> None:
    """A Claude that takes only adaptive thinking: no budget, no sampling, a known effort."""
    if "anthropic." not in model or not adaptive_only(model.split("anthropic.", 1)[1]):
        return
    extra = body.get("additionalModelRequestFields")
    thinking = extra.get("thinking") if isinstance(extra, dict) else None
    problem = None
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        problem = (
            '"thinking.type.enabled" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
        )
    inference = body.get("inferenceConfig") or {}
    # Claude's own names: Bedrock passes the sampling fields on to the model as these.
    present = [wire for name, wire in _SAMPLING if name in inference]
    if present:
        problem = f"`{present[0]}` is deprecated for this model."
    effort = (body.get("outputConfig") or {}).get("effort")
    if effort is not None and effort not in _EFFORTS:
        problem = "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
    if problem is not None:
        raise BadRequest(f"{_MODEL_ERROR}{problem}")


def _check_thinking(body: Mapping[str, Any]) -> None:
    """Claude's extended thinking: a budget of at least 1024 below maxTokens, temperature
    1 or unset, topP 0.95 or more or unset, and no forced tool."""
    extra = body.get("additionalModelRequestFields")
    thinking = extra.get("thinking") if isinstance(extra, dict) else None
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    inference = body.get("inferenceConfig") or {}
    budget = thinking.get("budget_tokens")
    problem = None
    if not isinstance(budget, int) or budget < 1024:
        problem = "thinking.budget_tokens: Input should be greater than or equal to 1024"
    elif budget >= inference.get("maxTokens", budget + 1):
        problem = "`max_tokens` must be greater than `thinking.budget_tokens`."
    elif inference.get("temperature", 1) != 1:
        problem = "`temperature` may only be set to 1 when thinking is enabled."
    elif inference.get("topP", 1) < 0.95:
        problem = "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled."
    elif {"any", "tool"} & set((body.get("toolConfig") or {}).get("toolChoice") or {}):
        problem = "Thinking may not be enabled when tool_choice forces tool use."
    if problem is not None:
        raise BadRequest(f"{_MODEL_ERROR}{problem} Please consult {_THINKING_DOC}")
