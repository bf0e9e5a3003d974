"""A fleet of worker processes for turn-level tests: each runs the real chain on its own guard.

`Workers(n)` spawns n processes once; `workers.fleet(jobs)` hands `jobs[i]` to worker
i. For each job a worker builds settings pointing at the parent's simulator
(`tests.chainkit.settings`), its own HTTP client and `open_guard(settings)` on Redis,
says it is ready, waits for `go()`, runs its lanes of turns, and sends back a
`ProcessReport`: one `TurnRecord` per turn (wall-clock start, admission and end,
time spent in the guard, status, reason, step, cost, attempts) and the warning-level
log events it emitted (breaker transitions, fleet view lost). Wall-clock times compare
with the parent's `time.time()` and with Redis server time: one host, one clock.
"""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from types import TracebackType
from typing import Any

import budgets
from tests.chainkit import ORDER, settings
from worker.adapters import make_client
from worker.guard.hedge_book import FleetHedges, hedge_book
from worker.guard.protocol import Admission, Charge, Conclusion, Guard, Refusal, Target
from worker.guard.redis_guard import open_guard
from worker.observability.logs import configure_logging
from worker.turn.chain import Chain
from worker.types import AttemptOutcome, Message, TurnRequest, TurnResult

__all__ = [
    "Fleet",
    "Job",
    "ProcessReport",
    "Tried",
    "TurnRecord",
    "Workers",
    "events_of",
    "make_request",
    "turns_of",
]

SPAWN = multiprocessing.get_context("spawn")
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Job:
    """What one process does. `sections` are `chainkit.settings` sections (redis, breakers…).

    With `requests` (TurnRequest JSON), it runs each of them once, all at the same
    time. Otherwise each of `lanes` runs `turns_per_lane` generated turns one after
    another (`pause_s` apart), or keeps going until the fleet is stopped when None.
    """

    sim_url: str
    sections: Mapping[str, Any]
    lanes: int = 1
    turns_per_lane: int | None = None
    pause_s: float = 0.0
    requests: tuple[str, ...] = ()
    tenant: str = "acme"
    max_tokens: int = 16
    chain: tuple[str, ...] = ORDER["openai"]


@dataclass(frozen=True, slots=True)
class Tried:
    """One attempt of a turn, as its result reports it."""

    model: str
    outcome: str
    error_class: str | None
    http_status: int | None
    latency_ms: int


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn as a process saw it; `started`/`ended` are wall-clock seconds."""

    process: int
    turn_id: str
    started: float
    ended: float
    status: str
    reason: str | None
    step: int | None
    cost_micros: int
    latency_ms: int
    attempts: tuple[Tried, ...]
    admitted: float  # when the guard's admission (the fleet view) came back
    guard_s: float  # time spent waiting for the guard (Redis) during the turn
    # (provider model id, when recording its verdict began, when it ended)
    concluded: tuple[tuple[str, float, float], ...]

    def called(self, model: str) -> int:
        """How many calls (not skips) this turn made to `model`."""
        return sum(a.model == model and a.outcome != AttemptOutcome.SKIPPED for a in self.attempts)

    def skips(self, model: str) -> list[str | None]:
        """Why this turn skipped `model`, once per skip."""
        return [
            a.error_class
            for a in self.attempts
            if a.model == model and a.outcome == AttemptOutcome.SKIPPED
        ]


@dataclass(slots=True)
class ProcessReport:
    """Everything one process sends back."""

    index: int
    turns: list[TurnRecord] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def make_request(
    tenant: str = "acme", *, max_tokens: int = 16, turn_id: str | None = None
) -> TurnRequest:
    """A small support turn; `max_tokens` keeps its worst-case reservation near its cost."""
    return TurnRequest(
        turn_id=turn_id or uuid.uuid4().hex,
        tenant_id=tenant,
        messages=(
            Message(role="system", content="You are the support agent."),
            Message(role="user", content="Where is my order?"),
        ),
        max_tokens=max_tokens,
        deadline_s=10.0,
    )


@dataclass(slots=True)
class _Timing:
    admitted: float = 0.0
    guard_s: float = 0.0
    concluded: list[tuple[str, float, float]] = field(default_factory=list)


def _turn_of(charge: Charge) -> str:
    # "<turn id>:<run>:<call>": turn ids hold no ':'.
    return charge.charge_id.split(":", 1)[0]


class _Timed:
    """The real guard, with each turn's time spent in it and when it answered noted down."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.timings: dict[str, _Timing] = {}

    def _timing(self, charge: Charge | None) -> _Timing:
        return self.timings.setdefault(_turn_of(charge) if charge else "", _Timing())

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        began = time.perf_counter()
        admission = await self.guard.admit(targets, first)
        timing = self._timing(first)
        timing.guard_s += time.perf_counter() - began
        timing.admitted = time.time()
        return admission

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> Refusal | None:
        began = time.perf_counter()
        refusal = await self.guard.reserve(charge, replacing=replacing)
        self._timing(charge).guard_s += time.perf_counter() - began
        return refusal

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return self.guard.output_tokens(model, max_tokens)

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        began = time.perf_counter()
        granted = await self.guard.acquire_probe(target, holder)
        timing = self.timings.setdefault(holder.rsplit(":", 1)[0], _Timing())
        timing.guard_s += time.perf_counter() - began
        return granted

    async def conclude(self, end: Conclusion) -> None:
        began, began_at = time.perf_counter(), time.time()
        await self.guard.conclude(end)
        timing = self._timing(end.charge)
        timing.guard_s += time.perf_counter() - began
        if end.signal is not None:
            timing.concluded.append((end.target.provider_model, began_at, time.time()))

    async def hold(self, turn_id: str, payload: str) -> None:
        await self.guard.hold(turn_id, payload)

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        await self.guard.handoff(tenant, turn_id, reason, payload)

    async def route(self, tenant: str) -> budgets.Route | None:
        return await self.guard.route(tenant)


def _record(index: int, started: float, result: TurnResult, timing: _Timing) -> TurnRecord:
    return TurnRecord(
        process=index,
        turn_id=result.turn_id,
        started=started,
        ended=time.time(),
        status=result.status.value,
        reason=result.reason,
        step=result.step,
        cost_micros=result.cost_micros,
        latency_ms=result.latency_ms,
        attempts=tuple(
            Tried(a.model, a.outcome.value, a.error_class, a.http_status, a.latency_ms)
            for a in result.attempts
        ),
        admitted=timing.admitted,
        guard_s=timing.guard_s,
        concluded=tuple(timing.concluded),
    )


async def _run_job(job: Job, index: int, go: Event, stop: Event, out: Queue[Any]) -> None:
    logs = io.StringIO()
    configure_logging(level="warning", json=True, stream=logs)
    config = settings(job.sim_url, job.chain, **job.sections)
    guard = open_guard(config)
    timed = _Timed(guard)
    report = ProcessReport(index)
    async with make_client() as client:
        hedges = hedge_book(config, guard)
        chain = Chain.from_settings(config, client, guard=timed, hedges=hedges)

        async def one(request: TurnRequest) -> None:
            started = time.time()
            result = await chain.run(request)
            timing = timed.timings.pop(request.turn_id, _Timing())
            report.turns.append(_record(index, started, result, timing))

        async def lane() -> None:
            done = 0
            while not stop.is_set() and (job.turns_per_lane is None or done < job.turns_per_lane):
                await one(make_request(job.tenant, max_tokens=job.max_tokens))
                done += 1
                await asyncio.sleep(job.pause_s)

        out.put(("ready", index))
        # Nothing else runs on this loop yet: blocking here is harmless.
        if not go.wait(_START_TIMEOUT_S):
            raise TimeoutError("the fleet was never released")
        if job.requests:
            await asyncio.gather(*(one(TurnRequest.model_validate_json(r)) for r in job.requests))
        else:
            await asyncio.gather(*(lane() for _ in range(job.lanes)))
    if isinstance(hedges, FleetHedges):
        await hedges.aclose()  # its last samples, before the guard closes Redis
    await guard.aclose()
    report.events = [json.loads(line) for line in logs.getvalue().splitlines() if line]
    out.put(("done", report))


def _serve(index: int, jobs: Queue[Job | None], go: Event, stop: Event, out: Queue[Any]) -> None:
    """A worker process: run each job it is handed (a fresh loop, client and guard each)."""
    while (job := jobs.get()) is not None:
        try:
            asyncio.run(_run_job(job, index, go, stop, out))
        except Exception:
            out.put(("error", index, traceback.format_exc()))


class Workers:
    """Worker processes spawned once and reused: each `fleet(jobs)` hands one job to each.

    Spawning and importing costs about a second per process on a small machine; a pool
    keeps a module of fleet tests fast. `close()` ends the processes.
    """

    def __init__(self, size: int) -> None:
        self._go = SPAWN.Event()
        self._stop = SPAWN.Event()
        self._out: Queue[Any] = SPAWN.Queue()
        self._jobs: list[Queue[Job | None]] = [SPAWN.Queue() for _ in range(size)]
        self._procs = [
            SPAWN.Process(
                target=_serve,
                args=(i, self._jobs[i], self._go, self._stop, self._out),
                name=f"relevo-fleet-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for proc in self._procs:
            proc.start()

    def fleet(self, jobs: Sequence[Job]) -> Fleet:
        """A fleet running `jobs[i]` on worker i."""
        if len(jobs) > len(self._procs):
            raise ValueError(f"{len(jobs)} jobs for {len(self._procs)} workers")
        return Fleet(self, list(jobs))

    def close(self) -> None:
        """End every worker (each finishes its job first) and wait for them."""
        self._go.set()
        self._stop.set()
        for queue in self._jobs:
            queue.put(None)
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for queue in (*self._jobs, self._out):
            queue.close()
            queue.join_thread()


class Fleet:
    """Jobs on the pool's workers, released together by `go()` and stopped by `stop()`.

    with workers.fleet([job] * 4) as fleet:
        t0 = fleet.go()
        ...  # change the simulator, Redis, the kill switch
        fleet.stop()
        reports = fleet.reports()
    """

    def __init__(self, workers: Workers, jobs: list[Job]) -> None:
        self._workers = workers
        self._jobs = jobs
        self._pending = 0

    def _next(self, timeout_s: float) -> tuple[Any, ...]:
        message: tuple[Any, ...] = self._workers._out.get(timeout=timeout_s)
        if message[0] == "error":
            self._pending -= 1
            raise RuntimeError(f"fleet process {message[1]} failed:\n{message[2]}")
        if message[0] == "done":
            self._pending -= 1
        return message

    def __enter__(self) -> Fleet:
        workers = self._workers
        # Every earlier job has reported: no worker is looking at the events now.
        workers._go.clear()
        workers._stop.clear()
        for queue, job in zip(workers._jobs, self._jobs, strict=False):
            queue.put(job)
        self._pending = len(self._jobs)
        for _ in self._jobs:
            assert self._next(_START_TIMEOUT_S)[0] == "ready"
        return self

    def go(self) -> float:
        """Release every process at once; returns the wall-clock time of the release."""
        released = time.time()
        self._workers._go.set()
        return released

    def stop(self) -> None:
        """Ask open-ended lanes to finish the turn they are running and end."""
        self._workers._stop.set()

    def reports(self, timeout_s: float = 60.0) -> list[ProcessReport]:
        """Wait for every process's report (ordered by process index)."""
        reports: list[ProcessReport] = []
        while self._pending:
            message = self._next(timeout_s)
            if message[0] == "done":
                reports.append(message[1])
        return sorted(reports, key=lambda r: r.index)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Leave the pool idle for the next fleet, even after a failed test.
        self.go()
        self.stop()
        while self._pending:
            try:
                self._next(60.0)
            except RuntimeError:
                continue


def turns_of(reports: Sequence[ProcessReport]) -> list[TurnRecord]:
    """Every turn of every process, in the order they started."""
    return sorted((t for r in reports for t in r.turns), key=lambda t: t.started)


def events_of(reports: Sequence[ProcessReport], event: str) -> list[dict[str, Any]]:
    """The log events named `event` that any process emitted."""
    return [e for r in reports for e in r.events if e.get("event") == event]
