"""The fallback chain: one turn, a short ordered list of models, one deadline.

For each model in order: check it can do the turn (`worker.turn.capability`), skip what the
fleet says is sick, then for each provider that serves it try once, maybe retry
once (`worker.turn.retry`), and move on as the policy table says (`worker.turn.policy`).
Once content has streamed the turn is locked to that model. The messages and
the system prompt are never rewritten to mention any of this.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx
import structlog

import budgets
from worker.adapters import Adapter, ProviderCall, build_adapter
from worker.adapters.base import Completion, TextDelta
from worker.errors import (
    DeadlineExceeded,
    FirstByteTimeout,
    MalformedResponse,
    ProviderError,
    ResponseTimeout,
    StoreForbidden,
)
from worker.guard.hedging import HedgeBook, hedge_book
from worker.guard.protocol import Availability, Charge, Guard, OpenGuard, Signal, Target
from worker.observability import tracing
from worker.settings import ModelSettings, Settings
from worker.turn.capability import Fit, Unfit, fit_turn
from worker.turn.degrade import cheaper_answer, uses_cheaper_model
from worker.turn.hedge import TurnHedge
from worker.turn.policy import Decision, rule_for
from worker.turn.pricing import cost_of, reservation_micros
from worker.turn.report import TurnReport
from worker.turn.retry import retry_delay_s
from worker.types import TurnRequest, TurnResult

__all__ = ["Chain"]

log = structlog.get_logger("relevo.chain")
OnText = Callable[[str], None]
KILL_SWITCH = "kill_switch"
# Refusals that pass once attempts in flight settle; asked again with a growing pause.
_HELD = frozenset(
    {budgets.RefusalReason.TENANT_BUDGET_HELD, budgets.RefusalReason.FALLBACK_CAP_HELD}
)
_HELD_FIRST_WAIT_S = 0.05
_HELD_MAX_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class _MoveOn:
    """Leave this provider; `min_window` > 0 also leaves every model that small."""

    min_window: int = 0


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
        # The evidence and budget hedged attempts use (`worker.turn.hedge`), when enabled.
        self.hedges: HedgeBook | None = None
        if settings.chain.hedging.enabled:
            self.hedges = hedges or hedge_book(settings, self.guard)
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

    async def run(self, request: TurnRequest, *, on_text: OnText | None = None) -> TurnResult:
        """Run one turn. Always returns a result; caller cancellation propagates."""
        return await _Turn(self, request, on_text).run()


class _Turn:
    """The state of one turn while it walks the chain."""

    def __init__(self, chain: Chain, request: TurnRequest, on_text: OnText | None) -> None:
        self.chain = chain
        self.settings = chain.settings
        self.guard = chain.guard
        self.request = request
        self.on_text = on_text
        self.report = TurnReport(request, primary_model=self.settings.chain.models[0])
        self.calls = 0
        self.run_id = secrets.token_hex(4)
        # The first attempt's reservation, made by `admit` before the fleet view was
        # known; `unused` once that attempt is skipped, given back with the next
        # reservation (one round trip) or when the turn ends.
        self.pending: Charge | None = None
        self.unused: Charge | None = None
        self.primary: Target | None = None
        self.hedge: TurnHedge[TurnResult | _MoveOn | float] | None = None
        budget_s = min(request.deadline_s, self.settings.turn_deadline_s)
        self.deadline = asyncio.get_running_loop().time() + budget_s

    def _charge(self, target: Target, fit: Fit, fallback: bool) -> Charge:
        """The attempt's reservation: its expected cost by the fleet's evidence, and its
        worst case (every `max_tokens`)."""
        model = self.settings.models[target.model]
        max_tokens = self.request.max_tokens
        expected_tokens = self.guard.output_tokens(target.model, max_tokens)

        def cost(output_tokens: int) -> int:
            margin = self.settings.budgets.input_margin_pct
            return reservation_micros(
                fit.input_tokens, output_tokens, model, input_margin_pct=margin
            )

        # One id per provider call: a turn run again after its worker died makes new calls,
        # which the provider bills again.
        charge_id = f"{self.request.turn_id}:{self.run_id}:{self.calls}"
        tenant = self.request.tenant_id
        return Charge(
            charge_id, tenant, target.provider, cost(expected_tokens), fallback, cost(max_tokens)
        )

    async def run(self) -> TurnResult:
        try:
            return await self._run()
        except StoreForbidden as exc:
            # Fail closed: a worker that may not read the kill switch runs nothing.
            log.error("turn.store_forbidden", turn_id=self.request.turn_id, error=str(exc))
            return self.report.rejected(StoreForbidden.code, exc)
        finally:
            if self.hedge is not None:
                await self.hedge.aclose()
            self._skip_first()
            if self.unused is not None and self.primary is not None:
                unused, self.unused = self.unused, None
                await self.guard.conclude(self.primary, unused, signal=None, cost_micros=None)

    async def _run(self) -> TurnResult:
        slugs = self.settings.chain.models
        every = [t for slug in slugs for t in self.chain.targets[slug]]
        primary = self.primary = every[0]
        first_fit = fit_turn(self.request, self.settings.models[primary.model])
        first = self._charge(primary, first_fit, False) if isinstance(first_fit, Fit) else None
        admission = await self.guard.admit(every, first)
        self.pending = first
        view = admission.view
        if view.kill_switch is not None:
            return await self._reject()
        if admission.refusal is not None and first is not None:
            refusal = await self._wait_for_holds(first, admission.refusal)
            if refusal == KILL_SWITCH:
                return await self._reject()
            if refusal is not None:
                self.pending = None
                self.report.skip(primary, refusal)
                return await self._degrade(refusal)
        if self.chain.hedges is not None:
            self.hedge = TurnHedge(
                self.chain.hedges,
                self.settings,
                self.request,
                self.report,
                self.guard,
                targets=self.chain.targets,
                availability=view.of,
                deadline=self.deadline,
                attempt=self._attempt,
                charge=self._charge,
            )
        try:
            async with asyncio.timeout_at(self.deadline):
                return await self._walk(view.of, first_fit)
        except TimeoutError:
            error = DeadlineExceeded("the turn's deadline passed")
            return self.report.failed("deadline_exceeded", error)

    async def _walk(
        self, availability: Callable[[Target], Availability], first_fit: Fit | Unfit
    ) -> TurnResult:
        min_window = 0
        for step, slug in enumerate(self.settings.chain.models):
            model = self.settings.models[slug]
            targets = self.chain.targets[slug]
            # The primary's fit was made for the first reservation: same request, same model.
            fit = first_fit if step == 0 else fit_turn(self.request, model, min_window=min_window)
            if isinstance(fit, Unfit):
                self._skip_first()
                self.report.skip(targets[0], fit.reason, fit.detail)
                continue
            for index, target in enumerate(targets):
                state = availability(target)
                if state is Availability.EXHAUSTED:
                    self._skip_first()
                    self.report.skip(target, state.value)
                    return await self._degrade(state.value)
                if state in (Availability.OPEN, Availability.VENDOR_OPEN, Availability.COOLDOWN):
                    self._skip_first()
                    self.report.skip(target, state.value)
                    continue
                outcome = await self._try(
                    step,
                    target,
                    fit,
                    probe=state is Availability.PROBE,
                    fallback=step > 0 or index > 0,
                )
                if isinstance(outcome, TurnResult):
                    return outcome
                if outcome.min_window:
                    min_window = outcome.min_window
                    break
        return self.report.exhausted()

    async def _try(
        self, step: int, target: Target, fit: Fit, *, probe: bool, fallback: bool
    ) -> TurnResult | _MoveOn:
        """One model on one provider: a call and at most the configured retries."""
        for retry_index in range(self.settings.retry.retries_per_model + 1):
            if retry_index > 0 and (moved := await self._before_retry(target)) is not None:
                return moved
            holder = f"{self.request.turn_id}:{self.calls}" if probe else None
            if holder is not None and not await self.guard.acquire_probe(target, holder):
                self._skip_first()
                self.report.skip(target, "breaker_half_open", "another worker holds the probe")
                return _MoveOn()
            charge = await self._reserve(target, fit, fallback)
            if isinstance(charge, TurnResult):
                return charge
            attempt = self._attempt if self.hedge is None else self.hedge.attempt
            outcome = await attempt(
                step, target, fit, charge, holder=holder, retry_index=retry_index
            )
            if not isinstance(outcome, float):
                return outcome
            await asyncio.sleep(outcome)
        return _MoveOn()

    async def _before_retry(self, target: Target) -> TurnResult | _MoveOn | None:
        """Ask the fleet again before a retry: the breaker may have opened (or the kill
        switch gone on) while the first attempt was out. None: retry."""
        view = (await self.guard.admit([target], None)).view
        if view.kill_switch is not None:
            return await self._reject()
        state = view.availability.get(target, Availability.AVAILABLE)
        if state is Availability.AVAILABLE:
            return None
        self.report.skip(target, state.value, "seen before the retry")
        return _MoveOn()

    async def _reserve(self, target: Target, fit: Fit, fallback: bool) -> Charge | TurnResult:
        """This attempt's reservation, or the degraded result when the budget refuses it."""
        if self.pending is not None:
            # Reserved by `admit`: every skip before the first call set it aside,
            # so it is this target's.
            charge, self.pending = self.pending, None
            return charge
        charge = self._charge(target, fit, fallback)
        unused, self.unused = self.unused, None
        refusal = await self._wait_for_holds(
            charge, await self.guard.reserve(charge, replacing=unused)
        )
        if refusal is None:
            return charge
        if refusal == KILL_SWITCH:
            return await self._reject()
        self.report.skip(target, refusal)
        return await self._degrade(refusal)

    async def _wait_for_holds(self, charge: Charge, refusal: str | None) -> str | None:
        """A budget that attempts in flight hold frees up as they settle, usually for
        less than they held: ask again, for `held_wait_s` at most, and no later than
        leaves the call its first-byte timeout before the deadline (a call granted later
        could not answer, and would be charged all the same)."""
        loop = asyncio.get_running_loop()
        first_byte_s = self.settings.providers[charge.provider].first_byte_timeout_s
        until = min(self.deadline - first_byte_s, loop.time() + self.settings.budgets.held_wait_s)
        delay_s = _HELD_FIRST_WAIT_S
        while refusal in _HELD:
            pause = self.chain.rng.uniform(delay_s / 2, delay_s)
            if loop.time() + pause >= until:
                break
            await asyncio.sleep(pause)
            delay_s = min(2 * delay_s, _HELD_MAX_WAIT_S)
            refusal = await self.guard.reserve(charge)
        return refusal

    async def _degrade(self, reason: str, error: Exception | None = None) -> TurnResult:
        """Money stopped the turn: no fallback, the configured degradation instead (for a
        budget refusal, maybe one call on the cheaper model: `worker.turn.degrade`)."""
        plan = self.settings.degradation
        # Once the cheaper model stands in, whatever stops it ends the turn: no second try.
        if uses_cheaper_model(plan, reason) and not self.report.standing_in:
            return await cheaper_answer(self, reason)
        if plan.action == "handoff":
            payload = self.request.model_dump_json()
            await self.guard.handoff(self.request.tenant_id, self.request.turn_id, reason, payload)
        return self.report.degraded(reason, plan, error)

    async def _reject(self) -> TurnResult:
        """The kill switch is on: no call, and the turn is kept for replay."""
        await self.guard.hold(self.request.turn_id, self.request.model_dump_json())
        return self.report.rejected(KILL_SWITCH)

    async def _attempt(
        self,
        step: int,
        target: Target,
        fit: Fit,
        charge: Charge,
        *,
        holder: str | None,
        retry_index: int,
    ) -> TurnResult | _MoveOn | float:
        """Call once; the result, where to go next, or how long to wait before a retry."""
        model = self.settings.models[target.model]
        self.calls += 1
        started = time.monotonic()
        try:
            # The call's span (a no-op while tracing is off) records how it failed, if it did.
            with tracing.attempt(target, self.request, retry_index) as span:
                completion = await self._call(target, fit)
                span.answered(completion.usage, completion.finish_reason)
        except ProviderError as error:
            rule = rule_for(error)
            # A call the provider may bill (it timed out, or streamed and broke) is charged
            # at its reservation: what it really cost is not known.
            billed = charge.micros if rule.billed or self.report.locked else None
            await self.guard.conclude(
                target,
                charge,
                signal=rule.signal,
                cost_micros=billed,
                holder=holder,
                retry_after_s=error.retry_after_s,
            )
            self.report.error(target, error, time.monotonic() - started, retry_index, billed)
            return await self._after(
                error, rule.decision, model, retry_index, probe=holder is not None
            )
        except asyncio.CancelledError:
            # Cut short in flight (deadline, shutdown): the provider may bill it all the same.
            # Cut because its hedged twin answered: no output was sent, its prompt is charged.
            cost = self.hedge.lost_cost() if self.hedge is not None else None
            if cost is None:
                cost = charge.micros
                self.report.interrupted(target, time.monotonic() - started, retry_index, cost)
            await asyncio.shield(self.guard.conclude(target, charge, signal=None, cost_micros=cost))
            raise
        cost = cost_of(completion.usage, model)
        await self.guard.conclude(
            target,
            charge,
            signal=Signal.SUCCESS,
            cost_micros=cost,
            holder=holder,
            output_tokens=completion.usage.output_tokens,
        )
        self.report.answered(
            target,
            completion,
            step=step,
            fit=fit,
            cost_micros=cost,
            latency_s=time.monotonic() - started,
            retry_index=retry_index,
        )
        return self.report.ok()

    async def _after(
        self,
        error: ProviderError,
        decision: Decision,
        model: ModelSettings,
        retry_index: int,
        *,
        probe: bool,
    ) -> TurnResult | _MoveOn | float:
        """The policy table's decision for a failed attempt, applied."""
        if self.report.locked:
            return self.report.failed(error.code, error)
        if self.hedge is not None and self.hedge.decides_nothing():
            return _MoveOn()
        if decision is Decision.DEGRADE:
            return await self._degrade("provider_quota_exhausted", error)
        if decision in (Decision.FAIL, Decision.STOP):
            return self.report.failed(error.code, error)
        if decision is Decision.LARGER_WINDOW:
            return _MoveOn(min_window=model.context_window + 1)
        delay = retry_delay_s(
            error,
            decision,
            retry_index=retry_index,
            settings=self.settings.retry,
            remaining_s=self.deadline - asyncio.get_running_loop().time(),
            rng=self.chain.rng,
        )
        # A failed probe has just re-opened the breaker: leave that model alone.
        return _MoveOn() if delay is None or probe else delay

    async def _call(self, target: Target, fit: Fit) -> Completion:
        """One HTTP call, bounded by the first-byte timeout and then the total timeout."""
        provider = self.settings.providers[target.provider]
        call = ProviderCall(
            model_id=target.provider_model,
            messages=fit.messages,
            tools=fit.tools,
            max_tokens=self.request.max_tokens,
            stream=self.request.stream,
            thinking_budget_tokens=self.settings.models[target.model].thinking_budget_tokens,
        )
        loop = asyncio.get_running_loop()
        total_at = loop.time() + provider.total_timeout_s
        events = self.chain.adapters[target.provider].send(call)
        try:
            async with asyncio.timeout(provider.first_byte_timeout_s) as limit:
                async for event in events:
                    if not self.report.locked:
                        # First content: from now on only the total timeout applies.
                        limit.reschedule(total_at)
                        if self.hedge is not None:
                            self.hedge.claim()
                    if isinstance(event, Completion):
                        return event
                    self.report.lock()
                    if isinstance(event, TextDelta) and self.on_text is not None:
                        self.on_text(event.text)
        except TimeoutError:
            if self.report.locked:
                raise ResponseTimeout(
                    f"no complete answer within {provider.total_timeout_s:g} s"
                ) from None
            raise FirstByteTimeout(
                f"no content within {provider.first_byte_timeout_s:g} s"
            ) from None
        finally:
            await events.aclose()
        raise MalformedResponse("the response ended without a complete answer")

    def _skip_first(self) -> None:
        """The first planned attempt will not happen: its reservation is to be given back."""
        if self.pending is not None:
            self.unused, self.pending = self.pending, None
