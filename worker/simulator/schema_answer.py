"""The simulated model's answer to a turn that asks for JSON: a small instance of the schema.

A valid answer holds the required properties (all of them, for a strict schema), each the
first of its allowed types, enum values or `anyOf` branches, at its minimum length; it is
what a real model under structured output would send, in shape if not in sense. An
invalid answer (`Fault.invalid_output`) is JSON the schema refuses (a list where an
object is asked for), so the caller's own validation is what catches it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["json_answer", "schema_instance"]

_MAX_DEPTH = 32  # a recursive schema ends in null rather than recursing forever
# Shapes an invalid answer takes: a list where an object is asked for, and so on.
_MISFITS: tuple[Any, ...] = (["not", "what", "was", "asked"], {"not": "asked"}, "not asked", 0)
_SCALARS: dict[str, Any] = {
    "string": "Answer",
    "integer": 1,
    "number": 1,
    "boolean": True,
    "null": None,
}


def json_answer(schema: Mapping[str, Any], *, valid: bool = True) -> str:
    """The answer's JSON text: an instance of `schema`, or (not `valid`) JSON it refuses."""
    value = schema_instance(schema) if valid else _mismatch(schema)
    return json.dumps(value, separators=(",", ":"))


def schema_instance(schema: Mapping[str, Any]) -> Any:
    """A small value that validates against `schema` (local `$ref`s followed)."""
    return _instance(schema, schema, 0)


def _instance(node: Any, root: Mapping[str, Any], depth: int) -> Any:  # noqa: PLR0911 - one exit per keyword
    if not isinstance(node, Mapping) or depth > _MAX_DEPTH:
        return None
    if "$ref" in node:
        return _instance(_resolve(root, str(node["$ref"])), root, depth + 1)
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if node.get(key):
            return _instance(node[key][0], root, depth + 1)
    kind = node.get("type", "object" if "properties" in node else "null")
    if isinstance(kind, list):
        kind = kind[0] if kind else "null"
    if kind == "object":
        properties = node.get("properties") or {}
        return {
            name: _instance(properties.get(name, {}), root, depth + 1)
            for name in node.get("required") or ()
        }
    if kind == "array":
        count = int(node.get("minItems", 0))
        return [_instance(node.get("items", {}), root, depth + 1) for _ in range(count)]
    if kind == "string":
        return "x" * int(node["minLength"]) if "minLength" in node else _SCALARS["string"]
    if kind in ("integer", "number"):
        return node.get("minimum", node.get("exclusiveMinimum", 0) + 1)
    return _SCALARS.get(kind)


def _mismatch(schema: Mapping[str, Any]) -> Any:
    """JSON the schema refuses: the first of a few shapes that does not validate."""
    validator = Draft202012Validator(dict(schema))
    return next((c for c in _MISFITS if not validator.is_valid(c)), _MISFITS[0])


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """A `#/...` pointer into the root schema; anything else resolves to nothing."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for key in filter(None, ref[1:].split("/")):
        name = key.replace("~1", "/").replace("~0", "~")
        node = node.get(name) if isinstance(node, Mapping) else None
    return node
