"""The fleet's shared state on Redis: `breakers` and `budgets` behind the chain's `Guard`.

A healthy turn costs two round trips: `admit` pipelines the breaker check
(kill switch, breakers, cooldowns, exhausted accounts) with the first
attempt's reservation, and `conclude` pipelines the breaker record with the
settlement. Turns that reach the guard in the same loop iteration share those
round trips (`worker.guard.autopipeline`). When Redis cannot be reached, breakers
answer from this process's own (`breakers.ResilientBreakers`) and budgets are
not enforced (logged once): a turn never fails because the shared store is down.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import structlog
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

import breakers
import budgets
from worker.errors import STORE_DOWN, STORE_REFUSED, StoreForbidden
from worker.guard.autopipeline import AutoPipeline
from worker.guard.backlog import Backlog
from worker.guard.protocol import Admission, Availability, Charge, FleetView, Signal, Target
from worker.guard.sizing import OutputSizer
from worker.guard.stores import (
    breaker_store,
    budget_ledger,
    model_scope,
    output_evidence,
    vendor_scope,
)
from worker.settings import Settings

__all__ = ["BUDGET_UNREACHABLE", "RedisGuard", "open_guard"]

# Why a turn degrades when Redis is away and the tenant's offline allowance is spent.
BUDGET_UNREACHABLE = "budget_store_unreachable"

log = structlog.get_logger("relevo.guard")
T = TypeVar("T")
P = ParamSpec("P")


def _fail_closed(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Redis refusing us (password, ACL) is `StoreForbidden`, never a quiet local view."""

    @functools.wraps(method)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except breakers.StoreForbiddenError as exc:
            raise StoreForbidden(str(exc)) from exc

    return guarded


# What the model's breaker and its vendor's breaker are told, per signal of the
# policy table. An overloaded model says nothing about its vendor's other models.
_NEUTRAL = (breakers.Verdict.NEUTRAL, breakers.Verdict.NEUTRAL)
_BREAKER_VERDICT = {
    Signal.SUCCESS: (breakers.Verdict.SUCCESS, breakers.Verdict.SUCCESS),
    Signal.FAILURE: (breakers.Verdict.FAILURE, breakers.Verdict.FAILURE),
    Signal.MODEL_FAILURE: (breakers.Verdict.FAILURE, breakers.Verdict.NEUTRAL),
    Signal.NEUTRAL: _NEUTRAL,
    Signal.RATE_LIMITED: _NEUTRAL,
    Signal.EXHAUSTED: _NEUTRAL,
    Signal.MODEL_EXHAUSTED: _NEUTRAL,
    # A 404 is the caller's configuration, not the model's health: the long skip says it.
    Signal.MODEL_GONE: _NEUTRAL,
}


class RedisGuard:
    """Breakers, cooldowns, kill switch, held turns and budgets, batched per turn."""

    def __init__(
        self,
        redis: Redis,
        circuits: breakers.ResilientBreakers,
        ledger: budgets.Ledger,
        held: breakers.HeldTurns,
        handoffs: budgets.Handoffs,
        *,
        hold_ttl_s: float,
        pipes: AutoPipeline | None = None,
        backlog: Backlog | None = None,
        offline_allowance_micros: int = 0,
        sizer: OutputSizer | None = None,
    ) -> None:
        """`pipes` carries the per-turn round trips (by default, on `redis`); `backlog`
        keeps the spend Redis missed until it lands; while the fleet view is lost, a
        tenant may spend `offline_allowance_micros` in this process before its turns
        degrade; `sizer` sizes reservations by the fleet's evidence (by default, every
        attempt reserves its `max_tokens`)."""
        self.redis = redis
        self.circuits = circuits
        self.ledger = ledger
        self.held = held
        self.handoffs = handoffs
        self.hold_ttl_s = hold_ttl_s
        self.pipes = pipes or AutoPipeline(redis)
        self.backlog = backlog or Backlog()
        self.offline_allowance_micros = offline_allowance_micros
        self.sizer = sizer
        self._budgets_lost = False
        self._scripts_loaded = False
        self._scripts_loading = asyncio.Lock()

    async def _load_scripts(self) -> None:
        """Load the Lua scripts once, lazily: starting a worker never needs Redis."""
        # Concurrent first turns wait for the one load: an EVALSHA sent before it lands
        # gets NOSCRIPT, which would cost it a second round trip.
        async with self._scripts_loading:
            if self._scripts_loaded:
                return
            try:
                await self.circuits.fleet.load_scripts()
                await self.ledger.load_scripts()
            except STORE_DOWN as exc:
                log.warning("guard.scripts_not_loaded", error=type(exc).__name__)
            self._scripts_loaded = True

    @_fail_closed
    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        if not self._scripts_loaded:
            await self._load_scripts()
        scopes = _scopes(targets)
        pairs = [breakers.Pair(t.provider, t.provider_model) for t in targets]
        accounts: list[str | breakers.Pair] = [*sorted({t.provider for t in targets}), *pairs]
        if not self.circuits.fleet_view:
            state = await self.circuits.check(scopes, pairs, accounts)
            if state.fleet_view:
                refusal = await self._reserve_alone(first)
            else:
                refusal = self._offline(first)
            return Admission(_view(state, targets), refusal)
        slot = self.pipes.open()
        pipe = slot.pipe
        parse_state = self.circuits.check_on(pipe, scopes, pairs, accounts)
        parse_charge = self._reserve_on(pipe, first) if first is not None else None
        replies = await slot.send()
        state = await parse_state(replies[0])
        refusal = None
        if parse_charge is not None and first is not None:
            refusal = await self._budget(
                replies[1],
                parse_charge,
                lambda: self._reserve(first),
                lost=lambda: self._offline(first),
            )
        return Admission(_view(state, targets), refusal)

    @_fail_closed
    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> str | None:
        if not self.circuits.fleet_view:
            state = await self.circuits.check(())
            if not state.fleet_view:
                return _kill(state) or self._offline(charge)
            if replacing is not None:
                await self.conclude_charge(replacing, None)
            return _kill(state) or await self._reserve_alone(charge)
        slot = self.pipes.open()
        pipe = slot.pipe
        parse_state = self.circuits.check_on(pipe, ())
        if replacing is not None:
            release = self._settle_on(pipe, replacing, None)
        at = slot.queued
        parse_charge = self._reserve_on(pipe, charge)
        replies = await slot.send()
        killed = _kill(await parse_state(replies[0]))
        if replacing is not None:
            again = replacing
            # A release Redis missed needs no journal: the hold expires by itself.
            await self._budget(
                replies[1], release, lambda: self._settle(again, None), lost=lambda: None
            )
        if killed is not None:
            await self.conclude_charge(charge, None)
            return killed
        return await self._budget(
            replies[at],
            parse_charge,
            lambda: self._reserve(charge),
            lost=lambda: self._offline(charge),
        )

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return max_tokens if self.sizer is None else self.sizer.tokens(model, max_tokens)

    @_fail_closed
    async def acquire_probe(self, target: Target, holder: str) -> bool:
        scopes = (model_scope(target), vendor_scope(target))
        granted = [await self.circuits.acquire_probe(scope, holder) for scope in scopes]
        if all(granted):
            return True
        # Give back a slot taken on one scope when the other refused.
        taken = [breakers.Outcome(s, breakers.Verdict.NEUTRAL, holder) for s in scopes]
        await self.circuits.record(taken)
        return False

    @_fail_closed
    async def conclude(
        self,
        target: Target,
        charge: Charge,
        *,
        signal: Signal | None,
        cost_micros: int | None,
        holder: str | None = None,
        retry_after_s: float | None = None,
        output_tokens: int | None = None,
    ) -> None:
        entries: list[breakers.Entry] = []
        if signal is not None or holder is not None:
            model, vendor = _BREAKER_VERDICT.get(signal, _NEUTRAL) if signal else _NEUTRAL
            entries += [
                breakers.Outcome(model_scope(target), model, holder),
                breakers.Outcome(vendor_scope(target), vendor, holder),
            ]
        if signal is Signal.RATE_LIMITED:
            entries.append(breakers.Cooldown(target.provider, target.provider_model, retry_after_s))
        elif signal is Signal.MODEL_GONE:
            entries.append(breakers.Gone(target.provider, target.provider_model))
        elif signal is Signal.EXHAUSTED:
            # Until the quota resets when the provider said when, else the configured TTL.
            entries.append(breakers.Exhausted(target.provider, retry_after_s))
        elif signal is Signal.MODEL_EXHAUSTED:
            entries.append(
                breakers.Exhausted(target.provider, retry_after_s, model=target.provider_model)
            )
        if not self.circuits.fleet_view:
            if entries:
                _log_transitions(await self.circuits.record(entries))
            self._journal(charge, cost_micros)
            return
        slot = self.pipes.open()
        pipe = slot.pipe
        parse_record = self.circuits.record_on(pipe, entries) if entries else None
        if output_tokens is not None and self.sizer is not None:
            # Its replies sit between the record's and the settlement's: nobody reads them.
            self.sizer.evidence.record_on(pipe, target.model, output_tokens)
        at = slot.queued
        settle = self._settle_on(pipe, charge, cost_micros)
        replies = await slot.send()
        if parse_record is not None:
            _log_transitions(await parse_record(replies[0]))
        await self._budget(
            replies[at],
            settle,
            lambda: self._settle(charge, cost_micros),
            lost=lambda: self._journal(charge, cost_micros),
        )

    async def aclose(self) -> None:
        """Settle what the backlog holds if Redis answers, then close the guard's Redis
        clients (both, when `open_guard` made them)."""
        self.circuits.close()
        if self.sizer is not None:
            await self.sizer.aclose()
        await self.backlog.aclose()
        if self.pipes.redis is not self.redis:
            await self.pipes.redis.aclose()
        await self.redis.aclose()

    async def conclude_charge(self, charge: Charge, cost_micros: int | None) -> None:
        """Settle or release a charge alone (no breaker verdict)."""
        try:
            await self._settle(charge, cost_micros)
        except STORE_DOWN as exc:
            self._lose_budgets(exc)
            self._journal(charge, cost_micros)

    async def hold(self, turn_id: str, payload: str) -> None:
        try:
            await self.held.hold(turn_id, payload)
        except STORE_DOWN as exc:
            log.error("guard.hold_failed", turn_id=turn_id, error=type(exc).__name__)

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        try:
            await self.handoffs.push(tenant, turn_id, reason, payload)
        except STORE_DOWN as exc:
            log.error("guard.handoff_failed", turn_id=turn_id, error=type(exc).__name__)

    # -- budgets ---------------------------------------------------------------

    def _reserve_on(self, pipe: Any, charge: Charge) -> Callable[[Any], object]:
        return self.ledger.reserve_on(
            pipe,
            charge.tenant,
            charge.charge_id,
            provider=charge.provider,
            micros=charge.micros,
            fallback=charge.fallback,
            ttl_s=self.hold_ttl_s,
            worst_micros=charge.worst,
        )

    async def _reserve(self, charge: Charge) -> object:
        return await self.ledger.reserve(
            charge.tenant,
            charge.charge_id,
            provider=charge.provider,
            micros=charge.micros,
            fallback=charge.fallback,
            ttl_s=self.hold_ttl_s,
            worst_micros=charge.worst,
        )

    async def _reserve_alone(self, charge: Charge | None) -> str | None:
        if charge is None:
            return None
        try:
            return _refusal(await self._reserve(charge))
        except STORE_DOWN as exc:
            self._lose_budgets(exc)
            return self._offline(charge)

    def _settle_on(self, pipe: Any, charge: Charge, cost: int | None) -> Callable[[Any], object]:
        if cost is None:
            return self.ledger.release_on(pipe, charge.tenant, charge.charge_id)
        return self.ledger.settle_on(
            pipe,
            charge.tenant,
            charge.charge_id,
            cost,
            provider=charge.provider,
            fallback=charge.fallback,
        )

    async def _settle(self, charge: Charge, cost: int | None) -> object:
        if cost is None:
            return await self.ledger.release(charge.tenant, charge.charge_id)
        return await self.ledger.settle(
            charge.tenant,
            charge.charge_id,
            cost,
            provider=charge.provider,
            fallback=charge.fallback,
        )

    def _journal(self, charge: Charge, cost: int | None) -> None:
        """Keep a settlement Redis missed until it lands: money spent is never forgotten.

        Settling is idempotent per charge id, so one that did land is not charged twice.
        A release is not kept: the hold it would drop expires by itself (`hold_ttl_s`).
        """
        if cost is None:
            return
        self.backlog.add(
            f"spend:{charge.tenant}:{charge.charge_id}",
            "spend",
            lambda: self._settle(charge, cost),
            micros=cost,
            tenant=charge.tenant,
        )

    def _offline(self, charge: Charge | None) -> str | None:
        """While Redis is away: refuse a charge past the tenant's allowance in this process."""
        if charge is None:
            return None
        spent = self.backlog.pending_micros(charge.tenant)
        if spent + charge.micros > self.offline_allowance_micros:
            return BUDGET_UNREACHABLE
        return None

    async def _budget(
        self,
        reply: object,
        parse: Callable[[Any], object],
        again: Callable[[], Awaitable[object]],
        *,
        lost: Callable[[], str | None],
    ) -> str | None:
        """A pipelined budget reply, retried alone once when Redis had forgotten the script;
        `lost()` answers when Redis did not."""
        try:
            if isinstance(reply, NoScriptError):
                await self.ledger.load_scripts()
                outcome = await again()
            elif isinstance(reply, BaseException):
                raise reply
            else:
                outcome = parse(reply)
        except STORE_DOWN as exc:
            self._lose_budgets(exc)
            return lost()
        if self._budgets_lost:
            self._budgets_lost = False
            log.warning("guard.budgets_rejoined")
        return _refusal(outcome)

    def _lose_budgets(self, exc: BaseException) -> None:
        if isinstance(exc, STORE_REFUSED):
            raise StoreForbidden(f"Redis refused this worker: {exc}") from exc
        if not self._budgets_lost:
            self._budgets_lost = True
            log.warning("guard.budgets_unreachable", error=type(exc).__name__)


def open_guard(settings: Settings, redis: Redis | None = None) -> RedisGuard:
    """A guard on the configured Redis (or `redis`); nothing is connected until first use.

    Close it with `aclose()`, which closes a `redis` given here too.
    """
    store = settings.redis
    pipes = None
    if redis is None:
        redis = store.connect_shared()
        # The per-turn round trips get a client of their own, timed per round trip.
        timed = store.connect_shared(timed_by_caller=True)
        pipes = AutoPipeline(timed, timeout_s=store.timeout_s)
    fleet = breaker_store(settings, redis)
    plan = settings.budgets
    sizer = OutputSizer(
        output_evidence(settings, redis),
        percentile=plan.reserve_percentile,
        min_samples=plan.evidence_min_samples,
        refresh_s=plan.evidence_refresh_s,
    )
    return RedisGuard(
        redis,
        breakers.ResilientBreakers(
            fleet, timeout_s=store.timeout_s, rejoin_check_s=store.rejoin_check_s
        ),
        budget_ledger(settings, redis),
        breakers.HeldTurns(redis, namespace=store.namespace),
        budgets.Handoffs(redis, namespace=store.namespace),
        hold_ttl_s=plan.hold_ttl_s,
        pipes=pipes,
        backlog=Backlog(retry_every_s=store.rejoin_check_s),
        offline_allowance_micros=plan.offline_allowance_micros(),
        sizer=sizer,
    )


def _scopes(targets: Sequence[Target]) -> list[str]:
    names: dict[str, None] = {}
    for target in targets:
        names[model_scope(target)] = None
        names[vendor_scope(target)] = None
    return list(names)


def _view(state: breakers.FleetState, targets: Sequence[Target]) -> FleetView:
    killed = state.kill_switch
    availability = {t: _availability(state, t) for t in targets}
    reason = f"{killed.reason} ({killed.who})" if killed else None
    return FleetView(reason, availability)


def _availability(state: breakers.FleetState, target: Target) -> Availability:
    pair = breakers.Pair(target.provider, target.provider_model)
    if state.exhausted.get(target.provider) or state.exhausted.get(pair):
        return Availability.EXHAUSTED
    closed = breakers.ScopeState("", breakers.BreakerState.CLOSED)
    vendor = state.scopes.get(vendor_scope(target), closed)
    model = state.scopes.get(model_scope(target), closed)
    if not vendor.callable:
        return Availability.VENDOR_OPEN
    if not model.callable:
        return Availability.OPEN
    if state.cooldowns.get(pair, 0) > 0:
        return Availability.COOLDOWN
    if breakers.BreakerState.HALF_OPEN in (vendor.state, model.state):
        return Availability.PROBE
    return Availability.AVAILABLE


def _kill(state: breakers.FleetState) -> str | None:
    return "kill_switch" if state.kill_switch is not None else None


def _refusal(outcome: object) -> str | None:
    if isinstance(outcome, budgets.Refusal):
        return str(outcome.reason)
    return None


def _log_transitions(transitions: Sequence[breakers.Transition]) -> None:
    for transition in transitions:
        break_s = transition.break_s
        log.warning(
            f"breaker.{transition.kind}",
            scope=transition.scope,
            break_s=None if break_s is None or math.isinf(break_s) else round(break_s, 3),
        )
