"""Driving the demo: turns paced through the fleet phase by phase, and a watch on its shared state.

`Driver` sends turns through Celery (`enqueue_turn`, then `TurnHandle.get`) at a
steady rate from a pool of client threads, switching the simulated providers'
faults between phases. Each phase ends when its last turn came back, so the
calls each model received are counted per phase exactly. `Monitor` reads the
breakers and the tenants' budgets from Redis, as an operator would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from celery import Celery

import breakers
import budgets
from rediskit import FAILED
from worker.demo.plan import DEADLINE_S, SIM_MODELS, Phase, make_request
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.loop import LoopThread
from worker.guard.redis_guard import open_guard
from worker.settings import Settings
from worker.simulator import Fault
from worker.types import TurnResult

__all__ = ["BreakerChange", "Driver", "FleetSnapshot", "Monitor", "PhaseRun", "TurnRecord"]

# A snapshot not taken this time: Redis slow or gone, or a breakers error while reading.
_UNREADABLE: tuple[type[BaseException], ...] = (breakers.BreakersError, *FAILED)
T = TypeVar("T")
# A turn ends by its deadline; past this it is counted as lost.
_RESULT_TIMEOUT_S = DEADLINE_S + 20
_TICK_S = 0.25


class Simulated(Protocol):
    """The simulator controls the driver uses (`Simulator` or `SimulatorClient`)."""

    def reset(self) -> None: ...
    def set_faults(self, model: str, *faults: Fault) -> None: ...
    def counts(self) -> dict[str, dict[str, int]]: ...


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn of the run; `result` None means no result came back in time."""

    phase: int
    tenant: str
    result: TurnResult | None
    error: str | None = None
    image: bool = False  # the turn carried an image


@dataclass(frozen=True, slots=True)
class PhaseRun:
    """A finished phase: its turns, and the calls each simulated model received."""

    index: int
    phase: Phase
    records: tuple[TurnRecord, ...]
    calls: Mapping[str, Mapping[str, int]]
    seconds: float


class Driver:
    """Runs the phases: sets the faults, paces the turns, waits for every result."""

    def __init__(self, app: Celery, sim: Simulated, *, rate: float, concurrency: int) -> None:
        self.app = app
        self.sim = sim
        self.rate = rate
        self.concurrency = concurrency
        self.records: list[TurnRecord] = []
        self.phase_index = 0
        self.phase_started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._numbers = iter(range(1 << 62))

    def planned(self, phases: Sequence[Phase]) -> int:
        """How many turns the run sends."""
        return sum(self._turns(phase) for phase in phases)

    def _turns(self, phase: Phase) -> int:
        return max(1, round(phase.seconds * self.rate))

    def run(self, phases: Sequence[Phase], on_tick: Callable[[], None]) -> list[PhaseRun]:
        """Run every phase in order; `on_tick` is called a few times a second meanwhile."""
        runs = []
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="relevo-demo-client")
        try:
            for index, phase in enumerate(phases):
                runs.append(self._run_phase(pool, index, phase, on_tick))
        finally:
            # On Ctrl-C: send no more turns; those in flight come back within their deadline.
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
        return runs

    def _run_phase(
        self, pool: ThreadPoolExecutor, index: int, phase: Phase, on_tick: Callable[[], None]
    ) -> PhaseRun:
        self.sim.reset()
        for model in SIM_MODELS:
            self.sim.set_faults(model, *phase.faults_for(model))
        with self._lock:
            self.phase_index, self.phase_started = index, time.monotonic()
            first = len(self.records)
        start = self.phase_started
        futures: list[Future[None]] = [
            pool.submit(self._one, index, start + k / self.rate) for k in range(self._turns(phase))
        ]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=_TICK_S)
            on_tick()
        for future in futures:
            future.result()  # a bug in the driver itself surfaces here
        with self._lock:
            records = tuple(r for r in self.records[first:] if r.phase == index)
        calls = self.sim.counts()
        return PhaseRun(index, phase, records, calls, time.monotonic() - start)

    def _one(self, phase: int, at: float) -> None:
        if self._stop.wait(max(0.0, at - time.monotonic())):
            return
        with self._lock:
            number = next(self._numbers)
        request = make_request(number)
        image = bool(request.attachment_kinds)
        try:
            result = enqueue_turn(request, app=self.app).get(timeout_s=_RESULT_TIMEOUT_S)
        except Exception as exc:  # counted and shown: the demo must not hide a lost turn
            error = f"{type(exc).__name__}: {exc}"
            record = TurnRecord(phase, request.tenant_id, None, error, image)
        else:
            record = TurnRecord(phase, request.tenant_id, result, image=image)
        with self._lock:
            self.records.append(record)

    def snapshot(self) -> tuple[int, float, list[TurnRecord]]:
        """The current phase, how long it has run, and the turns finished so far."""
        with self._lock:
            return self.phase_index, time.monotonic() - self.phase_started, list(self.records)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Breakers, cooldowns and budgets at one moment (`at_s` since the run began)."""

    at_s: float
    scopes: tuple[breakers.ScopeReport, ...]
    cooldowns: tuple[breakers.CooldownReport, ...]
    budgets: Mapping[str, budgets.BudgetReport]


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A breaker seen in a new state (between two looks, so brief states may be missed)."""

    at_s: float
    scope: str
    old: str
    new: str


class Monitor:
    """Reads the fleet's breakers and the tenants' budgets from Redis, on its own event loop."""

    def __init__(self, settings: Settings, tenants: Sequence[str]) -> None:
        self.namespace = settings.redis.namespace
        self.tenants = tuple(tenants)
        self.started = time.monotonic()
        self.latest: FleetSnapshot | None = None
        self.changes: list[BreakerChange] = []
        self._states: dict[str, str] = {}
        self._loop = LoopThread("relevo-demo-monitor")
        self._guard = open_guard(settings)
        self._operators = breakers.Operators(self._guard.circuits.fleet)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro, timeout_s=10)

    def reset(self) -> int:
        """Delete every key of the demo's namespace (breakers, budgets, turns); how many."""
        return self._run(self._reset())

    async def _reset(self) -> int:
        redis = self._guard.redis
        deleted = 0
        for pattern in (f"{{{self.namespace}}}:*", f"{self.namespace}:*"):
            keys = [key async for key in redis.scan_iter(match=pattern, count=500)]
            for i in range(0, len(keys), 500):
                deleted += await redis.delete(*keys[i : i + 500])
        return deleted

    def set_daily_limit(self, tenant: str, micros: int) -> None:
        """Give `tenant` a daily budget (and a month of them)."""
        self._run(self._guard.ledger.set_limits(tenant, micros, 31 * micros))

    def poll(self) -> None:
        """Take a fresh snapshot into `latest` (kept as it is when Redis is slow to answer)."""
        try:
            snapshot = self._run(self._read())
        except _UNREADABLE:
            return
        for scope in snapshot.scopes:
            new = scope.state.value
            old = self._states.get(scope.scope, breakers.BreakerState.CLOSED.value)
            if new != old:
                self.changes.append(BreakerChange(snapshot.at_s, scope.scope, old, new))
            self._states[scope.scope] = new
        self.latest = snapshot

    async def _read(self) -> FleetSnapshot:
        report = await self._operators.report()
        # A tenant with no spend yet may have no report: it is left out for now.
        reports = await asyncio.gather(
            *(self._guard.ledger.report(tenant) for tenant in self.tenants),
            return_exceptions=True,
        )
        return FleetSnapshot(
            at_s=time.monotonic() - self.started,
            scopes=tuple(report.scopes),
            cooldowns=tuple(report.cooldowns),
            budgets={r.tenant: r for r in reports if isinstance(r, budgets.BudgetReport)},
        )

    def close(self) -> None:
        try:
            self._run(self._guard.aclose())
        finally:
            self._loop.stop()
