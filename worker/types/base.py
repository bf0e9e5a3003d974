"""What every turn type shares: frozen, strict models, and the ids that become Redis keys."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, WithJsonSchema
from pydantic_core import PydanticCustomError

from budgets import InvalidNameError, check_tenant
from budgets.keys import TENANT_MAX_CHARS, TENANT_PATTERN


def _tenant(value: str) -> str:
    # budgets' own check, so a request, a command and the console refuse an id in the same
    # one line naming the characters allowed (a pattern's mismatch names only the pattern).
    try:
        return check_tenant(value)
    except InvalidNameError as exc:
        raise PydanticCustomError("tenant_id", "{reason}", {"reason": str(exc)}) from None


# Tenant ids and turn ids become parts of Redis keys; tenant ids as platforms write them
# ("org:1234", "team/42", "user@example.com"): `budgets.keys.TENANT_PATTERN`.
TenantId = Annotated[
    str,
    AfterValidator(_tenant),
    WithJsonSchema({"type": "string", "pattern": TENANT_PATTERN, "maxLength": TENANT_MAX_CHARS}),
]
_TURN_ID = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
TurnId = Annotated[str, StringConstraints(pattern=f"^{_TURN_ID}$")]
TURN_ID_RULE = "1 to 128 letters, digits, '_', '.' or '-', the first a letter, digit or '_'"
"""What a turn id is, as an error about one says it (never echoing the value)."""
_TURN_ID_MATCH = re.compile(_TURN_ID).fullmatch


def is_turn_id(value: object) -> bool:
    """Whether `value` is a turn id (`TurnId`): the one check every reader of one uses."""
    return isinstance(value, str) and _TURN_ID_MATCH(value) is not None


# A chain's name, as `[chains.NAME]` may be written (`worker.settings.base.Name`).
ChainName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
# A turn's metadata: a few string pairs for attribution (docs/routing.md). Values are
# printable: no control character (C0, DEL, C1), line or paragraph separator, bidi
# control, zero-width character or BOM, which would forge a log line or a console cell.
MetadataKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
MetadataValue = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=256,
        pattern=r"^[^\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]+$",
    ),
]
MAX_METADATA_PAIRS = 16
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class Frozen(BaseModel):
    """A value of the turn: immutable, and refusing fields it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")
