"""Hedged attempts: a call with no content by its hedge delay gets a twin on the next model.

With `chain.hedging.enabled`, every attempt of a turn runs as a task of its own. When it
has sent no content by its delay (`worker.guard.hedging`: a high percentile of its
first-byte latency), the turn has time left for the twin to answer, and the fleet's hedge
budget holds a hedge, the next model or provider the chain would call is started beside
it: the first target after it that is available by the fleet's view and fits the turn
(tools, context), with its own reservation on the tenant's budget. A half-open breaker's
probe is not hedged to: probes are the walk's. Whichever sends content first answers
(`claim`): the other is reported `hedge_lost`, cancelled at once (its response closed)
and charged what its prompt cost, as no output was sent. At most one hedge per turn;
never once content has been sent. When one of the two fails before content, the other
carries on alone, and the policy table's decision waits for the last of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from worker.guard.hedging import HedgeBook
from worker.guard.protocol import Availability, Charge, Guard, Target
from worker.settings import Settings
from worker.turn.capability import Fit, fit_turn
from worker.turn.pricing import cost_of
from worker.turn.report import TurnReport
from worker.types import TurnRequest, Usage

__all__ = ["TurnHedge"]

log = structlog.get_logger("relevo.hedge")

# What `_Turn._attempt` returns: the result, or what the walk does next.
R = TypeVar("R")


@dataclass(slots=True)
class _Flight:
    target: Target
    retry_index: int
    started: float
    delay_s: float
    prompt_micros: int  # what the call costs if cut before any output
    hedge: bool
    lost: bool = False


class TurnHedge(Generic[R]):
    """One turn's hedging: at most one twin, raced against the attempt it hedges."""

    def __init__(
        self,
        book: HedgeBook,
        settings: Settings,
        request: TurnRequest,
        report: TurnReport,
        guard: Guard,
        *,
        targets: Mapping[str, tuple[Target, ...]],
        availability: Callable[[Target], Availability],
        deadline: float,
        attempt: Callable[..., Coroutine[Any, Any, R]],
        charge: Callable[[Target, Fit, bool], Charge],
    ) -> None:
        self.book = book
        self.settings = settings
        self.request = request
        self.report = report
        self.guard = guard
        self.targets = targets
        self.availability = availability
        self.deadline = deadline
        self._attempt = attempt
        self._charge = charge
        self.flights: dict[asyncio.Task[R], _Flight] = {}
        self.race: tuple[asyncio.Task[R], asyncio.Task[R]] | None = None
        self.winner: asyncio.Task[R] | None = None
        self.used = False
        self._claimed = asyncio.Event()

    async def attempt(
        self,
        step: int,
        target: Target,
        fit: Fit,
        charge: Charge,
        *,
        holder: str | None,
        retry_index: int,
    ) -> R:
        """`_Turn._attempt`, hedged when it is slow to send content."""
        primary = self._start(
            step, target, fit, charge, holder=holder, retry_index=retry_index, hedge=False
        )
        try:
            twin = None if self.used else await self._maybe_hedge(primary, target)
            if twin is None:
                return await primary
            return await self._race(primary, twin)
        except asyncio.CancelledError:
            await self._cancel(primary)
            raise

    def claim(self) -> None:
        """The calling attempt sends its first content: it answers the turn."""
        me = asyncio.current_task()
        if self.winner is not None or me is None or me not in self.flights:
            return
        self.winner = me
        self._claimed.set()
        flight = self.flights[me]
        self.book.observe(flight.target, time.monotonic() - flight.started, hedge=flight.hedge)
        if self.race is None or me not in self.race:
            return
        other = self.race[1] if me is self.race[0] else self.race[0]
        if other.done():
            return
        loser = self.flights[other]
        loser.lost = True
        waited_s = time.monotonic() - loser.started
        # A hedged attempt cut here waited at least this long: evidence of the tail. A twin
        # cut early says nothing about how long it would have taken.
        self.book.observe(loser.target, None if loser.hedge else waited_s, hedge=loser.hedge)
        self.report.hedge_lost(
            loser.target,
            waited_s,
            loser.retry_index,
            loser.prompt_micros,
            twin_won=not loser.hedge,
        )
        log.info(
            "hedge.won" if not loser.hedge else "hedge.lost",
            turn_id=self.request.turn_id,
            winner=flight.target.model,
            winner_provider=flight.target.provider,
            loser=loser.target.model,
            loser_provider=loser.target.provider,
            wasted_micros=loser.prompt_micros,
        )
        other.cancel()

    def lost_cost(self) -> int | None:
        """For an attempt cancelled because its twin answered: what it is charged."""
        me = asyncio.current_task()
        flight = self.flights.get(me) if me is not None else None
        return flight.prompt_micros if flight is not None and flight.lost else None

    def decides_nothing(self) -> bool:
        """Whether the calling attempt's failure leaves the turn to the walk as it is: a
        twin that may still answer carries the turn, and a hedge is never retried (the
        walk moves on from the attempt it hedged)."""
        me = asyncio.current_task()
        if self.race is None or me not in self.race:
            return False
        if me is self.race[1]:
            return True
        return not self.race[1].done()

    async def aclose(self) -> None:
        """Cancel whatever is still in flight (the turn is ending) and wait for it."""
        await asyncio.gather(*(self._cancel(t) for t in self.flights), return_exceptions=True)

    # -- inside -------------------------------------------------------------------------

    def _start(
        self,
        step: int,
        target: Target,
        fit: Fit,
        charge: Charge,
        *,
        holder: str | None,
        retry_index: int,
        hedge: bool,
    ) -> asyncio.Task[R]:
        call = self._attempt(step, target, fit, charge, holder=holder, retry_index=retry_index)
        # No deadline of its own: the turn's cancels the turn's task, which cancels it.
        task: asyncio.Task[R] = asyncio.get_running_loop().create_task(call)
        model = self.settings.models[target.model]
        prompt = cost_of(Usage(input_tokens=fit.input_tokens), model)
        delay = self.book.delay_s(target)
        self.flights[task] = _Flight(target, retry_index, time.monotonic(), delay, prompt, hedge)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[R]) -> None:
        """An attempt that ended without content still earns the budget its share."""
        flight = self.flights[task]
        if task is self.winner or flight.lost:
            return
        waited_s = time.monotonic() - flight.started
        # Past its delay it was slow at least that long (a first-byte timeout, say).
        latency = waited_s if waited_s >= flight.delay_s else None
        self.book.observe(flight.target, latency, hedge=flight.hedge)

    async def _maybe_hedge(
        self, primary: asyncio.Task[R], target: Target
    ) -> asyncio.Task[R] | None:
        """Wait for content up to the delay; then the twin, if the rules allow one."""
        delay_s = self.flights[primary].delay_s
        claimed = asyncio.ensure_future(self._claimed.wait())
        try:
            await asyncio.wait({primary, claimed}, timeout=delay_s, return_when="FIRST_COMPLETED")
        finally:
            claimed.cancel()
        if primary.done() or self._claimed.is_set() or self.report.locked:
            return None
        picked = self._next_after(target)
        if picked is None:
            return None
        step, backup, fit = picked
        left_s = self.deadline - asyncio.get_running_loop().time()
        # A twin that cannot send content by the deadline would only be charged.
        if left_s < self.book.delay_s(backup) or not await self.book.take():
            return None
        charge = self._charge(backup, fit, True)
        refusal = await self.guard.reserve(charge)
        if refusal is not None or primary.done() or self._claimed.is_set():
            if refusal is None:
                await self.guard.conclude(backup, charge, signal=None, cost_micros=None)
            log.info("hedge.not_started", turn_id=self.request.turn_id, refusal=refusal)
            return None
        self.used = True
        twin = self._start(step, backup, fit, charge, holder=None, retry_index=0, hedge=True)
        self.race = (primary, twin)
        log.info(
            "hedge.started",
            turn_id=self.request.turn_id,
            model=target.model,
            provider=target.provider,
            hedge_model=backup.model,
            hedge_provider=backup.provider,
            delay_ms=round(delay_s * 1000),
        )
        return twin

    def _next_after(self, current: Target) -> tuple[int, Target, Fit] | None:
        """The first target after `current` in the chain's order that the walk would call
        now without a probe: available by the fleet's view, and fit for the turn."""
        passed = False
        for step, slug in enumerate(self.settings.chain.models):
            fit: Fit | None = None
            for target in self.targets[slug]:
                if not passed:
                    passed = target == current
                    continue
                if self.availability(target) is not Availability.AVAILABLE:
                    continue
                if fit is None:
                    found = fit_turn(self.request, self.settings.models[slug])
                    if not isinstance(found, Fit):
                        break
                    fit = found
                return step, target, fit
        return None

    async def _race(self, primary: asyncio.Task[R], twin: asyncio.Task[R]) -> R:
        """Both in flight: the answer of whichever sends content first, else the last
        to end (its own failure, decided by the policy table)."""
        try:
            done, _ = await asyncio.wait({primary, twin}, return_when="FIRST_COMPLETED")
            if self.winner is None:
                # One failed before content: the other decides the turn.
                return await (twin if primary in done else primary)
            await asyncio.wait({primary, twin})
        except asyncio.CancelledError:
            # In the order they started: the report lists the primary first.
            await self._cancel(primary)
            await self._cancel(twin)
            raise
        # Content was sent: the winner's attempt ends the turn either way (locked).
        return self.winner.result()

    async def _cancel(self, task: asyncio.Task[R]) -> None:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
