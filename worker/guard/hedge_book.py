"""The evidence a hedged attempt waits by, and the budget it spends: `HedgeBook`.

The hedge delay of a model on a provider is a high percentile of its first-byte latency
(`breakers.hedges`: fixed log-spaced buckets over two windows), never below the floor,
and the fixed fallback until the pair has enough samples. The budget is a token bucket
that normal attempts refill by a share of a hedge each.

`FleetHedges` keeps both in Redis for the fleet; each process re-reads a pair's delay in
the background every `refresh_s`, so deciding never waits on Redis, and while Redis is
away no hedge starts (a budget that cannot be read is not spent). `LocalHedges` keeps
them in this process, for a chain without a shared store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from breakers.hedges import HedgeStore, bucket_of, percentile_ms
from worker.errors import STORE_DOWN
from worker.guard.autopipeline import AutoPipeline
from worker.guard.protocol import Guard, Target
from worker.guard.redis_guard import RedisGuard
from worker.settings import HedgingSettings, Settings

__all__ = ["FleetHedges", "HedgeBook", "LocalHedges", "hedge_book"]

log = structlog.get_logger("relevo.hedge")
_SHORT_REFRESH_S = 0.5


class HedgeBook(Protocol):
    """First-byte evidence and the hedge budget, as a hedged turn asks for them."""

    def delay_s(self, target: Target) -> float:
        """How long an attempt of `target` waits for content before it is hedged."""
        ...

    async def take(self) -> bool:
        """Spend one hedge from the budget; False when none is left."""
        ...

    def observe(self, target: Target, first_byte_s: float | None, *, hedge: bool) -> None:
        """Record an attempt: its first-byte latency (None: unknown), and whether it was a
        hedge (a hedge earns the budget nothing)."""
        ...


def _delay(counts: Mapping[int, int] | None, plan: HedgingSettings) -> float:
    found = None
    if counts is not None:
        found = percentile_ms(counts, plan.percentile, min_samples=plan.min_samples)
    return plan.fallback_s if found is None else max(plan.floor_s, found / 1000)


class LocalHedges:
    """The evidence and budget of this process alone."""

    def __init__(self, plan: HedgingSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self._clock = clock
        self._counts: dict[tuple[str, str, int], dict[int, int]] = {}
        self._milli = 0  # thousandths of a hedge, as in Redis: no float drift

    def _slot(self) -> int:
        return int(self._clock() // self.plan.window_s)

    def delay_s(self, target: Target) -> float:
        slot, counts = self._slot(), dict[int, int]()
        for window in (slot - 1, slot):
            kept = self._counts.get((target.provider, target.provider_model, window), {})
            for index, n in kept.items():
                counts[index] = counts.get(index, 0) + n
        return _delay(counts, self.plan)

    async def take(self) -> bool:
        self._milli = min(self._milli, self.plan.burst * 1000)
        if self._milli < 1000:
            return False
        self._milli -= 1000
        return True

    def observe(self, target: Target, first_byte_s: float | None, *, hedge: bool) -> None:
        if not hedge:
            self._milli += round(self.plan.budget_share * 1000)
        if first_byte_s is None:
            return
        slot = self._slot()
        for key in [k for k in self._counts if k[2] < slot - 1]:
            del self._counts[key]
        counts = self._counts.setdefault((target.provider, target.provider_model, slot), {})
        index = bucket_of(first_byte_s * 1000)
        counts[index] = counts.get(index, 0) + 1


class FleetHedges:
    """The fleet's evidence and budget in Redis (`breakers.HedgeStore`)."""

    def __init__(
        self,
        store: HedgeStore,
        plan: HedgingSettings,
        pipes: AutoPipeline,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.plan = plan
        self.pipes = pipes
        self._clock = clock
        self._known: dict[Target, dict[int, int]] = {}
        self._fetched_at: dict[Target, float] = {}
        self._refreshing: dict[Target, asyncio.Task[None]] = {}

    def delay_s(self, target: Target) -> float:
        fetched = self._fetched_at.get(target)
        known = self._known.get(target)
        # A pair short of evidence is read again sooner: a fresh fleet learns in seconds.
        enough = known is not None and sum(known.values()) >= self.plan.min_samples
        every_s = self.plan.refresh_s if enough else min(self.plan.refresh_s, _SHORT_REFRESH_S)
        if (fetched is None or self._clock() - fetched >= every_s) and (
            target not in self._refreshing
        ):
            task = asyncio.get_running_loop().create_task(self.refresh(target))
            self._refreshing[target] = task
            task.add_done_callback(lambda _: self._refreshing.pop(target, None))
        return _delay(self._known.get(target), self.plan)

    async def refresh(self, target: Target) -> None:
        """Read the pair's histogram now; what was known stays when Redis cannot answer."""
        self._fetched_at[target] = self._clock()
        try:
            self._known[target] = await self.store.counts(target.provider, target.provider_model)
        except STORE_DOWN as exc:
            log.debug("hedge.evidence_unreachable", model=target.model, error=type(exc).__name__)

    async def take(self) -> bool:
        try:
            return await self.store.take()
        except STORE_DOWN as exc:
            log.debug("hedge.budget_unreachable", error=type(exc).__name__)
            return False

    def observe(self, target: Target, first_byte_s: float | None, *, hedge: bool) -> None:
        latency_ms = None if first_byte_s is None else first_byte_s * 1000
        slot = self.pipes.open()
        pair = (target.provider, target.provider_model)
        self.store.observe_on(slot.pipe, *pair, latency_ms, hedge=hedge)
        # Evidence, not money: a sample Redis missed is not worth a retry, nor a wait.
        slot.send()

    async def aclose(self) -> None:
        """Send the samples still queued and stop the refreshes still running; before the
        guard's `aclose` (it closes the Redis client). Not closed, a stopping process
        may lose its last few samples: evidence, not money."""
        await self.pipes.drain()
        for task in list(self._refreshing.values()):
            task.cancel()
        await asyncio.gather(*self._refreshing.values(), return_exceptions=True)


def hedge_book(settings: Settings, guard: Guard) -> HedgeBook:
    """The fleet's book on a Redis guard's store, else this process's own."""
    plan = settings.chain.hedging
    if isinstance(guard, RedisGuard):
        store = HedgeStore(
            guard.redis,
            namespace=settings.redis.namespace,
            window_s=plan.window_s,
            share=plan.budget_share,
            burst=plan.burst,
        )
        # Not the turns' tightly timed round trips: no turn waits on these, and a budget
        # refill dropped by a slow round trip would be lost for good.
        return FleetHedges(store, plan, AutoPipeline(guard.redis))
    return LocalHedges(plan)
