"""Running turns on a worker: once each, on one event loop per process.

Celery's threads block in `TurnRunner.run` while the turn runs on the
process's event loop, so a thousand waiting turns share one loop, one HTTP
connection pool and one Redis pool instead of a thousand of each. The turn's
own deadline bounds everything: Celery's time limits are not enforced under
the threads pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx
import structlog
from pydantic import TypeAdapter, ValidationError

from breakers import KillSwitchState
from breakers.schema import SCHEMA_FIELD, version_problem
from worker.adapters import make_client
from worker.errors import STORE_DOWN, InputError
from worker.fleet import liveness
from worker.fleet.agreement import Agreement, FleetShape
from worker.fleet.dispatcher import QUEUE_DEADLINE, Dispatcher
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
from worker.fleet.schema import TURN_SCHEMA, log_unreadable
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
from worker.turn.chain import Chain
from worker.turn.intake import checked_turn
from worker.turn.routing import primary_model
from worker.types import Status, TurnId, TurnRequest, TurnResult

__all__ = ["INVALID_INPUT", "UNREADABLE", "TurnRunner", "rejected_input"]

log = structlog.get_logger("relevo.runner")
T = TypeVar("T")
# Beyond the turn's deadline: time to save the result and release the claim.
_MARGIN_S = 5.0
# The reason of a payload that is not a turn: it is answered, never run nor stored.
INVALID_INPUT = "invalid_input"
# The reason of a turn a newer release sent, in a schema version this release cannot read:
# it is answered and stored (when it names its turn), never run.
UNREADABLE = "unreadable"
_TURN_ID: TypeAdapter[str] = TypeAdapter(TurnId)
# A running turn's lease holds this long past its process's last heartbeat: a dead
# process's leases end when its heartbeat says it is dead, not a turn deadline later.
_LEASE_HOLD_S = ALIVE_S
# What the broker's Redis holds of the turns, lost when it loses its data.
_TURN_STATE = (
    "turns queued (the fair queue and the broker's queue: their producers are told they were lost)",
    "tenants' shares and buckets",
    "leases",
    "results and streams",
)
# How often a turn that found its tenant at max_in_flight looks for a lease again.
_LEASE_POLL_S = 0.5
# How old a look at the kill switch the dispatcher acts on (the guard looks at it too).
_KILL_FRESH_S = 0.5
# Every this many heartbeats, a worker compares the other workers' fleet settings with its own.
_COMPARE_EVERY = 12
# Redis gone or slow: a record kept, a heartbeat missed; a worker user without SCRIPT LOAD
# (not the deploy's) too: its turns need none.
_FORGET_ERRORS = _KEEP_ERRORS = STORE_DOWN


def rejected_input(
    payload: object, error: InputError | Unreadable, reason: str = INVALID_INPUT
) -> TurnResult:
    """The result of a payload that is not a turn (or not one this release can read):
    failed, naming the bad field (or what it could not read)."""
    ids = payload if isinstance(payload, dict) else {}
    turn_id = ids.get("turn_id") if isinstance(ids.get("turn_id"), str) else None
    tenant_id = ids.get("tenant_id") if isinstance(ids.get("tenant_id"), str) else None
    return TurnResult(
        turn_id=(turn_id or "invalid")[:128],
        tenant_id=(tenant_id or "invalid")[:64],
        status=Status.FAILED,
        reason=reason,
        error=str(error),
        primary_model="",
    )


def _queued_turn(payload: object, version: object, turn_id: str | None) -> None:
    """`Unreadable` if the turn says (in its message's header, or its JSON) a schema
    version this release cannot read."""
    written = payload.get(SCHEMA_FIELD) if isinstance(payload, dict) else None
    problem = version_problem(version if version is not None else written, TURN_SCHEMA)
    if problem is not None:
        raise Unreadable("request", problem, turn_id=turn_id)


def _named(turn_id: str) -> bool:
    try:
        _TURN_ID.validate_python(turn_id)
    except ValidationError:
        return False
    return True


class TurnRunner:
    """Runs each turn once per turn id, however often it is delivered."""

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
        self.guard = open_guard(settings)
        self.guard.circuits.on_reset = self.metrics.store_reset
        self.guard.on_over_worst_case = self.metrics.charged_over_worst_case
        if settings.redis.shared_url is None:
            # One Redis for all: the broker's queue and the turn store went with it.
            self.guard.circuits.memory.also_lost = _TURN_STATE
        # From now on, turns or none: an idle worker rejoins and keeps its kill switch current.
        self.loop.loop.call_soon_threadsafe(self.guard.circuits.watch)
        self.store = _turn_store(settings, self.guard)
        self._chain: Chain | None = None
        self._client: httpx.AsyncClient | None = None
        self._sweeping: concurrent.futures.Future[None] | None = None
        self._dispatching: concurrent.futures.Future[None] | None = None
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
        self._dispatcher: Dispatcher | None = None
        self.fair = FairQueue(
            self.store.redis,
            namespace=settings.redis.namespace,
            # With RabbitMQ, dispatch moves turns to the outbox, where the dispatcher takes them.
            queue=settings.worker.queue if rabbit is None else outbox_key(settings.redis.namespace),
            default=settings.fairness.default_share(),
            # A dead worker's lease runs out once its turn could no longer be running.
            lease_s=settings.turn_deadline_s + 2 * _MARGIN_S + settings.worker.restore_interval_s,
            on_unreadable=self._noted,
            # The dispatcher's wait for a wake token: one connection, reads outlasting it.
            blocking=settings.redis.connect(
                timeout_s=settings.fairness.interval_s + max(settings.redis.timeout_s, 1.0)
            ),
        )
        self.in_flight = 0
        # Turns this process runs under a lease (turn id -> tenant), renewed with each beat.
        self._leased: dict[str, str] = {}
        # Turns this process runs now: their claims are written again with each beat.
        self._running: set[str] = set()
        self._closing = False
        self._report_task: asyncio.Task[None] | None = None
        self._started_ms = int(time.time() * 1000)
        self._reporting = asyncio.run_coroutine_threadsafe(self._report_forever(), self.loop.loop)

    def report_state(self) -> None:
        """Set this process's gauges: local breakers in use, the backlog and its drops."""
        backlog = self.guard.backlog
        self.metrics.process_state(
            local=not self.guard.circuits.fleet_view, backlog=len(backlog), dropped=backlog.dropped
        )

    async def heartbeat(self) -> None:
        """Tell the fleet this process lives (`worker.fleet.heartbeat`), and learn how many
        live processes share a tenant's offline room; Redis away: skip."""
        host, pid = self.holder.rsplit(":", 1)
        now = Heartbeat(
            host=host,
            pid=int(pid),
            version=VERSION,
            in_flight=self.in_flight,
            local_breakers=not self.guard.circuits.fleet_view,
            started_ms=self._started_ms,
            fleet=self.agreement.own.header(),
        )
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                alive = await beat(self.store.redis, self.store.keys, now)
                await share_rooms(self.store.redis, self.store.keys, self.guard.offline)
        except _FORGET_ERRORS as exc:
            log.debug("worker.heartbeat_missed", error=type(exc).__name__)
            return
        # While Redis is away, the live processes share each tenant's room.
        self.guard.offline.processes = alive
        try:
            # Each beat: a restart or a failover can empty the script cache at any time.
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                await keep_scripts(self.store.redis, self.guard.redis)
        except _KEEP_ERRORS as exc:
            log.debug("worker.scripts_not_kept", error=type(exc).__name__)

    async def _report_forever(self) -> None:
        # Gauges and heartbeat while idle too: a turn also updates the gauges. Closing
        # ends it even if a cancel is swallowed (Python 3.11's asyncio.timeout can).
        self._report_task = asyncio.current_task()
        beats = 0
        while not self._closing:
            liveness.touch()  # before Redis is asked: its absence is not this process's
            self.report_state()
            await self.heartbeat()
            if beats % _COMPARE_EVERY == 0:
                await self.compare_fleet()
            beats += 1
            await self._renew_leases()
            await asyncio.sleep(BEAT_EVERY_S)

    async def compare_fleet(self) -> None:
        """Warn about the live workers whose heartbeats state other fleet settings."""
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                found = await read_heartbeats(self.store.redis, self.store.keys)
        except _FORGET_ERRORS:
            return
        now_ms = int(time.time() * 1000)
        for other in found.beats:
            if other.alive(now_ms) and other.process != self.holder:
                shape = FleetShape.parse(other.fleet)
                self.agreement.check(shape, "worker", where=other.process)
                oldest = self.settings.worker.oldest_release
                self.agreement.check_release(other.version, oldest, where=other.process)

    async def _renew_leases(self) -> None:
        """Hold the leases of the turns this process runs, and write their claims again if
        the store lost them (emptied): a producer waiting on one finds it still known."""
        leases = [(tenant, turn) for turn, tenant in self._leased.items()]
        ttl_ms = int((self.settings.turn_deadline_s + _MARGIN_S) * 1000)
        try:
            async with asyncio.timeout(self.settings.redis.timeout_s * 4):
                await self.fair.renew(leases, hold_s=_LEASE_HOLD_S)
                if self._running:
                    pipe = self.store.redis.pipeline(transaction=False)
                    for turn_id in list(self._running):
                        claim = self.store.keys.claim(turn_id)
                        pipe.set(claim, self.holder, nx=True, px=ttl_ms)
                    await pipe.execute()
        except _FORGET_ERRORS as exc:
            log.debug("worker.leases_not_renewed", error=type(exc).__name__)

    def start_sweeper(self, send: Callable[[TurnRequest], object]) -> None:
        """Re-send, from now on, the turns the broker lost (`worker.fleet.sweeper`), on this
        runner's loop; `send` publishes one (`send_turn` on the fleet's app). Once."""
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
            on_unreadable=self._noted,
        )
        self._sweeping = asyncio.run_coroutine_threadsafe(sweeper.run_forever(), self.loop.loop)

    def start_dispatcher(self) -> None:
        """Move turns from the fair queue to the broker's queue, from now on, on this
        runner's loop (`worker.fleet.dispatcher`). Once. With `[fairness]` off it only
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
        """The kill switch as this process sees it, looked at again when the last look is
        older than `_KILL_FRESH_S`."""
        circuits = self.guard.circuits
        if time.monotonic() - circuits.memory.seen_at < _KILL_FRESH_S:
            return circuits.memory.kill
        return (await circuits.check(())).kill_switch

    def close(self) -> None:
        """Close the HTTP client and the Redis pool, then the loop."""
        self.loop.run(self._aclose(), timeout_s=10)
        self.loop.stop()

    async def _aclose(self) -> None:
        self._closing = True
        self._reporting.cancel()
        # Let its cancel land before the clients close: a heartbeat's command cut off by
        # closing its connection leaves that connection's transport open.
        if self._report_task is not None:
            await asyncio.wait([self._report_task], timeout=2)
        for task in (self._sweeping, self._dispatching):
            if task is not None:
                task.cancel()
        if self._dispatcher is not None:
            with contextlib.suppress(*_FORGET_ERRORS):
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

    def run(
        self,
        payload: object,
        *,
        carrier: Mapping[str, Any] | None = None,
        version: object = None,
        task_id: str | None = None,
        fleet: object = None,
    ) -> dict[str, Any]:
        """Run a task payload from a worker thread; always returns a result dict.

        `carrier`: the trace context its message brought (`tracing.carried`), if any;
        `version`: the schema version its message's header says (`worker.fleet.schema`);
        `task_id`: its message's task id, which names the turn in what cannot be read;
        `fleet`: the fleet settings its producer states (`worker.fleet.agreement`).
        Fields of the payload this release does not know are ignored.
        """
        self.agreement.check(FleetShape.parse(fleet), "producer", where=f"turn {task_id}")
        try:
            _queued_turn(payload, version, task_id)
            request = checked_turn(payload, self.settings.limits, queued=True)
        except Unreadable as exc:
            return self._refused(payload, exc)
        except InputError as error:
            log.warning("turn.invalid_input", error=str(error))
            rejected = rejected_input(payload, error)
            self.metrics.record(rejected)
            self._forget(rejected.turn_id)
            return rejected.model_dump(mode="json")
        budget_s = min(request.deadline_s, self.settings.turn_deadline_s)
        # In the turn's span while tracing is on; the coroutine itself otherwise.
        providers = {name: p.gen_ai_provider for name, p in self.settings.providers.items()}
        turn = tracing.traced_turn(request, self.run_once(request), carrier, providers)
        result = self.loop.run(turn, timeout_s=budget_s + 2 * _MARGIN_S)
        return result.model_dump(mode="json")

    def _noted(self, exc: Unreadable) -> None:
        """Log and count something this process could not read."""
        log_unreadable(exc)
        self.metrics.unreadable(exc.what, newer=exc.newer)

    def _refused(self, payload: object, exc: Unreadable) -> dict[str, Any]:
        """A turn this release cannot read ends failed, and stays answered for its sender
        (stored under its id, when it gives one)."""
        self._noted(exc)
        result = rejected_input(payload, exc, UNREADABLE)
        self.metrics.record(result)
        turn_id = exc.turn_id or result.turn_id  # the message's task id: the turn's
        if not _named(turn_id):
            self._forget(result.turn_id)
            return result.model_dump(mode="json")
        result = result.model_copy(update={"turn_id": turn_id})
        saved = self.loop.run(self._save(result, end_stream=False), timeout_s=2 * _MARGIN_S)
        return saved.model_dump(mode="json")

    def _forget(self, turn_id: str) -> None:
        """Drop a turn's sent record: a payload this worker refuses is not re-sent."""
        try:
            self.loop.run(self.store.forget(turn_id), timeout_s=5)
        except _FORGET_ERRORS as exc:
            log.warning("turn.record_kept", turn_id=turn_id, error=type(exc).__name__)

    async def run_once(self, request: TurnRequest) -> TurnResult:
        """The turn's result: the stored one if it already ran, else a new run; either way
        the tenant's lease on it is given back."""
        result = await self._run_once(request)
        await self._release(request)
        return result

    async def _run_once(self, request: TurnRequest) -> TurnResult:
        turn_id = request.turn_id
        budget_s = min(request.deadline_s, self.settings.turn_deadline_s)
        try:
            while True:
                claimed = await self.store.claim(turn_id, self.holder, budget_s + _MARGIN_S)
                if isinstance(claimed, TurnResult):
                    return claimed
                if claimed:
                    break
                stored = await self.store.wait_result(turn_id, budget_s + _MARGIN_S)
                if stored is not None:
                    return stored
        except STORE_DOWN as exc:
            log.warning("turn.store_unreachable", turn_id=turn_id, error=type(exc).__name__)
        except Unreadable as exc:
            # Answered, by a release whose result this one cannot read: it stands, unread.
            return self._standing_unread(request, exc)
        late = await self._lease(request, budget_s)
        if late is not None:
            return await self._save(late, end_stream=request.stream)
        return await self._save(await self._run(request), end_stream=request.stream)

    async def _lease(self, request: TurnRequest, budget_s: float) -> TurnResult | None:
        """Hold the tenant's lease while the turn runs: the one its dispatch took, or, for
        a turn redelivered after it ran out, a new one once the tenant is below its
        `max_in_flight`. None: go on; else the turn's result (no lease within its deadline).
        Redis away: the turn runs, as every other check lets it then."""
        if not self.settings.fairness.enabled:
            return None
        until = time.monotonic() + budget_s
        waited = False
        while True:
            try:
                if await self.fair.lease(request.tenant_id, request.turn_id, hold_s=_LEASE_HOLD_S):
                    self._leased[request.turn_id] = request.tenant_id
                    return None
            except STORE_DOWN as exc:
                log.warning("turn.lease_skipped", turn_id=request.turn_id, error=type(exc).__name__)
                return None
            if not waited:
                waited = True
                log.info("turn.lease_wait", turn_id=request.turn_id, tenant_id=request.tenant_id)
            if time.monotonic() >= until:
                break
            await asyncio.sleep(_LEASE_POLL_S)
        log.warning("turn.queue_deadline", turn_id=request.turn_id, tenant_id=request.tenant_id)
        result = TurnResult(
            turn_id=request.turn_id,
            tenant_id=request.tenant_id,
            status=Status.FAILED,
            reason=QUEUE_DEADLINE,
            error=f"waited {budget_s:.1f} s for a lease of its tenant (max_in_flight), past "
            "its deadline",
            primary_model=primary_model(self.settings, request),
        )
        self.metrics.record(result)
        return result

    def _standing_unread(self, request: TurnRequest, exc: Unreadable) -> TurnResult:
        """What this process hands Celery for a turn whose stored result it cannot read
        (the stored one stands: this is neither saved nor counted as a turn)."""
        self._noted(exc)
        return TurnResult(
            turn_id=request.turn_id,
            tenant_id=request.tenant_id,
            status=Status.FAILED,
            reason=UNREADABLE,
            error=str(exc),
            primary_model=primary_model(self.settings, request),
        )

    async def _release(self, request: TurnRequest) -> None:
        """Give the tenant's lease back: to this process's dispatcher, whose next round
        carries it, or else at once (a lease Redis missed runs out by itself). With
        `[fairness]` off no dispatcher takes leases, so none is given back."""
        self._leased.pop(request.turn_id, None)
        if self._dispatcher is not None:
            self._dispatcher.give_back(request.tenant_id, request.turn_id)
            return
        if not self.settings.fairness.enabled:
            return
        try:
            await self.fair.release(request.tenant_id, request.turn_id)
        except STORE_DOWN as exc:
            log.warning("turn.lease_kept", turn_id=request.turn_id, error=type(exc).__name__)

    async def _save(self, result: TurnResult, *, end_stream: bool) -> TurnResult:
        """Save the result (and end its stream); one Redis missed is kept and saved when
        Redis answers again."""
        try:
            return await self.store.save(result, end_stream=end_stream)
        except Unreadable as exc:
            # Another delivery saved first, in a form this release cannot read: it stands.
            self._noted(exc)
            return result
        except STORE_DOWN as exc:
            log.warning("turn.result_saved_later", turn_id=result.turn_id, error=type(exc).__name__)
        store = self.store
        self.guard.backlog.add(
            f"result:{result.turn_id}", "result", lambda: store.save(result, end_stream=end_stream)
        )
        return result

    async def _run(self, request: TurnRequest) -> TurnResult:
        """Run the turn (it was not run before) and count it, once."""
        self.in_flight += 1  # on the loop's one thread: no lock
        self._running.add(request.turn_id)
        try:
            result = await self._run_chain(request)
        finally:
            self.in_flight -= 1
            self._running.discard(request.turn_id)
        self.metrics.record(result)
        self.report_state()
        return result

    async def _run_chain(self, request: TurnRequest) -> TurnResult:
        chain = await self._get_chain()
        if not request.stream:
            return await chain.run(request)
        # This run's text starts the stream over: a run before it (its worker died) left
        # text that is not the result's. The end marker goes with the result (`_save`).
        async with self.store.streaming(request.turn_id, self.holder) as on_text:
            return await chain.run(request, on_text=on_text)

    async def _get_chain(self) -> Chain:
        # The HTTP client belongs to the loop it was made on: make it there, once.
        if self._chain is None:
            self._client = make_client(self.settings.http)
            self._chain = Chain.from_settings(self.settings, self._client, guard=self.guard)
        return self._chain


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
