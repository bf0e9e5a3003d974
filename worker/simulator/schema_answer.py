"""The simulated model's answer to a request for JSON: a small instance of the schema.

`schema_instance` builds the smallest value the schema's `type`, `required`, `enum`,
`const`, `minItems`, `minimum` and first `anyOf`/`oneOf` branch allow (enough for the
schemas agents send); an invalid answer (`Fault.invalid_output`) is a JSON value of
another type, which no typed schema accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["json_answer", "schema_instance"]

_MAX_DEPTH = 16


def json_answer(schema: Mapping[str, Any], *, valid: bool = True) -> str:
    """The answer's JSON text: an instance of `schema`, or (not `valid`) JSON it refuses."""
    value = schema_instance(schema) if valid else _mismatch(schema)
    return json.dumps(value, separators=(",", ":"))


def schema_instance(schema: Mapping[str, Any]) -> Any:
    """A small value valid against `schema` (local `$ref`s followed)."""
    return _sample(schema, schema, 0)


def _mismatch(schema: Mapping[str, Any]) -> Any:
    """An object where the schema wants an array, else an array."""
    return {"unexpected": True} if schema.get("type") == "array" else ["unexpected"]


def _sample(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return None
    schema = _resolved(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    branch = next((schema[k][0] for k in ("anyOf", "oneOf") if schema.get(k)), None)
    if branch is not None:
        return _sample(branch, root, depth + 1)
    return _typed(schema, root, depth)


def _typed(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> Any:
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            name: _sample(properties.get(name, {}), root, depth + 1)
            for name in schema.get("required") or ()
        }
    if kind == "array":
        item = schema.get("items") or {}
        return [_sample(item, root, depth + 1) for _ in range(int(schema.get("minItems", 0)))]
    return _scalar(kind, schema)


def _resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema a local `$ref` (`#/$defs/...`) points at; `schema` itself otherwise."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for key in ref[2:].split("/"):
        target = target.get(key, {}) if isinstance(target, Mapping) else {}
    return target if isinstance(target, Mapping) else {}


def _scalar(kind: str, schema: Mapping[str, Any]) -> Any:
    if kind == "string":
        return "x" * int(schema.get("minLength", 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = max(0, low + 1 if "exclusiveMinimum" in schema else low)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    return None
