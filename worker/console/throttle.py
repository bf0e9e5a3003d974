"""Login attempts per minute, per client address and per token (token buckets, in process)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["Throttle"]

# Enough for every address and person a console sees; a flood of new addresses drops the
# longest-idle buckets (full ones, by then) rather than growing memory.
_MAX_KEYS = 10_000


@dataclass
class Throttle:
    """`per_minute` attempts for each key, in bursts of up to `per_minute`."""

    per_minute: int
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # tokens, at

    def wait_s(self, key: str) -> float:
        """0 and one attempt taken, or the seconds until `key` may try again."""
        now = time.monotonic()
        tokens, at = self._buckets.pop(key, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) * 60 / self.per_minute
        self._buckets[key] = (tokens - 1, now)  # re-inserted: dict order is last use
        while len(self._buckets) > _MAX_KEYS:
            del self._buckets[next(iter(self._buckets))]
        return 0.0
