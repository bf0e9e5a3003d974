"""How the templates show amounts, times and rates (Jinja2 filters)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from jinja2 import Environment

from budgets import format_micros

__all__ = ["install"]


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as a UTC time, "-" for none."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def seconds(value: float) -> str:
    """A time left: "-" for none, "pinned" for forever."""
    if math.isinf(value):
        return "pinned"
    return "-" if value <= 0 else f"{value:.1f}s"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def install(env: Environment) -> None:
    """Add the filters to `env`."""
    env.filters.update(usd=format_micros, utc=utc, seconds=seconds, percent=percent)
