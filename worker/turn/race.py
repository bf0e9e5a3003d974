"""Hedged attempts: a call with no content by its hedge delay gets a twin on the next model.

With `chain.hedging.enabled`, the walk runs its attempts through `HedgedAttempts`, which
wraps the turn's `Attempts` with the same `attempt`, and every call runs as a task of its
own. When a call has sent no content by its delay (`worker.guard.hedge_book`: a high
percentile of its first-byte latency), the turn has time left for the twin to answer,
and the fleet's hedge budget holds a hedge, the next model or provider the chain would
call is started beside it: the first target after it that is available by the fleet's
view and fits the turn (tools, context), with its own reservation on the tenant's
budget. A half-open breaker's probe is not hedged to: probes are the walk's. Whichever
sends content first answers (`_claim`): the other is reported `hedge_lost`, cancelled at
once (its response closed) and charged what its prompt cost, as no output was sent. At
most one hedge per turn; never once content has been sent. When one of the two fails
before content, the other carries on alone, and the policy table's decision waits for
the last of them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from worker.guard.hedge_book import HedgeBook
from worker.guard.protocol import Availability, Target
from worker.turn.attempt import Attempts
from worker.turn.capability import Fit, fit_turn, wire_unfit
from worker.turn.outcome import Flight, MoveOn, Outcome, Plan
from worker.turn.pricing import cost_of
from worker.types import Usage

__all__ = ["HedgedAttempts"]

log = structlog.get_logger("relevo.hedge")

_Call = asyncio.Task[Outcome]


@dataclass(slots=True)
class _Racer:
    flight: Flight
    started: float
    delay_s: float
    prompt_micros: int  # what the call costs if cut before any content
    hedge: bool
    lost: bool = False


class HedgedAttempts:
    """One turn's attempts, each hedged when slow to send content: at most one twin."""

    def __init__(
        self,
        attempts: Attempts,
        book: HedgeBook,
        *,
        targets: Mapping[str, tuple[Target, ...]],
        availability: Callable[[Target], Availability],
        models: Sequence[str],
    ) -> None:
        """`models`: the turn's chain, whose order a hedge follows."""
        self.attempts = attempts
        self.book = book
        self.targets = targets
        self.models = models
        self.availability = availability
        self.racers: dict[_Call, _Racer] = {}
        self.race: tuple[_Call, _Call] | None = None
        self.winner: _Call | None = None
        self.used = False
        self._claimed = asyncio.Event()

    async def attempt(self, plan: Plan) -> Outcome:
        """Prepare `plan` and call it, with a twin if it is slow to send content."""
        flight = await self.attempts.prepare(plan)
        if not isinstance(flight, Flight):
            return flight
        primary = self._start(flight, hedge=False)
        try:
            twin = None if self.used else await self._maybe_hedge(primary)
            if twin is None:
                return await primary
            return await self._race(primary, twin)
        except asyncio.CancelledError:
            await _cancel(primary)
            raise

    async def aclose(self) -> None:
        """Cancel whatever is still in flight (the turn is ending) and wait for it."""
        await asyncio.gather(*(_cancel(t) for t in self.racers), return_exceptions=True)
        await self.attempts.aclose()

    # -- inside -------------------------------------------------------------------------

    def _start(self, flight: Flight, *, hedge: bool) -> _Call:
        # No deadline of its own: the turn's cancels the turn's task, which cancels it.
        task = asyncio.get_running_loop().create_task(self.attempts.call(flight))
        plan = flight.plan
        model = self.attempts.settings.models[plan.target.model]
        prompt = cost_of(Usage(input_tokens=plan.fit.input_tokens), model)
        if self.attempts.writes_unseen(plan.target, model):
            # Cut, it may have written a whole answer, or thought, that nothing counts.
            prompt = flight.charge.worst
        delay = self.book.delay_s(plan.target)
        racer = _Racer(flight, time.monotonic(), delay, prompt, hedge)
        flight.on_content = functools.partial(self._claim, task)
        self.racers[task] = racer
        task.add_done_callback(self._ended)
        return task

    def _claim(self, me: _Call) -> None:
        """`me` sends its first content: it answers the turn, and its twin is cut."""
        if self.winner is not None:
            return
        self.winner = me
        self._claimed.set()
        racer = self.racers[me]
        target = racer.flight.plan.target
        self.book.observe(target, time.monotonic() - racer.started, hedge=racer.hedge)
        if self.race is None or me not in self.race:
            return
        other = self.race[1] if me is self.race[0] else self.race[0]
        if other.done():
            return
        loser = self.racers[other]
        loser.lost = True
        loser.flight.cut_micros = loser.prompt_micros
        lost = loser.flight.plan
        waited_s = time.monotonic() - loser.started
        # A hedged attempt cut here waited at least this long: evidence of the tail. A twin
        # cut early says nothing about how long it would have taken.
        self.book.observe(lost.target, None if loser.hedge else waited_s, hedge=loser.hedge)
        self.attempts.report.hedge_lost(
            lost.target, waited_s, lost.retry_index, loser.prompt_micros, twin_won=not loser.hedge
        )
        log.info(
            "hedge.won" if not loser.hedge else "hedge.lost",
            turn_id=self.attempts.request.turn_id,
            winner=target.model,
            winner_provider=target.provider,
            loser=lost.target.model,
            loser_provider=lost.target.provider,
            wasted_micros=loser.prompt_micros,
        )
        other.cancel()

    def _ended(self, task: _Call) -> None:
        """An attempt that ended without content still earns the budget its share."""
        racer = self.racers[task]
        if task is self.winner or racer.lost:
            return
        waited_s = time.monotonic() - racer.started
        # Past its delay it was slow at least that long (a first-byte timeout, say).
        latency = waited_s if waited_s >= racer.delay_s else None
        self.book.observe(racer.flight.plan.target, latency, hedge=racer.hedge)

    async def _maybe_hedge(self, primary: _Call) -> _Call | None:
        """Wait for content up to the delay; then the twin, if the rules allow one."""
        racer = self.racers[primary]
        claimed = asyncio.ensure_future(self._claimed.wait())
        try:
            await asyncio.wait(
                {primary, claimed}, timeout=racer.delay_s, return_when="FIRST_COMPLETED"
            )
        finally:
            claimed.cancel()
        report = self.attempts.report
        if primary.done() or self._claimed.is_set() or report.locked:
            return None
        plan = self._next_after(racer.flight.plan.target)
        if plan is None:
            return None
        left_s = self.attempts.deadline - asyncio.get_running_loop().time()
        # A twin that cannot send content by the deadline would only be charged.
        if left_s < self.book.delay_s(plan.target) or not await self.book.take():
            return None
        flight = await self.attempts.try_reserve(plan)
        if flight is None or primary.done() or self._claimed.is_set():
            if flight is not None:
                await self.attempts.release(flight)
            log.info("hedge.not_started", turn_id=self.attempts.request.turn_id)
            return None
        self.used = True
        twin = self._start(flight, hedge=True)
        self.race = (primary, twin)
        hedged = racer.flight.plan.target
        log.info(
            "hedge.started",
            turn_id=self.attempts.request.turn_id,
            model=hedged.model,
            provider=hedged.provider,
            hedge_model=plan.target.model,
            hedge_provider=plan.target.provider,
            delay_ms=round(racer.delay_s * 1000),
        )
        return twin

    def _next_after(self, current: Target) -> Plan | None:
        """The first target after `current` in the chain's order that the walk would call
        now without a probe: available by the fleet's view, and fit for the turn."""
        settings, request = self.attempts.settings, self.attempts.request
        passed = False
        for step, slug in enumerate(self.models):
            fit: Fit | None = None
            for target in self.targets[slug]:
                if not passed:
                    passed = target == current
                    continue
                if self.availability(target) is not Availability.AVAILABLE:
                    continue
                wire = settings.providers[target.provider].wire
                if wire_unfit(request, wire, target.provider_model) is not None:
                    continue
                if fit is None:
                    found = fit_turn(request, settings.models[slug])
                    if not isinstance(found, Fit):
                        break
                    fit = found
                return Plan(step, target, fit, fallback=True)
        return None

    async def _race(self, primary: _Call, twin: _Call) -> Outcome:
        """Both in flight: the outcome of whichever sends content first. One that fails
        before content leaves the turn to the other: the primary's failure is decided by
        the policy table; a hedge is never retried (the walk moves on from the attempt it
        hedged)."""
        try:
            done, _ = await asyncio.wait({primary, twin}, return_when="FIRST_COMPLETED")
            if self.winner is None:
                if primary not in done:
                    return await primary
                outcome = await twin
                return outcome if self.winner is twin else MoveOn()
            await asyncio.wait({primary, twin})
        except asyncio.CancelledError:
            # In the order they started: the report lists the primary first.
            await _cancel(primary)
            await _cancel(twin)
            raise
        # Content was sent: the winner's attempt ends the turn either way (locked).
        return self.winner.result()


async def _cancel(task: _Call) -> None:
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
