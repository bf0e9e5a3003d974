"""The fleet's evidence for hedged attempts: first-byte latency per pair, and a hedge budget.

Latency: each (account, model) pair has a histogram per time window, fixed log-spaced
buckets (eight per doubling, 10 ms to about five minutes), one hash field per bucket. An
attempt adds one count (`hedge_observe.lua`: one HINCRBY, its TTL refreshed); a reader
sums the current window and the one before, so older samples fall away.

Budget: a token bucket in thousandths of a hedge. Every attempt that is not a hedge
earns `share` of one (in the same script, one more HINCRBY); a hedge takes a whole one
(`hedge_take.lua`), the bucket holding at most `burst`. Hedges thus stay at most `share`
of the attempts, fleet-wide, plus `burst`.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Mapping

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from breakers.keys import Keys
from breakers.scripts import SCRIPTS
from rediskit import Parse, raise_if_error, text

__all__ = ["EDGES_MS", "HedgeStore", "bucket_of", "percentile_ms"]

# Upper edges of the buckets: 10 ms * 2^(k/8), k = 0..119 (10 ms .. about 300 s). A
# percentile reads as its bucket's upper edge: at most 9 % above the latency it stands for.
EDGES_MS: tuple[float, ...] = tuple(10 * 2 ** (k / 8) for k in range(120))
_BUDGET_TTL_MS = 86_400_000


def bucket_of(latency_ms: float) -> int:
    """The bucket a latency falls in: the first whose upper edge is at least it."""
    return min(bisect.bisect_left(EDGES_MS, latency_ms), len(EDGES_MS) - 1)


def percentile_ms(counts: Mapping[int, int], pct: float, *, min_samples: int) -> float | None:
    """The nearest-rank `pct` percentile of a histogram, as its bucket's upper edge (a
    little above the true value); None below `min_samples` samples."""
    total = sum(counts.values())
    if total < max(1, min_samples):
        return None
    rank = max(1, math.ceil(pct / 100 * total))
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return EDGES_MS[index]
    raise AssertionError("unreachable")  # pragma: no cover


class HedgeStore:
    """First-byte histograms and the hedge budget of one namespace, in Redis."""

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "relevo",
        window_s: float = 300.0,
        share: float = 0.05,
        burst: int = 10,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window_s <= 0 or not 0 <= share <= 1 or burst < 1:
            raise ValueError("window_s > 0, 0 <= share <= 1 and burst >= 1 are required")
        self.redis = redis
        self.keys = Keys(namespace)
        self.window_s = window_s
        self.earned_milli = round(share * 1000)
        self.burst = burst
        self._clock = clock

    def _slot(self) -> int:
        return int(self._clock() // self.window_s)

    def observe_on(
        self, pipe: Pipeline, account: str, model: str, latency_ms: float | None, *, hedge: bool
    ) -> None:
        """Queue one attempt's first-byte latency (None: not known) and its refill of the
        budget (none for a hedge) on `pipe`: one command."""
        key = self.keys.first_byte(account, model, self._slot())
        bucket = "" if latency_ms is None else bucket_of(latency_ms)
        ttl_ms = math.ceil(2 * self.window_s * 1000) + 60_000
        earned = 0 if hedge else self.earned_milli
        keys = [key, self.keys.hedge_budget]
        SCRIPTS.queue(pipe, "hedge_observe", keys, [bucket, ttl_ms, earned, _BUDGET_TTL_MS])

    async def take(self) -> bool:
        """Take one hedge from the budget; False when it holds none."""

        def queue(pipe: Pipeline) -> Parse[bool]:
            keys = [self.keys.hedge_budget]
            SCRIPTS.queue(pipe, "hedge_take", keys, [self.burst * 1000])

            async def parse(reply: object) -> bool:
                return int(raise_if_error(reply)) == 1

            return parse

        return await SCRIPTS.run(self.redis, queue)

    async def counts(self, account: str, model: str) -> dict[int, int]:
        """The pair's histogram over this window and the one before."""
        slot = self._slot()
        async with self.redis.pipeline(transaction=False) as pipe:
            for window in (slot - 1, slot):
                pipe.hgetall(self.keys.first_byte(account, model, window))
            replies = await pipe.execute()
        counts: dict[int, int] = {}
        for reply in replies:
            for field, value in reply.items():
                index = int(text(field))
                counts[index] = counts.get(index, 0) + int(text(value))
        return counts
