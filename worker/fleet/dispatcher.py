"""Each worker process's dispatcher: moves turns from the fair queue to the broker's queue.

A round is one Lua step (`FairQueue.dispatch`); any number of processes run rounds at
once, each atomic on the server. A round that moved turns is followed at once by the
next; one that moved none waits `[fairness] interval_s`. While the kill switch is on no
round runs: turns stay queued, held, until it is off or their deadline passes. A turn
found past its queue deadline is concluded here: `failed`, reason `queue_deadline`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import structlog

from breakers import KillSwitchState
from worker.errors import STORE_DOWN
from worker.fleet.fairqueue import DispatchRound, FairQueue
from worker.fleet.turnstore import TurnStore
from worker.observability.metrics import TurnMetrics
from worker.settings import FairnessSettings
from worker.types import Status, TurnResult

__all__ = ["QUEUE_DEADLINE", "Dispatcher"]

log = structlog.get_logger("relevo.dispatch")
QUEUE_DEADLINE = "queue_deadline"
# A tenant held back is logged once in this long per process, not once per round.
_HELD_LOG_EVERY_S = 10.0
# Every this many rounds, a dispatcher also concludes expired turns another one left.
_EXPIRED_EVERY = 200


class Dispatcher:
    """Runs dispatch rounds for as long as its process lives."""

    def __init__(
        self,
        fair: FairQueue,
        store: TurnStore,
        settings: FairnessSettings,
        *,
        killed: Callable[[], Awaitable[KillSwitchState | None]],
        primary_model: str,
        metrics: TurnMetrics | None = None,
    ) -> None:
        """`killed`: the kill switch as this process sees it (None: off)."""
        self.fair = fair
        self.store = store
        self.settings = settings
        self.killed = killed
        self.primary_model = primary_model
        self.metrics = metrics
        self._held_logged: dict[tuple[str, str], float] = {}
        self._rounds = 0
        self._was_killed = False

    async def run_forever(self) -> None:
        interval_s = self.settings.interval_s
        while True:
            try:
                moved = await self.round()
            except STORE_DOWN as exc:
                log.warning("dispatch.store_unreachable", error=type(exc).__name__)
                moved = 0
                await asyncio.sleep(1.0)
            except Exception:  # the dispatcher must outlive any one bad round
                log.exception("dispatch.failed")
                moved = 0
            if not moved:
                await asyncio.sleep(interval_s * random.uniform(0.8, 1.2))

    async def round(self) -> int:
        """One round; returns the turns moved."""
        kill = await self.killed()
        if kill is not None:
            if not self._was_killed:
                log.warning("dispatch.held_by_kill_switch", reason=kill.reason)
            self._was_killed = True
            return 0
        self._was_killed = False
        self._rounds += 1
        done = await self.fair.dispatch(most=self.settings.batch, depth=self.settings.queue_depth)
        self._observe(done)
        if done.expired or self._rounds % _EXPIRED_EVERY == 0:
            await self.conclude_expired()
        return len(done.moved)

    def _observe(self, done: DispatchRound) -> None:
        if self.metrics is not None:
            for tenant, waited_ms in done.moved:
                self.metrics.waited(tenant, waited_ms / 1000)
        now = time.monotonic()
        for tenant, limit in done.held:
            if now - self._held_logged.get((tenant, limit), -_HELD_LOG_EVERY_S) < _HELD_LOG_EVERY_S:
                continue
            self._held_logged[(tenant, limit)] = now
            log.info("dispatch.tenant_held", tenant_id=tenant, limit=limit)
        if len(self._held_logged) > 10_000:
            self._held_logged.clear()

    async def conclude_expired(self) -> int:
        """Save a result for each turn found past its queue deadline; returns how many."""
        found = await self.fair.expired()
        for turn_id, tenant, waited_ms in found:
            result = TurnResult(
                turn_id=turn_id,
                tenant_id=tenant,
                status=Status.FAILED,
                reason=QUEUE_DEADLINE,
                error=f"waited {waited_ms / 1000:.1f} s in the fair queue, past its deadline",
                primary_model=self.primary_model,
            )
            stored = await self.store.save(result)
            if stored is result and self.metrics is not None:
                self.metrics.record(result)
            log.warning(
                "turn.queue_deadline", turn_id=turn_id, tenant_id=tenant, waited_ms=waited_ms
            )
        if found:
            await self.fair.forget_expired(*(turn_id for turn_id, _, _ in found))
        return len(found)
