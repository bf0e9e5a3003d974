"""The breakers' words and the guard's: a fleet view for the chain, entries for the breakers.

`view` reads what `breakers` says about the chain's targets (the kill switch, each model
and vendor breaker, cooldowns, exhausted accounts) as one `Availability` per target;
`entries` turns an attempt's `Conclusion` into what the breakers and cooldowns record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import structlog

import breakers
from worker.guard.protocol import Availability, Conclusion, FleetView, Signal, Target
from worker.guard.stores import model_scope, vendor_scope

__all__ = ["entries", "log_transitions", "scopes", "view"]

log = structlog.get_logger("relevo.guard")

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


def scopes(targets: Sequence[Target]) -> list[str]:
    names: dict[str, None] = {}
    for target in targets:
        names[model_scope(target)] = None
        names[vendor_scope(target)] = None
    return list(names)


def view(state: breakers.FleetState, targets: Sequence[Target]) -> FleetView:
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


def entries(end: Conclusion) -> list[breakers.Entry]:
    """What the breakers and the cooldowns are told of an attempt that ended."""
    target, signal, holder = end.target, end.signal, end.holder
    entries: list[breakers.Entry] = []
    if signal is not None or holder is not None:
        model, vendor = _BREAKER_VERDICT[signal] if signal else _NEUTRAL
        entries += [
            breakers.Outcome(model_scope(target), model, holder),
            breakers.Outcome(vendor_scope(target), vendor, holder),
        ]
    if signal is Signal.RATE_LIMITED:
        entries.append(breakers.Cooldown(target.provider, target.provider_model, end.retry_after_s))
    elif signal is Signal.MODEL_GONE:
        entries.append(breakers.Gone(target.provider, target.provider_model))
    elif signal is Signal.EXHAUSTED:
        # Until the quota resets when the provider said when, else the configured TTL.
        entries.append(breakers.Exhausted(target.provider, end.retry_after_s))
    elif signal is Signal.MODEL_EXHAUSTED:
        entries.append(
            breakers.Exhausted(target.provider, end.retry_after_s, model=target.provider_model)
        )
    return entries


def log_transitions(transitions: Sequence[breakers.Transition]) -> None:
    for transition in transitions:
        break_s = transition.break_s
        log.warning(
            f"breaker.{transition.kind}",
            scope=transition.scope,
            break_s=None if break_s is None or math.isinf(break_s) else round(break_s, 3),
        )
