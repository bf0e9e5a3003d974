"""What the fleet stores or queues carries a schema version; `read_stored` reads it back.

The rule is `breakers.schema`'s: a version grows only when a reader of the one before
would misread the new one, readers ignore fields they do not know, and an item that says
no version is version 1. Where each item kind says its version:

    a turn in a Celery message     the message header SCHEMA_HEADER
    a turn's sent record           its JSON's `schema_version` key; none written: version 1
    a turn's result                its JSON's `schema_version` key; none written: version 1
    a turn's stream                its run marker's `schema_version` field (`streams`)
    a held turn, a hand-off        the entry's `schema_version` field (breakers, budgets)
    a worker's heartbeat           its JSON's `schema_version` key (`heartbeat`)
    an audit entry                 the entry's `schema_version` field (`audit`)

relevo 0.1.0 reads turns, results and sent records with models that refuse a field they
do not know, so nothing is written inside those: a release writes the key there only
once no 0.1.0 process is left. User input is another matter: a turn given to
`enqueue_turn`, `Producer` or `relevo turn` is checked strictly (`parse_turn_request`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from breakers.schema import SCHEMA_FIELD, ReadProblem, version_problem
from worker.fleet.errors import Unreadable
from worker.types import TurnRequest, TurnResult, describe_validation_error

__all__ = [
    "AUDIT_SCHEMA",
    "HEARTBEAT_SCHEMA",
    "RESULT_SCHEMA",
    "SCHEMA_HEADER",
    "STREAM_SCHEMA",
    "TURN_SCHEMA",
    "log_unreadable",
    "read_result",
    "read_stored",
    "read_turn",
]

SCHEMA_HEADER = "relevo_schema_version"
TURN_SCHEMA = 1
RESULT_SCHEMA = 1
STREAM_SCHEMA = 1
HEARTBEAT_SCHEMA = 1
AUDIT_SCHEMA = 1

log = structlog.get_logger("relevo.schema")
M = TypeVar("M", bound=BaseModel)
_MARKER = f'"{SCHEMA_FIELD}"'
_PROBLEMS_SHOWN = 3


def read_stored(
    model: type[M],
    raw: bytes | str | Mapping[str, Any],
    *,
    newest: int,
    what: str,
    turn_id: str | None = None,
) -> M:
    """`raw` (JSON, or the object it decoded to) as `model`, fields this release does not
    know ignored; `Unreadable` (naming `what` and the turn) if it says a schema version
    above `newest`, or is not JSON of the model's shape."""
    problem = version_problem(_written(raw), newest)
    if problem is not None:
        raise Unreadable(what, problem, turn_id=turn_id)
    try:
        if isinstance(raw, Mapping):
            return model.model_validate(raw, extra="ignore")
        return model.model_validate_json(raw, extra="ignore")
    except ValidationError as exc:
        problem = ReadProblem(describe_validation_error(exc, most=_PROBLEMS_SHOWN))
        raise Unreadable(what, problem, turn_id=turn_id) from None


def read_result(raw: bytes | str | Mapping[str, Any], turn_id: str) -> TurnResult:
    """A turn's stored result (`read_stored`)."""
    return read_stored(TurnResult, raw, newest=RESULT_SCHEMA, what="result", turn_id=turn_id)


def read_turn(raw: bytes | str | Mapping[str, Any], turn_id: str) -> TurnRequest:
    """A stored turn request: a sent record or a held turn's payload (`read_stored`)."""
    return read_stored(TurnRequest, raw, newest=TURN_SCHEMA, what="request", turn_id=turn_id)


def log_unreadable(exc: Unreadable) -> None:
    """Log what a process could not read: one event, `stored.unreadable`, for every kind."""
    log.warning(
        "stored.unreadable", what=exc.what, turn_id=exc.turn_id, why=exc.why, newer=exc.newer
    )


def _written(raw: bytes | str | Mapping[str, Any]) -> object:
    """The schema version `raw` says it has (None: none)."""
    if isinstance(raw, Mapping):
        return raw.get(SCHEMA_FIELD)
    # Looked for before anything is parsed twice: items without the key are the rule.
    found = _MARKER.encode() in raw if isinstance(raw, bytes) else _MARKER in raw
    if not found:
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return None  # not JSON: validating says so
    return decoded.get(SCHEMA_FIELD) if isinstance(decoded, dict) else None
