"""Answers to structured-output requests: a small JSON instance of a schema, or a near miss.

A simulated model asked for JSON (a response schema, a forced tool's input) answers with
the smallest value its schema's `required` properties and types call for; told to
misbehave (`Fault.invalid_output`), with JSON of the right shape that does not validate,
so a caller's own validation is what catches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["instance", "mismatch"]

_FORMATTED = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def instance(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """A small value valid against `schema` (for the keywords this reads)."""
    root = schema if root is None else root
    schema = _chosen(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = _type(schema)
    if kind == "object":
        properties = schema.get("properties") or {}
        return {k: instance(properties.get(k, {}), root) for k in schema.get("required") or ()}
    if kind == "array":
        return [instance(schema.get("items") or {}, root)] * int(schema.get("minItems") or 0)
    return _scalar(kind, schema)


def mismatch(schema: Mapping[str, Any]) -> Any:
    """JSON of the schema's kind that fails it: an object's required properties of the
    wrong type (an object with a stray property when none is required and the object is
    closed; an open one, JSON mode's, takes any object: a list then), anything else of
    the wrong type."""
    if _type(schema) != "object":
        return _wrong(schema)
    properties = schema.get("properties") or {}
    required = schema.get("required") or ()
    if not required:
        closed = schema.get("additionalProperties") is False
        return {"unexpected": True} if closed else ["unexpected"]
    return {k: _wrong(properties.get(k, {})) for k in required}


def _chosen(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema a value is made for: a reference's target, a combination's first."""
    for _ in range(64):  # references may loop; a value is made for whatever is reached
        if "$ref" in schema:
            schema = _resolve(root, str(schema["$ref"]))
            continue
        combined = next((schema[k] for k in ("anyOf", "oneOf", "allOf") if schema.get(k)), None)
        if combined is None:
            break
        schema = combined[0]
    return schema


def _scalar(kind: str, schema: Mapping[str, Any]) -> Any:
    if kind == "string":
        return _FORMATTED.get(schema.get("format", ""), "x" * int(schema.get("minLength") or 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else float(low)
    return {"boolean": False, "null": None}.get(kind, "x")


def _wrong(schema: Mapping[str, Any]) -> Any:
    return 0 if _type(schema) == "string" else "not what the schema asks for"


def _type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        return "object"
    return str(kind) if kind is not None else "any"


def _resolve(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    """A local reference (`#/$defs/Name`); anything else as an empty schema."""
    node: Any = root
    for step in ref.removeprefix("#/").split("/") if ref.startswith("#/") else ():
        node = node.get(step, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) and ref.startswith("#/") else {}
