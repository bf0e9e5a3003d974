"""One worker process: what its turns share, and what it does beside them.

`WorkerProcess` wires the parts every turn of the process shares (the event loop, the
guard, the turn store, the fair queue, the metrics) and runs the process's own work in
the background on that loop: the heartbeat, the sweeper, the dispatcher, and at the end
the shutdown. Running one turn is `worker.fleet.runner.TurnRunner`'s.

    heartbeat, every BEAT_EVERY_S:
      touch liveness ─► report_state ─► announce (beat, share rooms) ─► keep_scripts
      ─► compare_fleet (every _COMPARE_EVERY beats) ─► renew_leases
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import structlog

from breakers import KillSwitchState
from worker.adapters import make_client
from worker.errors import STORE_DOWN
from worker.fleet import liveness
from worker.fleet.agreement import Agreement, FleetShape
from worker.fleet.dispatcher import Dispatcher
from worker.fleet.errors import Unreadable
from worker.fleet.fairqueue import FairQueue
from worker.fleet.heartbeat import (
    ALIVE_S,
    BEAT_EVERY_S,
    Heartbeat,
    beat,
    keep_scripts,
    read_heartbeats,
    share_rooms,
)
from worker.fleet.loop import LoopThread
from worker.fleet.rabbitmq import RabbitQueue, held_delivery_s, outbox_key
from worker.fleet.schema import log_unreadable
from worker.fleet.sweeper import Sweeper
from worker.fleet.turnstore import TurnStore
from worker.guard.autopipeline import AutoPipeline
from worker.guard.redis_guard import RedisGuard, open_guard
from worker.observability import tracing
from worker.observability.logs import redact_secrets
from worker.observability.metrics import VERSION, TurnMetrics
from worker.observability.redact import provider_secrets
from worker.settings import Settings
from worker.settings.environment import node_name
from worker.types import TurnRequest

__all__ = ["FORGET_ERRORS", "LEASE_HOLD_S", "MARGIN_S", "RunningTurns", "WorkerProcess"]

log = structlog.get_logger("relevo.runner")
# Beyond the turn's deadline: time to save the result and release the claim.
MARGIN_S = 5.0
# A running turn's lease holds this long past its process's last heartbeat: a dead
# process's leases end when its heartbeat says it is dead, not a turn deadline later.
LEASE_HOLD_S = ALIVE_S
# What the broker's Redis holds of the turns, lost when it loses its data.
_TURN_STATE = (
    "turns queued (the fair queue and the broker's queue: their producers are told they were lost)",
    "tenants' shares and buckets",
    "leases",
    "results and streams",
)
# How old a look at the kill switch the dispatcher acts on (the guard looks at it too).
_KILL_FRESH_S = 0.5
# Every this many heartbeats, a worker compares the other workers' fleet settings with its own.
_COMPARE_EVERY = 12
# Redis gone or slow: a record kept, a heartbeat missed; a worker user without SCRIPT LOAD
# (not the deploy's) too: its turns need none.
FORGET_ERRORS = _KEEP_ERRORS = STORE_DOWN


@dataclass(slots=True)
class RunningTurns:
    """The turns this process runs now, as its heartbeat reports and renews them."""

    in_flight: int = 0
    # Turns run under a lease (turn id -> tenant), renewed with each beat.
    leased: dict[str, str] = field(default_factory=dict)
    # Turns running: their claims are written again with each beat.
    running: set[str] = field(default_factory=set)


class WorkerProcess:
    """A worker process's shared parts, and its heartbeat, sweeper, dispatcher and
    shutdown; its turns run through `TurnRunner`."""

    def __init__(
        self,
        settings: Settings,
        *,
        loop: LoopThread | None = None,
        metrics: TurnMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.loop = loop or LoopThread()
        self.metrics = metrics or TurnMetrics.from_settings(settings.observability)
        redact_secrets(provider_secrets(settings))
        tracing.configure_tracing(settings.observability)
        self.holder = f"{node_name()}:{os.getpid()}"
        self.agreement = Agreement(
            FleetShape.of(settings),
            on_differ=lambda name: self.metrics.set_aside("fleet settings", name),
        )
        self.guard = _open_guard(settings, self.metrics)
        # From now on, turns or none: an idle worker rejoins and keeps its kill switch current.
        self.loop.loop.call_soon_threadsafe(self.guard.circuits.watch)
        self.store = _turn_store(settings, self.guard)
        rabbit = settings.broker.url
        self.rabbit = (
            None
            if rabbit is None
            else RabbitQueue(
                rabbit,
                settings.worker.queue,
                max_message_bytes=settings.broker.max_message_bytes,
            )
        )
        self.fair = FairQueue(
            self.store.redis,
            namespace=settings.redis.namespace,
            # With RabbitMQ, dispatch moves turns to the outbox, where the dispatcher takes them.
            queue=settings.worker.queue if rabbit is None else outbox_key(settings.redis.namespace),
            default=settings.fairness.default_share(),
            # A dead worker's lease runs out once its turn could no longer be running.
            lease_s=settings.turn_deadline_s + 2 * MARGIN_S + settings.worker.restore_interval_s,
            on_unreadable=self.noted,
            # The dispatcher's wait for a wake token: one connection, reads outlasting it.
            blocking=settings.redis.connect(
                timeout_s=settings.fairness.interval_s + max(settings.redis.timeout_s, 1.0)
            ),
        )
        self.turns = RunningTurns()
        self._client: httpx.AsyncClient | None = None
        self._dispatcher: Dispatcher | None = None
        self._sweeping: concurrent.futures.Future[None] | None = None
        self._dispatching: concurrent.futures.Future[None] | None = None
        self._closing = False
        self._beat_task: asyncio.Task[None] | None = None
        self._started_ms = int(time.time() * 1000)
        self._beating = asyncio.run_coroutine_threadsafe(self._beat_forever(), self.loop.loop)

    def http_client(self) -> httpx.AsyncClient:
        """The process's one HTTP client, made on first use; on the loop, which owns it."""
        if self._client is None:
            self._client = make_client(self.settings.http)
        return self._client

    def noted(self, exc: Unreadable) -> None:
        """Log and count something this process could not read."""
        log_unreadable(exc)
        self.metrics.unreadable(exc.what, newer=exc.newer)

    # -- the heartbeat ------------------------------------------------------------------

    async def _beat_forever(self) -> None:
        # Gauges and heartbeat while idle too: a turn also updates the gauges. Closing
        # ends it even if a cancel is swallowed (Python 3.11's asyncio.timeout can).
        self._beat_task = asyncio.current_task()
        beats = 0
        while not self._closing:
            await self.heartbeat(compare=beats % _COMPARE_EVERY == 0)
            beats += 1
            await asyncio.sleep(BEAT_EVERY_S)

    async def heartbeat(self, *, compare: bool = False) -> None:
        """One heartbeat: alive on this host, the gauges set, alive to the fleet, the
        scripts kept, the fleet's settings compared (when `compare`), the leases renewed."""
        liveness.touch()  # before Redis is asked: its absence is not this process's
        self.report_state()
        if await self.announce():
            await self.keep_scripts()
        if compare:
            await self.compare_fleet()
        await self.renew_leases()

    def report_state(self) -> None:
        """Set this process's gauges: local breakers in use, the backlog and its drops."""
        backlog = self.guard.backlog
        self.metrics.process_state(
            local=not self.guard.circuits.fleet_view, backlog=len(backlog), dropped=backlog.dropped
        )

    async def announce(self) -> bool:
        """Tell the fleet this process lives (`worker.fleet.heartbeat`), and learn how many
        live processes share a tenant's offline room. False: Redis is away, nothing told."""
        host, pid = self.holder.rsplit(":", 1)
        now = Heartbeat(
            host=host,
            pid=int(pid),
            version=VERSION,
            in_flight=self.turns.in_flight,
            local_breakers=not self.guard.circuits.fleet_view,
            started_ms=self._started_ms,
            fleet=self.agreement.own.header(),
        )
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                alive = await beat(self.store.redis, self.store.keys, now)
                await share_rooms(self.store.redis, self.store.keys, self.guard.offline)
        except FORGET_ERRORS as exc:
            log.debug("worker.heartbeat_missed", error=type(exc).__name__)
            return False
        # While Redis is away, the live processes share each tenant's room.
        self.guard.offline.processes = alive
        return True

    async def keep_scripts(self) -> None:
        """Load the scripts again where Redis lost them: a restart or a failover can empty
        the script cache at any time."""
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                await keep_scripts(self.store.redis, self.guard.redis)
        except _KEEP_ERRORS as exc:
            log.debug("worker.scripts_not_kept", error=type(exc).__name__)

    async def compare_fleet(self) -> None:
        """Warn about the live workers whose heartbeats state other fleet settings."""
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                found = await read_heartbeats(self.store.redis, self.store.keys)
        except FORGET_ERRORS:
            return
        now_ms = int(time.time() * 1000)
        for other in found.beats:
            if other.alive(now_ms) and other.process != self.holder:
                shape = FleetShape.parse(other.fleet)
                self.agreement.check(shape, "worker", where=other.process)
                oldest = self.settings.worker.oldest_release
                self.agreement.check_release(other.version, oldest, where=other.process)

    async def renew_leases(self) -> None:
        """Renew the leases of the turns this process runs, and write their claims again if
        the store lost them (emptied): a producer waiting on one finds it still known."""
        leases = [(tenant, turn) for turn, tenant in self.turns.leased.items()]
        ttl_ms = int((self.settings.turn_deadline_s + MARGIN_S) * 1000)
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                await self.fair.renew(leases, hold_s=LEASE_HOLD_S)
                if self.turns.running:
                    pipe = self.store.redis.pipeline(transaction=False)
                    for turn_id in list(self.turns.running):
                        claim = self.store.keys.claim(turn_id)
                        pipe.set(claim, self.holder, nx=True, px=ttl_ms)
                    await pipe.execute()
        except FORGET_ERRORS as exc:
            log.debug("worker.leases_not_renewed", error=type(exc).__name__)

    # -- the sweeper and the dispatcher -------------------------------------------------

    def start_sweeper(self, send: Callable[[TurnRequest], object]) -> None:
        """Re-send, from now on, the turns the broker lost (`worker.fleet.sweeper`), on this
        process's loop; `send` publishes one (`send_turn` on the fleet's app). Once."""
        if self._sweeping is not None:
            return
        sweeper = Sweeper(
            self.store,
            send,
            holder=self.holder,
            interval_s=self.settings.worker.sweep_interval_s,
            older_than_s=self.settings.visibility_timeout_s
            + self.settings.worker.restore_interval_s,
            on_resent=self.metrics.resent,
            on_unreadable=self.noted,
        )
        self._sweeping = asyncio.run_coroutine_threadsafe(sweeper.run_forever(), self.loop.loop)

    def start_dispatcher(self) -> None:
        """Move turns from the fair queue to the broker's queue, from now on, on this
        process's loop (`worker.fleet.dispatcher`). Once. With `[fairness]` off it only
        drains what producers with it on queued there, limits unchecked."""
        if self._dispatching is not None:
            return
        dispatcher = Dispatcher(
            self.fair,
            self.store,
            self.settings.fairness,
            killed=self._kill_switch,
            primary_model=self.settings.chain.models[0],
            metrics=self.metrics,
            rabbit=self.rabbit,
            fifo=not self.settings.fairness.enabled,
        )
        self._dispatcher = dispatcher
        self._dispatching = asyncio.run_coroutine_threadsafe(
            dispatcher.run_forever(), self.loop.loop
        )
        if self.rabbit is not None:
            held_s = held_delivery_s(self.settings.turn_deadline_s)
            check = asyncio.to_thread(self.rabbit.check_consumer_timeout, held_s)
            asyncio.run_coroutine_threadsafe(check, self.loop.loop)

    async def _kill_switch(self) -> KillSwitchState | None:
        return await self.guard.kill_switch(_KILL_FRESH_S)

    async def give_back(self, tenant: str, turn_id: str) -> None:
        """Give the tenant's lease on a concluded turn back: to this process's dispatcher,
        whose next round carries it, or else at once (a lease Redis missed runs out by
        itself). With `[fairness]` off no dispatcher takes leases, so none is given back."""
        self.turns.leased.pop(turn_id, None)
        if self._dispatcher is not None:
            self._dispatcher.give_back(tenant, turn_id)
            return
        if not self.settings.fairness.enabled:
            return
        try:
            await self.fair.release(tenant, turn_id)
        except STORE_DOWN as exc:
            log.warning("turn.lease_kept", turn_id=turn_id, error=type(exc).__name__)

    # -- the shutdown -------------------------------------------------------------------

    def close(self) -> None:
        """Stop the background work, close the HTTP client and the Redis pools, then the
        loop."""
        self.loop.run(self._aclose(), timeout_s=10)
        self.loop.stop()

    async def _aclose(self) -> None:
        self._closing = True
        self._beating.cancel()
        # Let its cancel land before the clients close: a heartbeat's command cut off by
        # closing its connection leaves that connection's transport open.
        if self._beat_task is not None:
            await asyncio.wait([self._beat_task], timeout=2)
        for task in (self._sweeping, self._dispatching):
            if task is not None:
                task.cancel()
        if self._dispatcher is not None:
            with contextlib.suppress(*FORGET_ERRORS):
                async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                    await self._dispatcher.close()
        if self._client is not None:
            await self._client.aclose()
        await self.fair.blocking.aclose()
        if self.rabbit is not None:
            await asyncio.to_thread(self.rabbit.close)
        await self.guard.aclose()
        if self.store.redis is not self.guard.redis:
            await self.store.pipes.redis.aclose()
            await self.store.redis.aclose()


def _open_guard(settings: Settings, metrics: TurnMetrics) -> RedisGuard:
    """The process's guard, its events counted by `metrics`."""
    guard = open_guard(settings)
    guard.circuits.on_reset = metrics.store_reset
    guard.on_over_worst_case = metrics.charged_over_worst_case
    if settings.redis.shared_url is None:
        # One Redis for all: the broker's queue and the turn store went with it.
        guard.circuits.memory.also_lost = _TURN_STATE
    return guard


def _turn_store(settings: Settings, guard: RedisGuard) -> TurnStore:
    """The turn store, where the broker and the results are (the guard's store may not be)."""
    where = settings.redis
    if where.shared_url is not None:
        timed = where.connect(timed_by_caller=True)
        return TurnStore(
            where.connect(),
            namespace=where.namespace,
            ttl_s=settings.worker.result_ttl_s,
            pipes=AutoPipeline(timed, timeout_s=where.timeout_s),
        )
    return TurnStore(
        guard.redis,
        namespace=where.namespace,
        ttl_s=settings.worker.result_ttl_s,
        # Claims and saves join the guard's batches: one round trip for many turns.
        pipes=guard.pipes,
    )
