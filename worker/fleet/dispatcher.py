"""Each worker process's dispatcher: moves turns from the fair queue to the broker's queue.

A round is one Lua step (`FairQueue.dispatch`); any number of processes run rounds at
once, each atomic on the server. Rounds are driven by events: a round that stopped with
more to move is followed at once by the next; otherwise the dispatcher waits for a wake
token (pushed when a turn arrives for an idle tenant), a lease its own process gives back
(`give_back`), the first parked tenant's wait to be over, or `[fairness] interval_s` at
most (a safety net: leases a dead worker left run out on it). Leases given back wait for
the next round, which carries them: while no tenant is parked, a round gathers them for
up to `[fairness] gather_s` (or until half a queue's depth have concluded), so that under
load one round moves several turns and gives back several leases. While the kill switch
is on, the rounds drain: every queued turn goes on to the workers, limits unchecked, and
each worker rejects and holds it as it always has (`relevo replay-held`). A turn found
past its queue deadline is concluded here: `failed`, reason `queue_deadline`. With
RabbitMQ as the broker a round moves turns to the outbox in Redis, and the dispatcher
publishes them on (`worker.fleet.rabbitmq`), counting the turns ready in RabbitMQ against
the queue depth.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable

import structlog

from breakers import KillSwitchState
from worker.errors import STORE_DOWN
from worker.fleet.fairqueue import DispatchRound, FairQueue
from worker.fleet.rabbitmq import RabbitQueue, SetAside, dead_letters_key
from worker.fleet.turnstore import TurnStore
from worker.observability.metrics import TurnMetrics
from worker.settings import FairnessSettings
from worker.types import Status, TurnResult

__all__ = ["QUEUE_DEADLINE", "UNDELIVERABLE", "Dispatcher"]

log = structlog.get_logger("relevo.dispatch")
QUEUE_DEADLINE = "queue_deadline"
# The reason of a turn whose message no broker takes (`RabbitQueue.publish_sync`).
UNDELIVERABLE = "undeliverable"
# The outbox entries set aside are kept this many, this long, for a person to look at.
_DEAD_KEPT = 1000
_DEAD_KEPT_S = 7 * 86_400
# The reason of a turn whose entry in the fair queue could not be read (the runner's word).
_UNREADABLE = "unreadable"
# A tenant held back is logged once in this long per process, not once per round.
_HELD_LOG_EVERY_S = 10.0
# Every this many rounds, a dispatcher also concludes expired turns another one left.
_EXPIRED_EVERY = 30
_SHORTEST_WAIT_S = 0.005
# The most leases one round gives back (Lua's unpack takes some thousands at most): after
# a long outage, the rest go in the rounds that follow at once.
_MOST_RELEASED = 1000


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
        fifo: bool = False,
    ) -> None:
        """`killed`: the kill switch as this process sees it (None: off); `rabbit`: the
        broker's queue when it is RabbitMQ (the fair queue's `queue` is then the outbox);
        `fifo`: this worker has fair dispatch off: its rounds only drain what
        producers with it on queued, every tenant's turns at once, no limit checked."""
        self.fair = fair
        self.store = store
        self.settings = settings
        self.killed = killed
        self.primary_model = primary_model
        self.metrics = metrics
        self.rabbit = rabbit
        self.fifo = fifo
        self._drained_logged = -_HELD_LOG_EVERY_S
        self._held_logged: dict[tuple[str, str], float] = {}
        self._rounds = 0
        self._was_killed = False
        self._released: list[tuple[str, str]] = []
        self._poked = asyncio.Event()
        self._woken = False
        self._expired_at = -float("inf")

    def give_back(self, tenant: str, turn_id: str) -> None:
        """The lease of a turn this process concluded: given back by the next round (call
        on the dispatcher's loop)."""
        self._released.append((tenant, turn_id))
        self._poked.set()

    async def run_forever(self) -> None:
        watching = asyncio.create_task(self._watch())
        try:
            while True:
                try:
                    done = await self.round()
                    if not done.again:
                        await self._idle(done)
                except STORE_DOWN as exc:
                    log.warning("dispatch.store_unreachable", error=type(exc).__name__)
                    await asyncio.sleep(1.0)
                except Exception:  # the dispatcher must outlive any one bad round
                    log.exception("dispatch.failed")
                    await asyncio.sleep(self.settings.interval_s)
        finally:
            # Its blocking read ends with it: a token pushed afterwards waits for others.
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    async def _watch(self) -> None:
        """Wake tokens, on the dispatcher's own blocking connection: each starts a round."""
        while True:
            try:
                if await self.fair.wait(self.settings.interval_s):
                    self._woken = True
                    self._poked.set()
            except STORE_DOWN:
                await asyncio.sleep(1.0)
            except Exception:
                log.exception("dispatch.watch_failed")
                await asyncio.sleep(self.settings.interval_s)

    async def _idle(self, done: DispatchRound) -> None:
        """Until something calls for a round; leases given back alone, while no tenant is
        parked (none waits for them), gather for a moment first."""
        await self._wait_poke(self._idle_s(done))
        if self._released and not self._woken and done.next_ms is None:
            until = time.monotonic() + self.settings.gather_s
            enough = max(1, self.settings.queue_depth // 2)
            while len(self._released) < enough and not self._woken:
                left = until - time.monotonic()
                if left <= 0:
                    break
                await self._wait_poke(left)
        self._woken = False

    async def _wait_poke(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._poked.wait()
        self._poked.clear()

    def _idle_s(self, done: DispatchRound) -> float:
        """How long to wait for a reason to look: until the first parked tenant may go on,
        at most the safety net (spread, so that idle processes do not look all at once)."""
        idle_s = self.settings.interval_s * random.uniform(0.8, 1.0)
        if done.next_ms is not None:
            idle_s = min(idle_s, done.next_ms / 1000)
        return max(idle_s, _SHORTEST_WAIT_S)

    async def round(self) -> DispatchRound:
        """One round: normal, or draining while the kill switch is on; it gives back the
        leases handed to it, which stay with it if the round fails."""
        kill = await self.killed()
        if kill is not None and not self._was_killed:
            log.warning("dispatch.draining_for_kill_switch", reason=kill.reason)
        self._was_killed = kill is not None
        self._rounds += 1
        now = time.monotonic()
        expire = now - self._expired_at >= self.settings.interval_s
        self._poked.clear()  # what it carries needs no round of its own
        released = self._released[:_MOST_RELEASED]
        depth = self.settings.queue_depth
        if self.fifo:
            # Producers publish straight to the broker's queue: the turns queued fairly
            # by others join them there at once, behind no depth.
            depth = _MOST_RELEASED
        elif self.rabbit is not None:
            depth -= await self.rabbit.ready()
        most = self.settings.batch
        done = await self.fair.dispatch(
            most=most,
            depth=depth,
            drain=kill is not None or self.fifo,
            expire=expire,
            released=released,
        )
        del self._released[: len(released)]
        if self._released:
            self._poked.set()
        if expire:
            self._expired_at = now
        if self.rabbit is not None:
            forwarded = await self.rabbit.forward(self.fair.redis, self.fair.queue, most)
            for entry in forwarded.set_aside:
                await self.set_aside(entry)
        self._observe(done)
        if done.expired or self._rounds % _EXPIRED_EVERY == 0:
            await self.conclude_expired()
        return done

    async def close(self) -> None:
        """Give back the leases still held for the next round (a lease Redis missed runs
        out by itself)."""
        while self._released:
            released = self._released[:_MOST_RELEASED]
            await self.fair.dispatch(most=0, depth=0, expire=False, released=released)
            del self._released[: len(released)]

    def _observe(self, done: DispatchRound) -> None:
        if self.fifo and done.moved:
            self._drained(len(done.moved))
        if self.metrics is not None:
            for _, waited_ms in done.moved:
                self.metrics.waited(waited_ms / 1000)
        now = time.monotonic()
        for tenant, limit in done.held:
            if now - self._held_logged.get((tenant, limit), -_HELD_LOG_EVERY_S) < _HELD_LOG_EVERY_S:
                continue
            self._held_logged[(tenant, limit)] = now
            log.info("dispatch.tenant_held", tenant_id=tenant, limit=limit)
        for tenant in done.unreadable:
            if self.metrics is not None:
                self.metrics.unreadable("share", newer=False)
            key = (tenant, "unreadable_share")
            if now - self._held_logged.get(key, -_HELD_LOG_EVERY_S) < _HELD_LOG_EVERY_S:
                continue
            self._held_logged[key] = now
            # Served on the default share meanwhile: its own limits are not lifted by a
            # damaged value, nor is it stopped (`relevo tenants set` writes a good one).
            log.warning("dispatch.share_unreadable", tenant_id=tenant, used="default")
        if len(self._held_logged) > 10_000:
            self._held_logged.clear()

    def _drained(self, turns: int) -> None:
        """Turns a producer with fair dispatch on queued, moved on by a worker with it off."""
        if self.metrics is not None:
            self.metrics.set_aside("fleet settings", "fairness")
        now = time.monotonic()
        if now - self._drained_logged >= _HELD_LOG_EVERY_S:
            self._drained_logged = now
            log.warning(
                "fleet.settings_differ",
                differ=["fairness"],
                source="fair queue",
                turns=turns,
                detail="a producer queued turns for fair dispatch, which this worker has "
                "off: they go to the broker's queue at once, no tenant limit checked",
            )

    async def set_aside(self, entry: SetAside) -> None:
        """An outbox entry no broker takes: kept in the dead letters, its turn (when the
        entry names it) answered `failed` with the reason and its lease given back; the
        entries behind it go on."""
        pipe = self.fair.redis.pipeline(transaction=False)
        dead = dead_letters_key(self.fair.keys.namespace)
        pipe.lpush(dead, entry.raw)
        pipe.ltrim(dead, 0, _DEAD_KEPT - 1)
        pipe.expire(dead, _DEAD_KEPT_S)
        await pipe.execute()
        log.error(
            "dispatch.set_aside",
            turn_id=entry.turn_id,
            tenant_id=entry.tenant,
            reason=entry.reason,
            why=entry.why,
        )
        if self.metrics is not None:
            self.metrics.set_aside("outbox entry", entry.reason)
        if entry.turn_id is None:
            return
        tenant = entry.tenant or "unknown"
        result = TurnResult(
            turn_id=entry.turn_id,
            tenant_id=tenant,
            status=Status.FAILED,
            reason=UNDELIVERABLE,
            error=f"its broker message was set aside: {entry.why}",
            primary_model=self.primary_model,
        )
        stored = await self.store.save(result)
        if stored is result and self.metrics is not None:
            self.metrics.record(result)
        if entry.tenant is not None:
            self.give_back(entry.tenant, entry.turn_id)

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
            if waited_ms < 0:  # its entry in the fair queue could not be read (dispatch.lua)
                result = result.model_copy(
                    update={
                        "reason": _UNREADABLE,
                        "error": "its entry in the fair queue could not be read: set aside",
                    }
                )
                if self.metrics is not None:
                    self.metrics.unreadable("fair_entry", newer=False)
            stored = await self.store.save(result)
            if stored is result and self.metrics is not None:
                self.metrics.record(result)
            log.warning(
                "turn.queue_deadline", turn_id=turn_id, tenant_id=tenant, waited_ms=waited_ms
            )
        if found:
            await self.fair.forget_expired(*(turn_id for turn_id, _, _ in found))
        return len(found)
