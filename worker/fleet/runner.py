"""Running one turn: a task's payload in, its result out, once per turn id.

Celery's threads block in `TurnRunner.answer` while the turn runs on the process's event
loop (`worker.fleet.process.WorkerProcess`), so a thousand waiting turns share one loop,
one HTTP connection pool and one Redis pool instead of a thousand of each. The turn's
own deadline bounds everything: Celery's time limits are not enforced under the
threads pool.

    answer ─► checked_turn, turn_time_s ─► result_of: _claim (or the stored result)
        ─► _lease ─► _walk (Chain.run) ─► _save ─► WorkerProcess.give_back
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from breakers.schema import SCHEMA_FIELD, version_problem
from worker.errors import STORE_DOWN, InputError
from worker.fleet.agreement import FleetShape
from worker.fleet.dispatcher import QUEUE_DEADLINE
from worker.fleet.errors import Unreadable
from worker.fleet.loop import LoopThread
from worker.fleet.process import FORGET_ERRORS, LEASE_HOLD_S, MARGIN_S, WorkerProcess
from worker.fleet.schema import TURN_SCHEMA
from worker.observability import tracing
from worker.observability.metrics import TurnMetrics
from worker.settings import Settings
from worker.turn.chain import Chain
from worker.turn.intake import checked_turn, turn_time_s
from worker.turn.routing import primary_model
from worker.types import Status, TurnRequest, TurnResult, is_turn_id

__all__ = ["INVALID_INPUT", "UNREADABLE", "TurnRunner", "rejected_input"]

log = structlog.get_logger("relevo.runner")
# The reason of a payload that is not a turn: it is answered, never run nor stored.
INVALID_INPUT = "invalid_input"
# The reason of a turn a newer release sent, in a schema version this release cannot read:
# it is answered and stored (when it names its turn), never run.
UNREADABLE = "unreadable"
# How often a turn that found its tenant at max_in_flight looks for a lease again.
_LEASE_POLL_S = 0.5


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


class TurnRunner:
    """Runs each turn once per turn id, however often it is delivered, on its process's
    shared parts (`WorkerProcess`, made here unless given)."""

    def __init__(
        self,
        settings: Settings,
        *,
        loop: LoopThread | None = None,
        metrics: TurnMetrics | None = None,
        process: WorkerProcess | None = None,
    ) -> None:
        self.process = process or WorkerProcess(settings, loop=loop, metrics=metrics)
        self.settings = settings
        self.loop = self.process.loop
        self.metrics = self.process.metrics
        self.guard = self.process.guard
        self.store = self.process.store
        self.holder = self.process.holder
        self.turns = self.process.turns
        self._chain: Chain | None = None

    def close(self) -> None:
        """Close the process the turns ran on (`WorkerProcess.close`)."""
        self.process.close()

    def answer(
        self,
        payload: object,
        *,
        carrier: Mapping[str, Any] | None = None,
        version: object = None,
        task_id: str | None = None,
        fleet: object = None,
    ) -> dict[str, Any]:
        """Answer a task's payload from a worker thread: always a result, as a dict.

        `carrier`: the trace context its message brought (`tracing.carried`), if any;
        `version`: the schema version its message's header says (`worker.fleet.schema`);
        `task_id`: its message's task id, which names the turn in what cannot be read;
        `fleet`: the fleet settings its producer states (`worker.fleet.agreement`).
        Fields of the payload this release does not know are ignored.
        """
        self.process.agreement.check(FleetShape.parse(fleet), "producer", where=f"turn {task_id}")
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
        time_s = turn_time_s(request, self.settings.turn_deadline_s)
        # In the turn's span while tracing is on; the coroutine itself otherwise.
        providers = {name: p.gen_ai_provider for name, p in self.settings.providers.items()}
        turn = tracing.traced_turn(request, self.result_of(request, time_s), carrier, providers)
        result = self.loop.run(turn, timeout_s=time_s + 2 * MARGIN_S)
        return result.model_dump(mode="json")

    def _refused(self, payload: object, exc: Unreadable) -> dict[str, Any]:
        """A turn this release cannot read ends failed, and stays answered for its sender
        (stored under its id, when it gives one)."""
        self.process.noted(exc)
        result = rejected_input(payload, exc, UNREADABLE)
        self.metrics.record(result)
        turn_id = exc.turn_id or result.turn_id  # the message's task id: the turn's
        if not is_turn_id(turn_id):
            self._forget(result.turn_id)
            return result.model_dump(mode="json")
        result = result.model_copy(update={"turn_id": turn_id})
        saved = self.loop.run(self._save(result, end_stream=False), timeout_s=2 * MARGIN_S)
        return saved.model_dump(mode="json")

    def _forget(self, turn_id: str) -> None:
        """Drop a turn's sent record: a payload this worker refuses is not re-sent."""
        try:
            self.loop.run(self.store.forget(turn_id), timeout_s=5)
        except FORGET_ERRORS as exc:
            log.warning("turn.record_kept", turn_id=turn_id, error=type(exc).__name__)

    async def result_of(self, request: TurnRequest, time_s: float | None = None) -> TurnResult:
        """The turn's result: the stored one if it already ran, else a new run within
        `time_s` (by default its `turn_time_s`); either way the tenant's lease on it is
        given back."""
        if time_s is None:
            time_s = turn_time_s(request, self.settings.turn_deadline_s)
        result = await self._claim(request, time_s)
        if result is None:
            # One deadline for the lease's wait and the walk: a turn that waited for its
            # tenant's lease has that much less to run.
            deadline = asyncio.get_running_loop().time() + time_s
            late = await self._lease(request, time_s, deadline)
            ran = late if late is not None else await self._walk(request, deadline)
            result = await self._save(ran, end_stream=request.stream)
        await self.process.give_back(request.tenant_id, request.turn_id)
        return result

    async def _claim(self, request: TurnRequest, time_s: float) -> TurnResult | None:
        """Claim the turn for this process, or wait for the delivery that holds it to
        answer. None: this process runs it (claimed, or the store is away)."""
        turn_id = request.turn_id
        try:
            while True:
                claimed = await self.store.claim(turn_id, self.holder, time_s + MARGIN_S)
                if isinstance(claimed, TurnResult):
                    return claimed
                if claimed:
                    return None
                stored = await self.store.wait_result(turn_id, time_s + MARGIN_S)
                if stored is not None:
                    return stored
        except STORE_DOWN as exc:
            log.warning("turn.store_unreachable", turn_id=turn_id, error=type(exc).__name__)
        except Unreadable as exc:
            # Answered, by a release whose result this one cannot read: it stands, unread.
            return self._standing_unread(request, exc)
        return None

    async def _lease(
        self, request: TurnRequest, time_s: float, deadline: float
    ) -> TurnResult | None:
        """Hold the tenant's lease while the turn runs: the one its dispatch took, or, for
        a turn redelivered after it ran out, a new one once the tenant is below its
        `max_in_flight`. None: go on; else the turn's result (no lease within its deadline).
        Redis away: the turn runs, as every other check lets it then."""
        if not self.settings.fairness.enabled:
            return None
        loop = asyncio.get_running_loop()
        waited = False
        while True:
            try:
                fair = self.process.fair
                if await fair.lease(request.tenant_id, request.turn_id, hold_s=LEASE_HOLD_S):
                    self.turns.leased[request.turn_id] = request.tenant_id
                    return None
            except STORE_DOWN as exc:
                log.warning("turn.lease_skipped", turn_id=request.turn_id, error=type(exc).__name__)
                return None
            if not waited:
                waited = True
                log.info("turn.lease_wait", turn_id=request.turn_id, tenant_id=request.tenant_id)
            if loop.time() >= deadline:
                break
            await asyncio.sleep(_LEASE_POLL_S)
        log.warning("turn.queue_deadline", turn_id=request.turn_id, tenant_id=request.tenant_id)
        result = TurnResult(
            turn_id=request.turn_id,
            tenant_id=request.tenant_id,
            status=Status.FAILED,
            reason=QUEUE_DEADLINE,
            error=f"waited {time_s:.1f} s for a lease of its tenant (max_in_flight), past "
            "its deadline",
            primary_model=primary_model(self.settings, request),
        )
        self.metrics.record(result)
        return result

    def _standing_unread(self, request: TurnRequest, exc: Unreadable) -> TurnResult:
        """What this process hands Celery for a turn whose stored result it cannot read
        (the stored one stands: this is neither saved nor counted as a turn)."""
        self.process.noted(exc)
        return TurnResult(
            turn_id=request.turn_id,
            tenant_id=request.tenant_id,
            status=Status.FAILED,
            reason=UNREADABLE,
            error=str(exc),
            primary_model=primary_model(self.settings, request),
        )

    async def _save(self, result: TurnResult, *, end_stream: bool) -> TurnResult:
        """Save the result (and end its stream); one Redis missed is kept and saved when
        Redis answers again."""
        try:
            return await self.store.save(result, end_stream=end_stream)
        except Unreadable as exc:
            # Another delivery saved first, in a form this release cannot read: it stands.
            self.process.noted(exc)
            return result
        except STORE_DOWN as exc:
            log.warning("turn.result_saved_later", turn_id=result.turn_id, error=type(exc).__name__)
        store = self.store
        self.guard.backlog.add(
            f"result:{result.turn_id}", "result", lambda: store.save(result, end_stream=end_stream)
        )
        return result

    async def _walk(self, request: TurnRequest, deadline: float) -> TurnResult:
        """Walk the chain with the turn (it was not run before) and count it, once."""
        chain, turns = self._the_chain(), self.turns
        turns.in_flight += 1  # on the loop's one thread: no lock
        turns.running.add(request.turn_id)
        try:
            if not request.stream:
                result = await chain.run(request, deadline=deadline)
            else:
                # This run's text starts the stream over: a run before it (its worker died)
                # left text that is not the result's. The end marker goes with the result.
                async with self.store.streaming(request.turn_id, self.holder) as on_text:
                    result = await chain.run(request, on_text=on_text, deadline=deadline)
        finally:
            turns.in_flight -= 1
            turns.running.discard(request.turn_id)
        self.metrics.record(result)
        self.process.report_state()
        return result

    def _the_chain(self) -> Chain:
        # The HTTP client belongs to the loop it was made on: made there (on a turn), once.
        if self._chain is None:
            client = self.process.http_client()
            self._chain = Chain.from_settings(self.settings, client, guard=self.guard)
        return self._chain
