"""The JSON Schema Claude's structured outputs take, made from the caller's.

Claude decodes its answer against a subset of JSON Schema and refuses (400) a schema
outside it: every object closed (`additionalProperties: false`), no numeric, length or
count bounds (`minItems` of 0 or 1 only), a short list of string formats. The schema sent
is the caller's made to fit the way Anthropic's own SDKs do it ("How SDK transformation
works", platform.claude.com/docs/en/build-with-claude/structured-outputs; the Python SDK's
`lib/_parse/_transform.py`): objects closed, and every keyword outside the subset moved
into the description, where the model still reads it. relevo checks the answer against
the caller's whole schema afterwards, so nothing is lost: an answer outside it is
`output_invalid`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["claude_schema"]

_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_KEPT = frozenset({"type", "enum", "title", "required"})
# Named subschemas: `definitions` is draft 7's name for `$defs`, and `$ref`s point into it.
_SUBSCHEMAS = frozenset({"$defs", "definitions", "properties"})


def claude_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` within the subset Claude's structured outputs accept."""
    out: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    if "$ref" in schema:
        # A reference stands for its target: its siblings would be ignored, as the SDK does.
        for key in ("$defs", "definitions"):
            defs = schema.get(key)
            if isinstance(defs, Mapping):
                out[key] = {name: claude_schema(sub) for name, sub in defs.items()}
        return {"$ref": schema["$ref"], **out}
    for key, value in schema.items():
        if key in _SUBSCHEMAS and isinstance(value, Mapping):
            out[key] = {name: claude_schema(sub) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out["allOf" if key == "allOf" else "anyOf"] = [claude_schema(s) for s in value]
        elif key == "items" and isinstance(value, Mapping):
            out[key] = claude_schema(value)
        elif (
            key in _KEPT
            or (key == "format" and value in _FORMATS)
            or (key == "minItems" and value in (0, 1))
        ):
            out[key] = value
        elif key not in ("description", "additionalProperties"):
            rest[key] = value
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):  # nullable too
        out.setdefault("properties", {})
        out["additionalProperties"] = False
    description = schema.get("description")
    if rest:
        note = "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in rest.items()) + "}"
        description = note if description is None else f"{description}\n\n{note}"
    if description is not None:
        out["description"] = description
    return out
