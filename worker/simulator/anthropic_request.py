"""What the Messages API takes in a request body, checked the way the API checks it.

A body the real API refuses is refused here with a 400 in its words: an unknown field,
a malformed content block (images: base64 or URL sources of four image types; documents:
PDF data, a URL, or text; tool results carrying text, images and documents), `tool_choice`
naming no tool or given without tools, sampling fields the model refuses (`temperature`
with `top_p` on Claude 4 and later; any of them on models that take only adaptive
thinking; other than their defaults while thinking), thinking budgets out of range, a
forced tool while thinking, and a structured-output schema outside Claude's subset.
Messages quoted in public reports of the API's errors are quoted; the others follow
their pattern. The simulated model plays a current Claude (4 or later).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.simulator.wire import BadRequest

__all__ = ["MESSAGES_FIELDS", "Asked", "adaptive_only", "check_messages_body", "check_schema"]

MESSAGES_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "tools", "tool_choice", "stream",
        "stop_sequences", "temperature", "top_p", "top_k", "thinking", "metadata",
        "output_config", "service_tier", "container", "cache_control", "inference_geo",
    }
)  # fmt: skip
"""The top-level fields of `POST /v1/messages` (the Python SDK's `MessageCreateParams`)."""

# Models that take only adaptive thinking and refuse the sampling fields (their API ids).
_ADAPTIVE_ONLY = (
    "claude-opus-4-7", "claude-opus-4-8", "claude-opus-5", "claude-sonnet-5",
    "claude-haiku-5", "claude-fable-5", "claude-mythos",
)  # fmt: skip
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_MAX_IMAGE_BASE64 = 5 * 1024 * 1024  # an image's base64, as the API counts it
_RESULT_BLOCKS = frozenset({"text", "image", "document", "search_result"})
_USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
_CHOICES = frozenset({"auto", "any", "tool", "none"})
_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
# Structured outputs' subset: keywords refused in a schema, and the formats it knows.
_UNSUPPORTED = frozenset(
    {
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "maxItems", "uniqueItems", "minProperties", "maxProperties",
    }
)  # fmt: skip
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


@dataclass(frozen=True, slots=True)
class Asked:
    """What a valid body asks of the model beyond text."""

    thinking: bool
    answer_schema: Mapping[str, Any] | None
    forced_tool: tuple[str, Mapping[str, Any]] | None


def check_messages_body(
    body: Mapping[str, Any],
    model: str,
    *,
    fields: frozenset[str] = MESSAGES_FIELDS,
    url_sources: bool = True,
    structured_outputs: bool = True,
) -> Asked:
    """Refuse (`BadRequest`) what the API refuses in `body`; `fields` are the top-level
    fields the endpoint takes, `url_sources` and `structured_outputs` whether it takes
    URL sources and `output_config.format`."""
    for key in body:
        if key not in fields:
            raise BadRequest(f"{key}: Extra inputs are not permitted")
    messages = body.get("messages") or ()
    for i, message in enumerate(messages):
        _check_message(i, message, url_sources=url_sources)
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if not message.get("content") and not final_assistant:
            raise BadRequest(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
    tools = {t["name"]: t.get("input_schema") or {} for t in body.get("tools") or ()}
    for i, schema in enumerate(tools.values()):
        if schema.get("type") != "object":
            # The SDK's InputSchema: `type: Literal["object"]`, required.
            problem = "Field required" if "type" not in schema else "Input should be 'object'"
            raise BadRequest(f"tools.{i}.custom.input_schema.type: {problem}")
    forced = _forced_tool(body.get("tool_choice"), tools)
    thinks = _check_thinking(body, model, forced=forced is not None)
    _check_sampling(body, model, thinks=thinks)
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise BadRequest("stop_sequences: Input should be a valid list of strings")
    schema = _output_schema(body.get("output_config"), structured_outputs=structured_outputs)
    return Asked(thinking=thinks, answer_schema=schema, forced_tool=forced)


def adaptive_only(model: str) -> bool:
    """The Claude API id `model` takes only adaptive thinking, and no sampling fields."""
    return model.startswith(_ADAPTIVE_ONLY)


def _check_message(i: int, message: Any, *, url_sources: bool) -> None:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise BadRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        if content and not content.strip():
            raise BadRequest("messages: text content blocks must contain non-whitespace text")
        return
    if not isinstance(content, list):
        raise BadRequest(f"messages.{i}.content: Input should be a valid string or list")
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
    for j, block in enumerate(content):
        _check_block(f"messages.{i}.content.{j}", block, allowed, url_sources=url_sources)


def _check_block(where: str, block: Any, allowed: frozenset[str], *, url_sources: bool) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in allowed:
        expected = ", ".join(f"'{k}'" for k in sorted(allowed))
        raise BadRequest(
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            f"expected tags: {expected}"
        )
    if kind == "text" and not (isinstance(block.get("text"), str) and block["text"]):
        raise BadRequest("messages: text content blocks must be non-empty")
    if kind in ("image", "document"):
        _check_source(f"{where}.{kind}.source", kind, block.get("source"), urls=url_sources)
    if kind == "tool_result":
        content = block.get("content", "")
        if not isinstance(block.get("tool_use_id"), str):
            raise BadRequest(f"{where}.tool_result.tool_use_id: Field required")
        if not isinstance(block.get("is_error", False), bool):
            raise BadRequest(f"{where}.tool_result.is_error: Input should be a valid boolean")
        for k, inner in enumerate(content if isinstance(content, list) else ()):
            where_k = f"{where}.tool_result.content.{k}"
            _check_block(where_k, inner, _RESULT_BLOCKS, url_sources=url_sources)


def _check_source(where: str, kind: str, source: Any, *, urls: bool) -> None:
    shape = source.get("type") if isinstance(source, dict) else None
    if shape == "url" and isinstance(source.get("url"), str):
        if not urls:
            raise BadRequest(f"{where}.url: URL sources are not supported on this platform")
        return
    if shape == "base64" and isinstance(source.get("data"), str):
        media = source.get("media_type")
        if kind == "image" and media not in _IMAGE_TYPES:
            listed = ", ".join(f"'{t}'" for t in _IMAGE_TYPES[:-1])
            raise BadRequest(f"{where}.base64.media_type: Input should be {listed} or 'image/webp'")
        size = len(source["data"])
        if kind == "image" and size > _MAX_IMAGE_BASE64:
            raise BadRequest(
                f"{where}.base64: image exceeds 5 MB maximum: {size} bytes > "
                f"{_MAX_IMAGE_BASE64} bytes"
            )
        if kind == "document" and media != "application/pdf":
            raise BadRequest(f"{where}.base64.media_type: Input should be 'application/pdf'")
        return
    if kind == "document" and shape in ("text", "content"):
        return
    raise BadRequest(
        f"{where}: Input tag '{shape}' found using 'type' does not match any of the expected tags"
    )


def _forced_tool(
    choice: Any, tools: Mapping[str, Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any]] | None:
    """The tool a `tool_choice` forces (`any`: the first), after checking its shape."""
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in _CHOICES:
        raise BadRequest(f"tool_choice: Input tag '{kind}' found using 'type' does not match")
    if not tools:
        raise BadRequest("tool_choice: tool_choice may only be specified while providing tools")
    if kind == "none" and "disable_parallel_tool_use" in choice:
        raise BadRequest(
            "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted"
        )
    if kind == "tool":
        name = choice.get("name")
        if name not in tools:
            raise BadRequest(f"tool_choice.name: Tool '{name}' not found in tools")
        return name, tools[name]
    if kind == "any":
        first = next(iter(tools))
        return first, tools[first]
    return None


def _check_thinking(body: Mapping[str, Any], model: str, *, forced: bool) -> bool:
    """Whether `body` asks for thinking, after checking it as the API does."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if thinking is None or kind == "disabled":
        return False
    if kind == "enabled":
        if adaptive_only(model):
            raise BadRequest(
                '"thinking.type.enabled" is not supported for this model. Use '
                '"thinking.type.adaptive" and "output_config.effort" to control thinking '
                "behavior."
            )
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise BadRequest(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        if budget >= body.get("max_tokens", 0):
            raise BadRequest(
                f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                f"our documentation at {_THINKING_DOCS}#max-tokens-and-context-window-size"
            )
    elif kind != "adaptive":
        raise BadRequest(f"thinking: Input tag '{kind}' found using 'type' does not match")
    if forced:
        raise BadRequest("Thinking may not be enabled when tool_choice forces tool use.")
    return True


def _check_sampling(body: Mapping[str, Any], model: str, *, thinks: bool) -> None:
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and not (isinstance(value, int | float) and 0 <= value <= 1):
            raise BadRequest(f"{name}: Input should be less than or equal to 1")
    present = [n for n in ("temperature", "top_p", "top_k") if n in body]
    if present and adaptive_only(model):
        raise BadRequest(f"`{present[0]}` is deprecated for this model.")
    if "temperature" in body and "top_p" in body:
        raise BadRequest(
            "`temperature` and `top_p` cannot both be specified for this model. "
            "Please use only one."
        )
    if not thinks:
        return
    consult = f"Please consult our documentation at {_THINKING_DOCS}"
    if body.get("temperature", 1) != 1:
        raise BadRequest(
            f"`temperature` may only be set to 1 when thinking is enabled or in adaptive "
            f"mode. {consult}"
        )
    if body.get("top_p", 1) < 0.95:
        raise BadRequest(f"`top_p` must be between 0.95 and 1 when thinking is enabled. {consult}")
    if "top_k" in body:
        raise BadRequest(f"`top_k` must be unset when thinking is enabled. {consult}")


def _output_schema(config: Any, *, structured_outputs: bool) -> Mapping[str, Any] | None:
    """The schema `output_config.format` asks the answer to follow, once checked."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise BadRequest("output_config: Input should be a valid dictionary")
    for key in config:
        if key not in ("effort", "format"):
            raise BadRequest(f"output_config.{key}: Extra inputs are not permitted")
    if "effort" in config and config["effort"] not in _EFFORTS:
        raise BadRequest(
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
        )
    wanted = config.get("format")
    if wanted is None:
        return None
    if not structured_outputs:
        raise BadRequest(
            "output_config.format: structured outputs are not enabled for this project "
            "(organization policy constraints/vertexai.allowedPartnerModelFeatures)"
        )
    if not isinstance(wanted, dict) or wanted.get("type") != "json_schema":
        raise BadRequest("output_config.format.type: Input should be 'json_schema'")
    schema = wanted.get("schema")
    if not isinstance(schema, dict):
        raise BadRequest("output_config.format.schema: Field required")
    check_schema("output_config.format.schema", schema)
    return schema


def _resolve(schema: Mapping[str, Any], ref: str) -> Any:
    """What the local JSON pointer `ref` ("#/$defs/Item") points at in `schema`, or None."""
    node: Any = schema
    for escaped in ref.removeprefix("#").split("/")[1:]:
        step = escaped.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or step not in node:
            return None
        node = node[step]
    return node


def check_schema(where: str, schema: Mapping[str, Any]) -> None:
    """Refuse what Claude's structured outputs refuse: open objects (nullable ones too),
    bounds beyond the subset, a local `$ref` that resolves to nothing; every subschema,
    through properties, items, combinations, `$defs` and `definitions`."""
    stack: list[Mapping[str, Any]] = [schema]
    while stack:
        node = stack.pop()
        kind = node.get("type")
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and _resolve(schema, ref) is None:
            raise BadRequest(f"{where}: Reference '{ref}' could not be resolved")
        objects = kind == "object" or (isinstance(kind, list) and "object" in kind)
        if objects and node.get("additionalProperties") is not False:
            raise BadRequest(
                f"{where}: For 'object' type, 'additionalProperties' must be explicitly set "
                "to false"
            )
        for key in node:
            if key in _UNSUPPORTED or (key == "minItems" and node[key] not in (0, 1)):
                raise BadRequest(f"{where}: For '{kind}' type, property '{key}' is not supported")
        for key in ("properties", "$defs", "definitions"):
            stack.extend(v for v in (node.get(key) or {}).values() if isinstance(v, dict))
        for key in ("anyOf", "allOf"):
            stack.extend(v for v in node.get(key) or () if isinstance(v, dict))
        if isinstance(node.get("items"), dict):
            stack.append(node["items"])
