"""What every settings section shares: frozen, strict, its fields' docstrings as their
descriptions, and the names that become parts of Redis keys."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

import budgets

ModelSlug = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:-]*$")
]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]


class Section(BaseModel):
    # A field's docstring is its description: docs/configuration.md is generated from them.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def to_micros(dollars: Decimal) -> int:
    """Dollars as integer micro-dollars, rounded up (a price or a limit is never understated)."""
    return int((dollars * budgets.MICROS_PER_DOLLAR).to_integral_value(rounding=ROUND_CEILING))
