"""The answer to a turn that asked for JSON: parsed, and checked against its schema.

Every provider is asked for the turn's `response_format` in its own way (a schema it
enforces, or only "JSON, please"); whatever it says, the answer is read here, once, the
same way for all: JSON, an object for `json_object`, valid against the schema for
`json_schema`. An answer that is not is `OutputInvalid`: the attempt failed (and was
billed), and the policy table moves the turn to the next model.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from worker.errors import OutputInvalid
from worker.types import JsonObjectFormat, JsonSchemaFormat

__all__ = ["read_output"]

_SHOWN_CHARS = 200


def read_output(text: str, wanted: JsonSchemaFormat | JsonObjectFormat | None) -> Any:
    """The answer's JSON value (None when the turn asked for none); `OutputInvalid`
    when it is not what `wanted` asks for."""
    if wanted is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputInvalid(f"the answer is not JSON: {exc.msg} at character {exc.pos}") from None
    if isinstance(wanted, JsonObjectFormat):
        if not isinstance(value, dict):
            raise OutputInvalid(f"the answer is JSON but not an object ({type(value).__name__})")
        return value
    error = next(Draft202012Validator(wanted.json_schema).iter_errors(value), None)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise OutputInvalid(
            f"the answer does not match schema {wanted.name!r} at {where}: "
            f"{error.message[:_SHOWN_CHARS]}"
        )
    return value
