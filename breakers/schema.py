"""Schema versions of what is stored in Redis, and the one rule every reader applies.

Each kind of stored item has a schema version, an integer that grows only when a
reader of the version before would misread the new one; a release that only adds
fields keeps it, and readers ignore the fields they do not know. Where an item says
its version (`SCHEMA_FIELD`: a stream entry's field, a JSON object's key), a reader
whose release reads up to a lower version calls that item unreadable; where it says
none, it is version 1 (what relevo 0.1.0 wrote, whose strict readers must still read
what a newer release writes where they read).

`read_entry` decodes a stream entry by that rule. `breakers` and `budgets` use it for
their streams (held turns, hand-offs); `worker` for its own and, with pydantic, for its
JSON items (`worker.fleet.schema`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMA_FIELD", "ReadProblem", "StreamEntry", "read_entry", "version_problem"]

SCHEMA_FIELD = "schema_version"
_DIGITS = re.compile(r"[1-9][0-9]{0,8}")


@dataclass(frozen=True, slots=True)
class ReadProblem:
    """Why an item cannot be read: `newer` when a newer release wrote it (nothing is
    wrong with it; that release reads it), else it is damaged. Never its content."""

    why: str
    newer: bool = False


def version_problem(written: object, newest: int) -> ReadProblem | None:
    """The problem with an item that says it has schema version `written` (None: says
    none, version 1) for a reader of versions up to `newest`; None if it can be read."""
    if written is None:
        return None
    if isinstance(written, bytes):
        written = written.decode("ascii", "replace")
    if isinstance(written, str) and _DIGITS.fullmatch(written):
        written = int(written)
    if not isinstance(written, int) or isinstance(written, bool) or written < 1:
        return ReadProblem(f"its {SCHEMA_FIELD} is not a version number")
    if written > newest:
        return ReadProblem(
            f"a newer release wrote it (schema version {written}; this release reads "
            f"up to {newest})",
            newer=True,
        )
    return None


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """A stream entry's fields as text, its schema version and why it cannot be read.

    A field that is not UTF-8 is given with its bad bytes escaped (`\\xff`), for a person
    to look at; `problem` says so.
    """

    fields: dict[str, str]
    version: int
    problem: ReadProblem | None = None


def read_entry(raw: Mapping[Any, Any] | Sequence[Any], newest: int) -> StreamEntry:
    """A stream entry's fields (a mapping, or the flat list a Lua script returns) read by
    the rule above, for a reader of schema versions up to `newest`."""
    pairs = raw.items() if isinstance(raw, Mapping) else zip(raw[::2], raw[1::2], strict=True)
    fields: dict[str, str] = {}
    bad: list[str] = []
    for key, value in pairs:
        name, name_ok = _text(key)
        fields[name], value_ok = _text(value)
        if not (name_ok and value_ok):
            bad.append(name)
    written = fields.get(SCHEMA_FIELD)
    problem = version_problem(written, newest)
    if bad and (problem is None or not problem.newer):
        problem = ReadProblem(f"its field {bad[0]!r} is not UTF-8 text")
    version = int(written) if written is not None and _DIGITS.fullmatch(written) else 1
    return StreamEntry(fields, version, problem)


def _text(value: object) -> tuple[str, bool]:
    if not isinstance(value, bytes):
        return str(value), True
    try:
        return value.decode("utf-8"), True
    except UnicodeDecodeError:
        return value.decode("utf-8", "backslashreplace"), False
