"""Each worker process's dispatcher: moves turns from the fair queue to the broker's queue.

A round is one Lua step (`FairQueue.dispatch`); any number of processes run rounds at
once, each atomic on the server. Rounds are driven by events: a round that stopped with
more to move is followed at once by the next; otherwise the dispatcher blocks on the fair
queue's wake token (pushed when a turn arrives for an idle tenant or a lease is given
back), until the first parked tenant's wait is over, or `[fairness] interval_s` at most
(a safety net: leases a dead worker left run out on it). While the kill switch is on, the
rounds drain: every queued turn goes on to the workers, limits unchecked, and each worker
rejects and holds it as it always has (`relevo replay-held`). A turn found past its queue
deadline is concluded here: `failed`, reason `queue_deadline`. With RabbitMQ as the broker
a round moves turns to the outbox in Redis, and the dispatcher publishes them on
(`worker.fleet.rabbitmq`), counting the turns ready in RabbitMQ against the queue depth.
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
from worker.fleet.rabbitmq import RabbitQueue
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
_EXPIRED_EVERY = 30
_SHORTEST_WAIT_S = 0.005


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
        rabbit: RabbitQueue | None = None,
    ) -> None:
        """`killed`: the kill switch as this process sees it (None: off); `rabbit`: the
        broker's queue when it is RabbitMQ (the fair queue's `queue` is then the outbox)."""
        self.fair = fair
        self.store = store
        self.settings = settings
        self.killed = killed
        self.primary_model = primary_model
        self.metrics = metrics
        self.rabbit = rabbit
        self._held_logged: dict[tuple[str, str], float] = {}
        self._rounds = 0
        self._was_killed = False

    async def run_forever(self) -> None:
        while True:
            try:
                done = await self.round()
                if done.again:
                    continue
                await self.fair.wait(self._idle_s(done))
            except STORE_DOWN as exc:
                log.warning("dispatch.store_unreachable", error=type(exc).__name__)
                await asyncio.sleep(1.0)
            except Exception:  # the dispatcher must outlive any one bad round
                log.exception("dispatch.failed")
                await asyncio.sleep(self.settings.interval_s)

    def _idle_s(self, done: DispatchRound) -> float:
        """How long to wait for a wake token: until the first parked tenant may go on, at
        most the safety net (spread, so that idle processes do not look all at once)."""
        idle_s = self.settings.interval_s * random.uniform(0.8, 1.0)
        if done.next_ms is not None:
            idle_s = min(idle_s, done.next_ms / 1000)
        return max(idle_s, _SHORTEST_WAIT_S)  # BLPOP's 0 would block for ever

    async def round(self) -> DispatchRound:
        """One round: normal, or draining while the kill switch is on."""
        kill = await self.killed()
        if kill is not None and not self._was_killed:
            log.warning("dispatch.draining_for_kill_switch", reason=kill.reason)
        self._was_killed = kill is not None
        self._rounds += 1
        depth = self.settings.queue_depth
        if self.rabbit is not None:
            depth -= await self.rabbit.ready()
        most = self.settings.batch
        done = await self.fair.dispatch(most=most, depth=depth, drain=kill is not None)
        if self.rabbit is not None:
            await self.rabbit.forward(self.fair.redis, self.fair.queue, most)
        self._observe(done)
        if done.expired or self._rounds % _EXPIRED_EVERY == 0:
            await self.conclude_expired()
        return done

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
