"""What a simulated model answers to a request for structured output: a small JSON value
its schema accepts (the required properties, each the simplest value of its type), or,
when a fault asks for a bad answer, one the schema refuses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["answer_text", "instance"]

_SAMPLE_STRING = "sim"


def instance(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """A small value `schema` accepts: its `const` or first `enum` value, the first branch
    of `anyOf`/`oneOf`/`allOf`, an object of its required properties, an array of its
    `minItems`, the smallest number or string allowed; `$ref`s within `root` followed."""
    root = schema if root is None else root
    schema = _resolved(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        return {name: instance(properties.get(name, {}), root) for name in required}
    if kind == "array":
        return [instance(schema.get("items", {}), root)] * int(schema.get("minItems", 0))
    return _scalar(kind, schema)


def _resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """`schema` with its `$ref` followed and its first `anyOf`/`oneOf`/`allOf` branch taken."""
    for _ in range(32):  # a bound, for a schema that refers to itself
        ref = schema.get("$ref")
        branch = next((schema[k][0] for k in ("anyOf", "oneOf", "allOf") if schema.get(k)), None)
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for step in ref[2:].split("/"):
                target = target.get(step, {}) if isinstance(target, Mapping) else {}
            schema = target if isinstance(target, Mapping) else {}
        elif isinstance(branch, Mapping):
            schema = branch
        else:
            break
    return schema


def _scalar(kind: Any, schema: Mapping[str, Any]) -> Any:
    if kind == "string":
        length = int(schema.get("minLength", 0))
        return _SAMPLE_STRING if length <= len(_SAMPLE_STRING) else "s" * length
    if kind in ("integer", "number"):
        if "minimum" in schema:
            return schema["minimum"]
        return schema["exclusiveMinimum"] + 1 if "exclusiveMinimum" in schema else 0
    return {"boolean": True, "null": None}.get(kind, {})


def answer_text(schema: Mapping[str, Any], *, valid: bool = True) -> str:
    """The JSON text of `instance(schema)`; with `valid` false, JSON the schema refuses
    (the instance wrapped in a list, or a list unwrapped), or text that is no JSON at all
    when the schema accepts anything."""
    value = instance(schema)
    if valid:
        return json.dumps(value)
    wrong = value[0] if isinstance(value, list) and value else [value]
    if Draft202012Validator(dict(schema)).is_valid(wrong):
        return "{not json"
    return json.dumps(wrong)
