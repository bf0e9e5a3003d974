"""One attempt: one model on one provider, reserved, called, concluded and reported.

    Attempts.attempt(plan)
      prepare ── the fleet's probe slot (half-open breaker), then the tenant's budget
      call ───── the adapter's events, under the first-byte and then the total timeout
               ├─ conclude: the charge settled or released, the breaker told
               └─ report: one row of the turn's report

An attempt never ends the turn itself: its `Outcome` tells the walk (`worker.turn.chain`)
what to do next. Hedging (`worker.turn.race.HedgedAttempts`) wraps `Attempts` with the
same `attempt`, as an httpx transport wraps another.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rediskit import backoff_s
from worker.adapters import Adapter, ProviderCall, reasoning_family
from worker.adapters.base import Completion, TextDelta, UsageSoFar
from worker.adapters.left_out import left_out
from worker.adapters.output_limit import billable_output_tokens
from worker.adapters.reasoning_models import reasons
from worker.errors import FirstByteTimeout, MalformedResponse, ProviderError, ResponseTimeout
from worker.guard.protocol import Availability, Charge, Conclusion, Guard, Refusal, Signal, Target
from worker.observability import tracing
from worker.settings import ModelSettings, Settings
from worker.turn.capability import Fit
from worker.turn.outcome import (
    Answered,
    Degrade,
    Failed,
    Flight,
    MoveOn,
    Outcome,
    Plan,
    Refused,
    Retry,
)
from worker.turn.output import read_output
from worker.turn.policy import Decision, rule_for
from worker.turn.pricing import cost_of, reservation_micros
from worker.turn.reasoning import carried_reasoning
from worker.turn.report import WITHHELD, TurnReport
from worker.turn.retry import retry_delay_s
from worker.turn.tokens import text_tokens
from worker.types import Message, Tool, TurnRequest

__all__ = ["Attempter", "Attempts", "OnText"]

OnText = Callable[[str], None]
_HELD_FIRST_WAIT_S = 0.05
_HELD_MAX_WAIT_S = 1.0


class Attempter(Protocol):
    """What the walk (`worker.turn.chain`) calls each attempt through: `Attempts`, or a
    wrapper of it (`worker.turn.race.HedgedAttempts`)."""

    async def attempt(self, plan: Plan) -> Outcome:
        """Prepare and call `plan`."""
        ...

    async def aclose(self) -> None:
        """The turn is ending: stop what is in flight, give back what is held unused."""
        ...


class Attempts:
    """The attempts of one turn, each reserved, called, concluded and reported."""

    def __init__(
        self,
        settings: Settings,
        adapters: Mapping[str, Adapter],
        guard: Guard,
        request: TurnRequest,
        report: TurnReport,
        *,
        deadline: float,
        rng: random.Random,
        on_text: OnText | None = None,
    ) -> None:
        self.settings = settings
        self.adapters = adapters
        self.guard = guard
        self.request = request
        self.report = report
        self.deadline = deadline
        self.rng = rng
        self.on_text = on_text
        self.calls = 0
        self._run_id = secrets.token_hex(4)
        # Every charge of the turn carries the same labels, so its spend is attributed alike.
        self._labels = settings.budgets.labels(request.metadata)
        # The first attempt's reservation, made by `admit` before the fleet view was
        # known (`first`); set aside once that attempt is skipped (`_unused`), and given
        # back with the next reservation (one round trip) or when the turn ends.
        self._first: tuple[Target, Charge] | None = None
        self._pending: Charge | None = None
        self._unused: Charge | None = None

    # -- money --------------------------------------------------------------------------

    def charge(self, target: Target, fit: Fit, fallback: bool) -> Charge:
        """The reservation of an attempt: its expected cost by the fleet's evidence, and its
        worst case (every output token it may be billed for: `max_tokens`, and on Gemini
        2.x the thinking budget beside it)."""
        model = self.settings.models[target.model]
        provider = self.settings.providers[target.provider]
        most_tokens = billable_output_tokens(provider, self._provider_call(target, (), ()))
        expected_tokens = self.guard.output_tokens(target.model, most_tokens)
        margin = self.settings.budgets.input_margin_pct

        def cost(output_tokens: int) -> int:
            return reservation_micros(
                fit.input_tokens, output_tokens, model, input_margin_pct=margin
            )

        # One id per provider call: a turn run again after its worker died makes new calls,
        # which the provider bills again.
        charge_id = f"{self.request.turn_id}:{self._run_id}:{self.calls}"
        tenant = self.request.tenant_id
        return Charge(
            charge_id,
            tenant,
            target.provider,
            cost(expected_tokens),
            fallback,
            cost(most_tokens),
            self._labels,
        )

    def first(self, target: Target, fit: Fit) -> Charge:
        """The primary's reservation, for `Guard.admit` to make with its look at the fleet."""
        charge = self.charge(target, fit, False)
        self._first = (target, charge)
        return charge

    def first_reserved(self) -> None:
        """The first reservation was granted: the first attempt made will use it."""
        if self._first is not None:
            self._pending = self._first[1]

    def set_aside_first(self) -> None:
        """The first planned attempt will not happen: its reservation is to be given back."""
        if self._pending is not None:
            self._unused, self._pending = self._pending, None

    def skip(self, target: Target, reason: str, detail: str | None = None) -> None:
        """Report a target skipped without a call (so the first planned attempt, if it
        was still to come, will not happen)."""
        self.set_aside_first()
        self.report.skip(target, reason, detail)

    async def wait_for_holds(self, charge: Charge, refusal: Refusal | None) -> Refusal | None:
        """A budget that attempts in flight hold frees up as they settle, usually for
        less than they held: ask again, for `held_wait_s` at most, and no later than
        leaves the call its first-byte timeout before the deadline (a call granted later
        could not answer, and would be charged all the same)."""
        loop = asyncio.get_running_loop()
        first_byte_s = self.settings.providers[charge.provider].first_byte_timeout_s
        until = min(self.deadline - first_byte_s, loop.time() + self.settings.budgets.held_wait_s)
        waits = 0
        while refusal is not None and refusal.held:
            pause = backoff_s(
                waits, first_s=_HELD_FIRST_WAIT_S, cap_s=_HELD_MAX_WAIT_S, rng=self.rng
            )
            if loop.time() + pause >= until:
                break
            await asyncio.sleep(pause)
            waits += 1
            refusal = await self.guard.reserve(charge)
        return refusal

    async def try_reserve(self, plan: Plan) -> Flight | None:
        """Reserve `plan` once, not waiting on holds, a refusal not reported (a hedge)."""
        charge = self.charge(plan.target, plan.fit, plan.fallback)
        return Flight(plan, charge) if await self.guard.reserve(charge) is None else None

    async def release(self, flight: Flight) -> None:
        """Give back the reservation of a flight that was never called."""
        await self.guard.conclude(Conclusion(flight.plan.target, flight.charge))

    async def aclose(self) -> None:
        self.set_aside_first()
        if self._unused is not None and self._first is not None:
            unused, self._unused = self._unused, None
            await self.guard.conclude(Conclusion(self._first[0], unused))

    # -- one attempt --------------------------------------------------------------------

    async def attempt(self, plan: Plan) -> Outcome:
        """Prepare `plan`, then call it (`Attempter`)."""
        flight = await self.prepare(plan)
        return flight if not isinstance(flight, Flight) else await self.call(flight)

    async def prepare(self, plan: Plan) -> Flight | MoveOn | Refused:
        """The probe slot when the breaker is half-open, then the reservation."""
        target = plan.target
        holder = f"{self.request.turn_id}:{self.calls}" if plan.probe else None
        if holder is not None and not await self.guard.acquire_probe(target, holder):
            self.skip(target, Refusal.BREAKER_HALF_OPEN, "another worker holds the probe")
            return MoveOn()
        if self._pending is not None:
            # Reserved by `admit`: every skip before the first call set it aside, so it is
            # this target's.
            charge, self._pending = self._pending, None
            return Flight(plan, charge, holder)
        charge = self.charge(target, plan.fit, plan.fallback)
        unused, self._unused = self._unused, None
        refusal = await self.guard.reserve(charge, replacing=unused)
        refusal = await self.wait_for_holds(charge, refusal)
        if refusal is None:
            return Flight(plan, charge, holder)
        if holder is not None:
            await self.guard.conclude(Conclusion(target, charge, holder=holder))
        if refusal is not Refusal.KILL_SWITCH:
            self.report.skip(target, refusal)
        return Refused(refusal)

    async def call(self, flight: Flight) -> Outcome:
        """Call once: conclude, report, and say what the walk does next."""
        plan, target, charge = flight.plan, flight.plan.target, flight.charge
        model = self.settings.models[target.model]
        self.calls += 1
        started = time.monotonic()
        completion: Completion | None = None
        try:
            # The call's span (a no-op while tracing is off) records how it failed, if it did.
            gen_ai_provider = self.settings.providers[target.provider].gen_ai_provider
            with tracing.attempt(target, self.request, plan.retry_index, gen_ai_provider) as span:
                completion = await self._send(flight)
                span.answered(completion.usage, completion.finish_reason, completion.model)
                parsed = self._read(completion)
        except ProviderError as error:
            rule = rule_for(error)
            # A call the provider may bill without content (a first-byte timeout) is charged
            # its expected cost, or its worst case when it may be writing unseen; one cut
            # after content what it produced, as the provider bills it; one that answered
            # (in the wrong shape) what it cost.
            billed = charge.micros if rule.billed or self.report.locked else None
            if flight.content:
                billed = self._produced_micros(flight)
            elif rule.billed and self.writes_unseen(flight.plan.target, model):
                # Billed with nothing to count (a timeout, or a body that broke after its
                # status): a whole answer, or thinking, may have been written unseen.
                billed = charge.worst
            if completion is not None:
                billed = cost_of(completion.usage, model)
            elif flight.usage_seen is not None:
                billed = max(billed or 0, cost_of(flight.usage_seen, model))
            await self.guard.conclude(
                Conclusion(
                    target,
                    charge,
                    signal=rule.signal,
                    cost_micros=billed,
                    holder=flight.holder,
                    retry_after_s=error.retry_after_s,
                )
            )
            latency_s = time.monotonic() - started
            self.report.error(target, error, latency_s, plan.retry_index, billed)
            return self._next(error, rule.decision, plan, probe=flight.holder is not None)
        except asyncio.CancelledError:
            await asyncio.shield(self._cut(flight, time.monotonic() - started))
            raise
        cost = cost_of(completion.usage, model)
        await self.guard.conclude(
            Conclusion(
                target,
                charge,
                signal=Signal.SUCCESS,
                cost_micros=cost,
                holder=flight.holder,
                output_tokens=completion.usage.output_tokens,
            )
        )
        self.report.answered(
            target,
            completion,
            step=plan.step,
            fit=plan.fit,
            cost_micros=cost,
            latency_s=time.monotonic() - started,
            retry_index=plan.retry_index,
            parsed=parsed,
        )
        return Answered()

    def _read(self, completion: Completion) -> Any:
        """The answer as the JSON the turn asked for: nothing to read in a tool call, a
        refusal, or an answer the provider's filter withheld (not a fallback case)."""
        if completion.tool_calls or completion.finish_reason in WITHHELD:
            return None
        return read_output(completion.text, self.request.response_format)

    async def _cut(self, flight: Flight, latency_s: float) -> None:
        """Cut short in flight. Its hedged twin answered: no output was sent, its prompt is
        charged. Otherwise (the deadline, a cancel, a shutdown) the provider may bill it all
        the same: what it streamed, or, when it may be writing what nothing shows (a whole
        answer not streamed, or thinking), its worst case. A probe that never answered in
        time is the breaker's failure: the break grows, and the slot is free at once for the
        next probe."""
        target, charge, holder = flight.plan.target, flight.charge, flight.holder
        if flight.cut_micros is not None:
            end = Conclusion(target, charge, cost_micros=flight.cut_micros, holder=holder)
        else:
            charged = charge.micros
            if flight.content:
                charged = self._produced_micros(flight)
            elif self.writes_unseen(target, self.settings.models[target.model]):
                charged = charge.worst
            if flight.usage_seen is not None:
                charged = max(
                    charged, cost_of(flight.usage_seen, self.settings.models[target.model])
                )
            self.report.interrupted(target, latency_s, flight.plan.retry_index, charged)
            signal = Signal.FAILURE if holder is not None else None
            end = Conclusion(target, charge, signal, charged, holder)
        await self.guard.conclude(end)

    def writes_unseen(self, target: Target, model: ModelSettings) -> bool:
        """Whether a call may be writing output that nothing shows until it ends: a whole
        answer not streamed, or thinking."""
        return not self.request.stream or _thinks(target, model)

    def _produced_micros(self, flight: Flight) -> int:
        """What a call cut after content is charged, the provider's usage unknown: its
        input and the output it streamed, each counted as a reservation counts it (an
        upper bound), and never more than its worst case. A model that reasons may have
        been billed for thinking it never streamed: it is charged its worst case."""
        plan = flight.plan
        model = self.settings.models[plan.target.model]
        if _thinks(plan.target, model):
            return flight.charge.worst
        output_tokens = min(self.request.max_tokens, text_tokens("".join(flight.streamed)))
        if flight.usage_seen is not None:
            # Thinking the provider reported, billed beside the answer's tokens.
            output_tokens += flight.usage_seen.reasoning_tokens
        margin = self.settings.budgets.input_margin_pct
        return reservation_micros(
            plan.fit.input_tokens, output_tokens, model, input_margin_pct=margin
        )

    def _next(
        self, error: ProviderError, decision: Decision, plan: Plan, *, probe: bool
    ) -> Outcome:
        """The policy table's decision for a failed attempt."""
        if self.report.locked:
            return Failed(error.code, error)
        if decision is Decision.DEGRADE:
            return Degrade(Availability.EXHAUSTED.value, error)
        if decision in (Decision.FAIL, Decision.STOP):
            return Failed(error.code, error)
        if decision is Decision.LARGER_WINDOW:
            return MoveOn(min_window=self.settings.models[plan.target.model].context_window + 1)
        delay = retry_delay_s(
            error,
            decision,
            retry_index=plan.retry_index,
            settings=self.settings.retry,
            remaining_s=self.deadline - asyncio.get_running_loop().time(),
            rng=self.rng,
        )
        # A failed probe has just re-opened the breaker: leave that model alone.
        return MoveOn() if delay is None or probe else Retry(delay)

    def _provider_call(
        self, target: Target, messages: tuple[Message, ...], tools: tuple[Tool, ...]
    ) -> ProviderCall:
        request, model = self.request, self.settings.models[target.model]
        return ProviderCall(
            model_id=target.provider_model,
            messages=messages,
            tools=tools,
            max_tokens=request.max_tokens,
            stream=request.stream,
            thinking_budget_tokens=model.thinking_budget_tokens,
            tool_choice=request.tool_choice,
            response_format=request.response_format,
            temperature=request.temperature,
            top_p=request.top_p,
            stop=request.stop,
            seed=request.seed,
            reasoning_effort=request.reasoning_effort,
            parallel_tool_calls=request.parallel_tool_calls,
            reasoning=reasons(target.provider_model, model.reasoning),
        )

    async def _send(self, flight: Flight) -> Completion:
        """One HTTP call, bounded by the first-byte timeout and then the total timeout."""
        target, fit = flight.plan.target, flight.plan.fit
        provider = self.settings.providers[target.provider]
        reasoning = reasons(target.provider_model, self.settings.models[target.model].reasoning)
        # Only the reasoning this target can read back travels; the rest is counted.
        family = reasoning_family(provider, target.provider_model, reasoning=reasoning)
        messages, reasoning_left_out = carried_reasoning(fit.messages, family)
        call = self._provider_call(target, messages, fit.tools)
        self.report.carrying(target, reasoning_left_out, left_out(provider.wire, call))
        loop = asyncio.get_running_loop()
        total_at = loop.time() + provider.total_timeout_s
        events = self.adapters[target.provider].send(call)
        try:
            async with asyncio.timeout(provider.first_byte_timeout_s) as limit:
                async for event in events:
                    if isinstance(event, UsageSoFar):
                        flight.usage_seen = event.usage
                        continue
                    if not self.report.locked:
                        # First content: from now on only the total timeout applies.
                        limit.reschedule(total_at)
                        if flight.on_content is not None:
                            flight.on_content()
                    if isinstance(event, Completion):
                        return event
                    flight.content = True
                    self.report.lock()
                    if isinstance(event, TextDelta):
                        flight.streamed.append(event.text)
                        if self.on_text is not None:
                            self.on_text(event.text)
                    else:
                        # A new call's name on a line of its own: not one run with the last.
                        name = f"\n{event.name}\n" if event.name else ""
                        flight.streamed.append(name + event.arguments)
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


def _thinks(target: Target, model: ModelSettings) -> bool:
    """Whether calls of `model` may be billed for thinking they never stream (its
    `reasoning` setting, else what its id says)."""
    return reasons(target.provider_model, model.reasoning) or (
        model.thinking_budget_tokens is not None
    )
