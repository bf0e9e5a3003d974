"""A clock for tests: epoch milliseconds that move only when told (ARGV[1] of a script)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["ManualClock"]


class ManualClock:
    """Epoch milliseconds that move only when told: a store's or ledger's `clock_ms`.

    The scripts compare times with it; Redis key TTLs still run on real time, so a test
    advances it by less than the TTLs it relies on.
    """

    def __init__(self, start: datetime | int) -> None:
        self.now_ms = start if isinstance(start, int) else _to_ms(start)

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` (whole milliseconds)."""
        self.now_ms += round(seconds * 1000)

    def set(self, when: datetime) -> None:
        """Jump to `when` (an aware datetime)."""
        self.now_ms = _to_ms(when)


def _to_ms(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("ManualClock needs an aware datetime, e.g. datetime(..., tzinfo=UTC)")
    return int(when.astimezone(UTC).timestamp() * 1000)
