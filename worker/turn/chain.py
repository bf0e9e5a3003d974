"""The fallback chain: one turn, a short ordered list of models, one deadline.

    Chain.run ─► _Walk.result ─► _Walk.admitted: admit (the fleet's view, the first
                 │  reservation), then the attempter, chosen once: plain or hedged
                 └─ _Walk.walk: for each model, for each provider serving it:
                      fit (worker.turn.capability) ─► skip what the fleet says is sick
                      ─► _Walk.attempt ─► Attempter.attempt (worker.turn.attempt)
                      ─► adapter.send
                      ─► the outcome: answered, retry once (worker.turn.retry), move on,
                         fail, or degrade (worker.turn.policy)

Once content has streamed the turn is locked to that model. The messages and the system
prompt are never rewritten to mention any of this.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import replace

import httpx
import structlog

from worker.adapters import Adapter, build_adapter
from worker.errors import DeadlineExceeded, InputError, StoreForbidden
from worker.guard.hedge_book import HedgeBook, hedge_book
from worker.guard.protocol import Availability, Guard, OpenGuard, Refusal, Target
from worker.settings import DEFAULT_CHAIN, Settings
from worker.turn.attempt import Attempter, Attempts, OnText
from worker.turn.capability import INCAPABLE, Fit, Unfit, fit_turn, wire_unfit
from worker.turn.intake import turn_time_s
from worker.turn.outcome import (
    Answered,
    Degrade,
    Failed,
    MoveOn,
    Outcome,
    Plan,
    Refused,
    Retry,
)
from worker.turn.race import HedgedAttempts
from worker.turn.report import TurnReport
from worker.turn.routing import CHAIN_NOT_ALLOWED, UNKNOWN_CHAIN, check_chain, routed
from worker.turn.stand_in import cheaper_answer, uses_cheaper_model
from worker.types import TurnRequest, TurnResult

__all__ = ["Chain"]

log = structlog.get_logger("relevo.chain")


class Chain:
    """Runs turns through the configured chain of models."""

    def __init__(
        self,
        settings: Settings,
        adapters: Mapping[str, Adapter],
        *,
        guard: Guard | None = None,
        rng: random.Random | None = None,
        hedges: HedgeBook | None = None,
    ) -> None:
        self.settings = settings
        self.adapters = adapters
        self.guard: Guard = guard or OpenGuard()
        self.rng = rng or random.Random()
        # The evidence and budget hedged attempts use (`worker.turn.race`), when enabled.
        self.hedges: HedgeBook | None = None
        if any(settings.hedged(chain) for chain in (settings.chain, *settings.chains.values())):
            self.hedges = hedges or hedge_book(settings, self.guard)
        self.gen_ai_providers = {
            name: provider.gen_ai_provider for name, provider in settings.providers.items()
        }
        # The settings are frozen: each model's targets are the same for every turn.
        self.targets = {
            slug: tuple(Target(slug, model.vendor, s.provider, s.model_id) for s in model.serve)
            for slug, model in settings.models.items()
        }

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        client: httpx.AsyncClient,
        *,
        guard: Guard | None = None,
        hedges: HedgeBook | None = None,
    ) -> Chain:
        """A chain whose adapters share one HTTP client."""
        adapters = {name: build_adapter(p, client) for name, p in settings.providers.items()}
        return cls(settings, adapters, guard=guard, hedges=hedges)

    async def run(
        self, request: TurnRequest, *, on_text: OnText | None = None, deadline: float | None = None
    ) -> TurnResult:
        """Run one turn, ending by `deadline` (the event loop's time; by default its
        `turn_time_s` from now). Always returns a result; caller cancellation propagates."""
        if deadline is None:
            time_s = turn_time_s(request, self.settings.turn_deadline_s)
            deadline = asyncio.get_running_loop().time() + time_s
        routed_request, refused = routed(request, await self.guard.route(request.tenant_id))
        return await _Walk(self, routed_request, on_text, deadline, refused, sent=request).result()


class _Walk:
    """One turn walking the chain: the fleet's admission, then models and providers in
    order until an attempt's outcome ends the turn."""

    def __init__(
        self,
        chain: Chain,
        request: TurnRequest,
        on_text: OnText | None,
        deadline: float,
        refused: InputError | None = None,
        *,
        sent: TurnRequest,
    ) -> None:
        """`deadline`: when the turn ends, on the event loop's clock; `refused`: the
        turn's chain is one its tenant may not use; `sent`: the turn as it was sent, what
        a hold or a hand-off keeps (the tenant's route applies again when it runs)."""
        self.chain = chain
        self.refused = refused
        self.kept = sent
        self.settings = chain.settings
        self.request = request
        # The chain the turn named; None for one this worker has not configured.
        self.route = self.settings.chain_named(request.chain)
        route = self.route or self.settings.chain
        self.models = route.models
        self.hedged = self.settings.hedged(route)
        strict = self.settings.worker.oldest_release == "0.1.0"
        self.report = TurnReport(
            request,
            primary_model=route.models[0],
            gen_ai_providers=chain.gen_ai_providers,
            left_out_field=not strict,
            chain=request.chain or (None if strict else DEFAULT_CHAIN),
        )
        self.degradation = self.settings.degradation_for(route)
        self.attempts = Attempts(
            chain.settings,
            chain.adapters,
            chain.guard,
            request,
            self.report,
            deadline=deadline,
            rng=chain.rng,
            on_text=on_text,
        )
        # How the walk makes each attempt: as it is, or hedged; chosen once, when admitted.
        self.attempter: Attempter | None = None

    async def result(self) -> TurnResult:
        """The turn's result, whatever stopped it."""
        if self.refused is not None:
            return self.report.failed(CHAIN_NOT_ALLOWED, self.refused)
        if self.route is None:
            try:
                check_chain(self.request, self.settings.chain_names)
            except InputError as exc:
                return self.report.failed(UNKNOWN_CHAIN, exc)
        try:
            return await self.admitted()
        except StoreForbidden as exc:
            # Fail closed: a worker that may not read the kill switch runs nothing.
            log.error("turn.store_forbidden", turn_id=self.request.turn_id, error=str(exc))
            return self.report.rejected(StoreForbidden.code, exc)
        finally:
            await (self.attempter or self.attempts).aclose()

    async def admitted(self) -> TurnResult:
        """Ask the fleet to admit the turn (and reserve the primary's call), then walk it
        within its deadline."""
        attempts = self.attempts
        every = [t for slug in self.models for t in self.chain.targets[slug]]
        primary = every[0]
        first_fit = fit_turn(self.request, self.settings.models[primary.model])
        first = attempts.first(primary, first_fit) if isinstance(first_fit, Fit) else None
        admission = await self.chain.guard.admit(every, first)
        if first is not None and admission.refusal is None:
            attempts.first_reserved()
        view = admission.view
        if view.kill_switch is not None:
            return await self._reject()
        if admission.refusal is not None and first is not None:
            refusal = await attempts.wait_for_holds(first, admission.refusal)
            if refusal is None:
                attempts.first_reserved()
            if refusal is Refusal.KILL_SWITCH:
                return await self._reject()
            if refusal is not None:
                attempts.skip(primary, refusal)
                return await self._degrade(refusal)
        self.attempter = self._attempter(view.of)
        try:
            async with asyncio.timeout_at(attempts.deadline):
                return await self.walk(self.attempter, view.of, first_fit)
        except TimeoutError:
            error = DeadlineExceeded("the turn's deadline passed")
            return self.report.failed(DeadlineExceeded.code, error)

    def _attempter(self, availability: Callable[[Target], Availability]) -> Attempter:
        """The turn's attempts as they are, or hedged when its chain hedges."""
        if self.chain.hedges is None or not self.hedged:
            return self.attempts
        return HedgedAttempts(
            self.attempts,
            self.chain.hedges,
            targets=self.chain.targets,
            availability=availability,
            models=self.models,
        )

    async def walk(
        self,
        attempter: Attempter,
        availability: Callable[[Target], Availability],
        first_fit: Fit | Unfit,
    ) -> TurnResult:
        """Models and providers in the chain's order, until an attempt's outcome ends it."""
        min_window = 0
        for step, slug in enumerate(self.models):
            model = self.settings.models[slug]
            targets = self.chain.targets[slug]
            # The primary's fit was made for the first reservation: same request, same model.
            fit = first_fit if step == 0 else fit_turn(self.request, model, min_window=min_window)
            if isinstance(fit, Unfit):
                self.attempts.skip(targets[0], fit.reason, fit.detail)
                continue
            for index, target in enumerate(targets):
                wire = self.settings.providers[target.provider].wire
                unfit = wire_unfit(self.request, wire, target.provider_model)
                if unfit is not None:
                    self.attempts.skip(target, unfit.reason, unfit.detail)
                    continue
                state = availability(target)
                if state is Availability.EXHAUSTED:
                    self.attempts.skip(target, state.value)
                    return await self._degrade(state.value)
                if state in (Availability.OPEN, Availability.VENDOR_OPEN, Availability.COOLDOWN):
                    self.attempts.skip(target, state.value)
                    continue
                plan = Plan(
                    step,
                    target,
                    fit,
                    fallback=step > 0 or index > 0,
                    probe=state is Availability.PROBE,
                )
                outcome = await self.attempt(attempter, plan)
                if not isinstance(outcome, MoveOn):
                    return await self._end(outcome)
                if outcome.min_window:
                    min_window = outcome.min_window
                    break
        return self._nothing_answered()

    def _nothing_answered(self) -> TurnResult:
        """Every model was tried or skipped. When none of them could take the turn at all,
        it fails as `incapable`, naming what each lacked, and no provider was called."""
        attempts = self.report.attempts
        if attempts and all(a.error_class == INCAPABLE for a in attempts):
            lacks = "; ".join(dict.fromkeys(f"{a.model}: {a.detail}" for a in attempts))
            return self.report.failed(INCAPABLE, InputError(f"no model can take it ({lacks})"))
        return self.report.exhausted()

    async def attempt(self, attempter: Attempter, plan: Plan) -> Outcome:
        """One model on one provider: a call and at most the configured retries."""
        outcome = await attempter.attempt(plan)
        for retry_index in range(1, self.settings.retry.retries_per_model + 1):
            if not isinstance(outcome, Retry):
                break
            await asyncio.sleep(outcome.delay_s)
            seen = await self._before_retry(plan.target)
            if seen is not None:
                return seen
            outcome = await attempter.attempt(replace(plan, retry_index=retry_index))
        return MoveOn() if isinstance(outcome, Retry) else outcome

    async def _before_retry(self, target: Target) -> Outcome | None:
        """Ask the fleet again before a retry: the breaker may have opened (or the kill
        switch gone on) while the first attempt was out. None: retry."""
        view = (await self.chain.guard.admit([target], None)).view
        if view.kill_switch is not None:
            return Refused(Refusal.KILL_SWITCH)
        state = view.availability.get(target, Availability.AVAILABLE)
        if state is Availability.AVAILABLE:
            return None
        self.attempts.skip(target, state.value, "seen before the retry")
        return MoveOn()

    async def _end(self, outcome: Outcome) -> TurnResult:
        """The result of the attempt that ended the turn."""
        match outcome:
            case Answered():
                return self.report.ok()
            case Failed(reason, error):
                return self.report.failed(reason, error)
            case Refused(Refusal.KILL_SWITCH):
                return await self._reject()
            case Refused(refusal):
                return await self._degrade(refusal)
            case Degrade(reason, error):
                return await self._degrade(reason, error)
        return self.report.exhausted()

    async def _degrade(self, reason: str, error: Exception | None = None) -> TurnResult:
        """Money stopped the turn: no fallback, the configured degradation instead (for a
        budget refusal, maybe one call on the cheaper model: `worker.turn.stand_in`)."""
        plan = self.degradation
        # Once the cheaper model stands in, whatever stops it ends the turn: no second try.
        if uses_cheaper_model(plan, reason) and not self.report.standing_in:
            assert plan.cheaper_model is not None  # checked when the settings were loaded
            targets = self.chain.targets[plan.cheaper_model]
            outcome = await cheaper_answer(self.attempts, targets, reason, plan)
            return await self._end(outcome)
        if plan.action == "handoff":
            payload = self.kept.model_dump_json()
            await self.chain.guard.handoff(
                self.request.tenant_id, self.request.turn_id, reason, payload
            )
        return self.report.degraded(reason, plan, error)

    async def _reject(self) -> TurnResult:
        """The kill switch is on: no call, and the turn is kept for replay."""
        await self.chain.guard.hold(self.request.turn_id, self.kept.model_dump_json())
        return self.report.rejected(Refusal.KILL_SWITCH)
