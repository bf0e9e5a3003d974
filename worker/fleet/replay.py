"""Running the turns held while the kill switch was on, and delivering them.

The command, `relevo replay-held`, is `worker.cli.replay_command`; the console runs it too.

Turns are taken from the held stream (each exactly once, fleet-wide) only as slots free
up: at most `concurrency` run at once, at most `batch` are taken at a time, and the kill
switch is checked before each take. Each is handed to a `RunHeld`; `chain_runner` runs
it through the chain in this process and `Delivery` stores its result under the turn id
wherever a reader looks: over the stored "rejected" result in the turn store (`relevo
result`) and in Celery's result backend (`relevo enqueue --wait`, `TurnHandle.get`).
A streaming turn streams its text as a worker's run does (`relevo tail`,
`AsyncTurnHandle.stream`): its run starts the turn's stream over, and the stream ends
with the result, or when the run is interrupted (the turn stays "rejected", held again).

Interrupted (cancelled, Ctrl-C, a run raising), the replay holds every turn it took but
did not finish again, so running it again resumes; a turn taken again whose stored
result is no longer "rejected" was replayed before and is not run again.

A held turn this release cannot read because a newer release held it (or answered it, in
a result this release cannot read) is not run: it is held again once the replay ends,
with its own schema version, for that release's replay. One that is damaged is reported
with its payload and dropped, as a payload that is no turn request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import breakers
from worker.errors import InputError
from worker.fleet.errors import Unreadable
from worker.fleet.replay_gate import Place, ReplayGate, SetAside
from worker.fleet.schema import read_turn
from worker.turn.routing import primary_model
from worker.types import Status, TurnRequest, TurnResult

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from worker.fleet.turnstore import TurnStore
    from worker.settings import Settings
    from worker.turn.chain import Chain

__all__ = [
    "BATCH",
    "CONCURRENCY",
    "Delivery",
    "ReplayOutcome",
    "ReplaySummary",
    "Replayed",
    "RunHeld",
    "chain_runner",
    "replay_fleet",
    "replay_held",
]

BATCH = 10
CONCURRENCY = 16


class ReplayOutcome(StrEnum):
    """What became of one held turn."""

    REPLAYED = "replayed"  # run, and its result stored for every reader
    SKIPPED = "skipped"  # replayed before (taken again after an interruption): not run again
    NOT_STORED = "not_stored"  # run, but its result could not be stored: only in the output
    INVALID = "invalid"  # not a turn request: reported with its payload and dropped
    LEFT_HELD = "left_held"  # a newer release's: held again, for that release's replay
    EXPIRED = "expired"  # its deadline passed while held: ended `queue_deadline`, not run
    CALLER_GONE = "caller_gone"  # nothing says it was sent, so no one reads it: dropped


@dataclass(frozen=True)
class Replayed:
    """One held turn done: the JSON-able line to print about it, and its outcome."""

    line: dict[str, Any]
    outcome: ReplayOutcome = ReplayOutcome.REPLAYED


RunHeld = Callable[[breakers.HeldTurn], Coroutine[Any, Any, Replayed]]
"""Run (or hand on) one held turn.

`InputError` means the payload is not a turn request: the turn is reported and dropped.
Any other exception stops the replay, and the turns not finished are held again.
"""


@dataclass
class ReplaySummary:
    """What a replay did; `stopped_by` is the kill switch if it came back on meanwhile."""

    replayed: int = 0
    skipped: int = 0
    not_stored: int = 0
    invalid: int = 0
    left_held: int = 0  # a newer release's, held again for it
    expired: int = 0  # past their deadline: not run (`include_expired` runs them)
    caller_gone: int = 0  # no one to read them: not run (`include_expired` runs them)
    given_back: int = 0  # held again after an interruption
    not_given_back: int = 0  # Redis would not take them back: only in the output
    stopped_by: breakers.KillSwitchState | None = None

    def count(self, outcome: ReplayOutcome) -> None:
        match outcome:
            case ReplayOutcome.REPLAYED:
                self.replayed += 1
            case ReplayOutcome.SKIPPED:
                self.skipped += 1
            case ReplayOutcome.NOT_STORED:
                self.not_stored += 1
            case ReplayOutcome.INVALID:
                self.invalid += 1
            case ReplayOutcome.LEFT_HELD:
                self.left_held += 1
            case ReplayOutcome.EXPIRED:
                self.expired += 1
            case ReplayOutcome.CALLER_GONE:
                self.caller_gone += 1


class Delivery:
    """Where a replayed result goes: the turn store, which every reader reads; and its
    text, as it comes, for a streaming turn."""

    def __init__(self, store: TurnStore) -> None:
        self.store = store
        # Names this process's runs in the turns' streams, as a worker's holder does.
        self.holder = f"replay@{socket.gethostname()}:{os.getpid()}"

    async def replayed(self, turn_id: str) -> TurnResult | None:
        """The turn's stored result if a replay already ran it (stored, not "rejected");
        `Unreadable` if this release cannot read the stored one."""
        stored = await self.store.result(turn_id)
        return None if stored is None or stored.status is Status.REJECTED else stored

    async def deliver(self, result: TurnResult, *, end_stream: bool = False) -> TurnResult:
        """Store `result` for every reader (ending its stream first, with `end_stream`);
        return the one that stands (an earlier replay's)."""
        return await self.store.replace(result, end_stream=end_stream)

    async def run(self, chain: Chain, request: TurnRequest) -> TurnResult:
        """Run the turn through `chain`, its text streamed if it asked for that.

        A run that ends without a result (interrupted) leaves the stream as the hold did:
        started over and ended, so a reader drops what it showed and ends on "rejected".
        """
        if not request.stream:
            return await chain.run(request)
        try:
            async with self.store.streaming(request.turn_id, self.holder) as on_text:
                return await chain.run(request, on_text=on_text)
        except BaseException:
            with contextlib.suppress(Exception):  # Redis gone: the stream expires with its TTL
                await self.store.start_stream(request.turn_id, self.holder)
                await self.store.end_stream(request.turn_id)
            raise


def chain_runner(chain: Chain, delivery: Delivery, gate: ReplayGate | None = None) -> RunHeld:
    """Run each held turn through `chain` in this process and deliver its `TurnResult`;
    `gate` sets aside the turns no longer wanted and holds each run to its tenant's share."""

    async def run(turn: breakers.HeldTurn) -> Replayed:
        try:
            if turn.problem is not None:
                raise Unreadable("held turn", turn.problem, turn_id=turn.turn_id)
            request = read_turn(turn.payload, turn.turn_id)
        except Unreadable as exc:
            if not exc.newer:
                raise InputError(exc.why) from None
            return _left_held(turn, exc)
        if gate is None:
            return await run_read(turn, request, None)
        place = gate.line_up(request)  # before any await: in the order the turns were held
        try:
            return await run_read(turn, request, (gate, place))
        finally:
            place.leave()

    async def run_read(
        turn: breakers.HeldTurn, request: TurnRequest, gated: tuple[ReplayGate, Place] | None
    ) -> Replayed:
        try:
            before = await delivery.replayed(request.turn_id)
        except Unreadable as exc:
            if exc.newer:
                return _left_held(turn, exc)
            before = None  # damaged: its answer goes in the output (it cannot replace it)
        if before is not None:
            # Delivered again: a replay interrupted after the turn store may have missed Celery's.
            return await _delivered(delivery, before, ReplayOutcome.SKIPPED, turn)
        if gated is None:
            result = await delivery.run(chain, request)
        else:
            gate, place = gated
            why = await gate.set_aside(turn, request)
            if why is not None:
                return await _set_aside(delivery, turn, request, why, chain)
            async with gate.leased(request, place):
                result = await delivery.run(chain, request)
        return await _delivered(
            delivery, result, ReplayOutcome.REPLAYED, turn, end_stream=request.stream
        )

    return run


async def _set_aside(
    delivery: Delivery, turn: breakers.HeldTurn, request: TurnRequest, why: SetAside, chain: Chain
) -> Replayed:
    """A turn not run: one past its deadline ends `failed`, `queue_deadline`, for its readers;
    one no one can read is only reported."""
    from worker.fleet.dispatcher import QUEUE_DEADLINE

    line: dict[str, Any] = {"turn_id": turn.turn_id, "tenant_id": request.tenant_id}
    if why is SetAside.CALLER_GONE:
        line.update(status=why.value, error="nothing in the turn store says it was sent")
        return Replayed(line, ReplayOutcome.CALLER_GONE)
    held_s = max(0.0, time.time() - turn.held_at_ms / 1000)
    result = TurnResult(
        turn_id=request.turn_id,
        tenant_id=request.tenant_id,
        status=Status.FAILED,
        reason=QUEUE_DEADLINE,
        error=f"held {held_s:.0f} s by the kill switch, past its {request.deadline_s:g} s "
        "deadline: not replayed",
        primary_model=primary_model(chain.settings, request),
    )
    replayed = await _delivered(delivery, result, ReplayOutcome.EXPIRED, turn)
    if replayed.outcome is ReplayOutcome.EXPIRED:
        replayed.line["replay"] = why.value
    return replayed


def _left_held(turn: breakers.HeldTurn, exc: Unreadable) -> Replayed:
    line = {"turn_id": turn.turn_id, "status": ReplayOutcome.LEFT_HELD.value, "error": str(exc)}
    return Replayed(line, ReplayOutcome.LEFT_HELD)


async def _delivered(
    delivery: Delivery,
    result: TurnResult,
    outcome: ReplayOutcome,
    turn: breakers.HeldTurn,
    *,
    end_stream: bool = False,
) -> Replayed:
    try:
        result = await delivery.deliver(result, end_stream=end_stream)
    except Exception as exc:  # whatever failed, the answer is printed and counted, not dropped
        line = result.model_dump(mode="json")
        line.update(
            replay=ReplayOutcome.NOT_STORED.value, store_error=_error(exc), payload=turn.payload
        )
        return Replayed(line, ReplayOutcome.NOT_STORED)
    line = result.model_dump(mode="json")
    if outcome is ReplayOutcome.SKIPPED:
        line["replay"] = outcome.value
    return Replayed(line, outcome)


async def replay_held(
    held: breakers.HeldTurns,
    switch: breakers.KillSwitch,
    run_one: RunHeld,
    emit: Callable[[dict[str, Any]], None],
    *,
    limit: int | None = None,
    batch: int = BATCH,
    concurrency: int = CONCURRENCY,
    summary: ReplaySummary | None = None,
) -> ReplaySummary:
    """Run held turns, `concurrency` at once, until none is left, `limit` were taken or the
    switch is on. `summary` is filled in as turns finish: it is complete even if this raises.

    Cancelled, or when a run raises anything but `InputError`, the runs still going are
    cancelled and their turns held again before the exception goes on.
    """
    summary = ReplaySummary() if summary is None else summary
    running: dict[asyncio.Task[Replayed], breakers.HeldTurn] = {}
    left: list[breakers.HeldTurn] = []  # a newer release's: held again at the end
    taken, more = 0, True
    try:
        while True:
            while more and summary.stopped_by is None:
                room = concurrency - len(running)
                if limit is not None:
                    room = min(room, limit - taken)
                if room <= 0:
                    break
                state = await switch.status()
                if state is not None:
                    summary.stopped_by = state
                    break
                turns = await held.take(min(batch, room))
                more, taken = bool(turns), taken + len(turns)
                for turn in turns:
                    running[asyncio.create_task(run_one(turn))] = turn
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                # Raises for an unexpected error, while the turn is still in `running`.
                _finish(summary, emit, running[task], task, left)
                del running[task]
    except BaseException:
        await _give_back(held, running, emit, summary, left)
        raise
    await _give_back(held, running, emit, summary, left)
    return summary


def _finish(
    summary: ReplaySummary,
    emit: Callable[[dict[str, Any]], None],
    turn: breakers.HeldTurn,
    task: asyncio.Task[Replayed],
    left: list[breakers.HeldTurn],
) -> None:
    try:
        replayed = task.result()
    except InputError as exc:
        line = {"turn_id": turn.turn_id, "status": "invalid", "error": str(exc)}
        line["payload"] = turn.payload  # the stream no longer has it
        replayed = Replayed(line, ReplayOutcome.INVALID)
    if replayed.outcome is ReplayOutcome.LEFT_HELD:
        left.append(turn)
    summary.count(replayed.outcome)
    emit(replayed.line)


async def _give_back(
    held: breakers.HeldTurns,
    running: dict[asyncio.Task[Replayed], breakers.HeldTurn],
    emit: Callable[[dict[str, Any]], None],
    summary: ReplaySummary,
    left: list[breakers.HeldTurn],
) -> None:
    """Cancel the runs still going and hold their turns again, and the newer release's;
    report the ones that finished."""
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
    unfinished = []
    for task, turn in running.items():
        if not task.cancelled() and isinstance(task.exception(), InputError | None):
            # It finished before the cancellation reached it.
            _finish(summary, emit, turn, task, left)
        else:
            unfinished.append(turn)
    refused: Exception | None = None
    for turn, interrupted in [*((t, True) for t in unfinished), *((t, False) for t in left)]:
        if refused is None:
            try:
                await held.hold(turn.turn_id, turn.payload, version=turn.version)
                summary.given_back += interrupted
                continue
            except Exception as exc:  # Redis is not taking turns back: stop asking
                refused = exc
        summary.not_given_back += 1
        line = {"turn_id": turn.turn_id, "status": "not_given_back", "error": _error(refused)}
        line["payload"] = turn.payload  # nowhere else now
        emit(line)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def replay_fleet(
    settings: Settings,
    client: Redis,
    emit: Callable[[dict[str, Any]], None],
    *,
    limit: int | None = None,
    concurrency: int = CONCURRENCY,
    summary: ReplaySummary | None = None,
    results: Redis | None = None,
    include_expired: bool = False,
) -> int:
    """Replay the fleet's held turns through its chain in this process (`replay_held`),
    delivering each result to every reader; how many turns are still held after.

    `client` holds the shared state (kill switch, held turns, breakers, budgets);
    `results`, when the shared state has a store of its own, holds the turn store and the
    fair queue. Turns past their deadline or whose caller is gone are set aside unless
    `include_expired`; the others run within their tenant's `max_in_flight`."""
    from worker.adapters import make_client
    from worker.fleet.fairqueue import FairQueue
    from worker.fleet.turnstore import TurnStore
    from worker.guard.redis_guard import open_guard
    from worker.turn.chain import Chain

    where = settings.redis
    switch = breakers.KillSwitch(client, namespace=where.namespace)
    held = breakers.HeldTurns(client, namespace=where.namespace)
    store = TurnStore(
        results or client, namespace=where.namespace, ttl_s=settings.worker.result_ttl_s
    )
    delivery = Delivery(store)
    fair = None
    if settings.fairness.enabled:
        fair = FairQueue(
            results or client,
            namespace=where.namespace,
            queue=settings.worker.queue,
            default=settings.fairness.default_share(),
        )
    gate = ReplayGate(store, fair, include_expired=include_expired)
    async with make_client(settings.http) as http:
        chain = Chain.from_settings(settings, http, guard=open_guard(settings, client))
        await replay_held(
            held,
            switch,
            chain_runner(chain, delivery, gate),
            emit,
            limit=limit,
            concurrency=concurrency,
            summary=summary,
        )
    return await held.count()
