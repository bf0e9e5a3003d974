"""How the templates show amounts, times and rates (Jinja2 filters), and any text at all.

Everything a template prints passes `visible` first (the environment's `finalize`):
direction overrides and isolates, zero-width and control characters show as
"[U+202E]" instead of acting, so "all clear [U+202E]FFO ton od" cannot read as
"all clear do not OFF" in a kill-switch reason, a tenant id or a model's text.
Joiners inside emoji and scripts, newlines and tabs are left as they are.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from budgets import format_micros
from worker.observability.visible import ACTING
from worker.observability.visible import visible as written_out

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


# A field of a stored result (an error, a detail, a model name) is shown up to this long.
CLIP_CHARS = 1000


def clip(value: Any, chars: int = CLIP_CHARS) -> Any:
    """`value` cut to `chars` characters, saying how many more there were."""
    if not isinstance(value, str) or len(value) <= chars:
        return value
    return f"{value[:chars]}… ({len(value) - chars:,} more characters not shown)"


def visible(value: Any) -> Any:
    """`value` with characters that act on the text around them written out."""
    if not isinstance(value, str) or not ACTING.search(value):
        return value
    shown = written_out(value, acting=ACTING)
    # "[U+…]" holds nothing HTML reads: already-escaped markup stays markup.
    return Markup(shown) if isinstance(value, Markup) else shown  # noqa: S704


def install(env: Environment) -> None:
    """Add the filters to `env`, and `visible` on everything it prints."""
    env.filters.update(usd=format_micros, utc=utc, seconds=seconds, percent=percent, clip=clip)
    env.finalize = visible
