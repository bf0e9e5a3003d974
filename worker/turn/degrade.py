"""A turn the tenant's budget refused, answered by `[degradation] cheaper_model`.

Only budget refusals move a turn to the cheaper model. A provider's quota error or an
exhausted account never does: quota and money problems degrade the product instead of
falling back, so for those "cheaper_model" acts as "message".

The cheaper model gets one call, on the first of its providers that the fleet lets serve
it (breakers, cooldowns, exhausted accounts and half-open probes as for any model). It is
reserved, concluded and settled like any attempt of the chain (`_Turn._reserve`,
`_Turn._attempt`). It is charged to the tenant, and reserved as a fallback: it is not the
primary, so the tenant's fallback cap bounds it too. Refused, failed or out of time, the
turn ends with the message and the reason money first stopped it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

import budgets
from worker.guard.protocol import Availability, Charge, Guard, Target
from worker.guard.redis_guard import BUDGET_UNREACHABLE
from worker.settings import DegradationSettings, Settings
from worker.turn.capability import Fit, Unfit, fit_turn
from worker.turn.report import TurnReport
from worker.types import TurnRequest, TurnResult

__all__ = ["CHEAPER_MODEL_REASONS", "Turn", "cheaper_answer", "uses_cheaper_model"]

# The refusals a cheaper model may answer: the tenant's money, never a provider's quota.
CHEAPER_MODEL_REASONS: frozenset[str] = frozenset(
    {
        budgets.RefusalReason.TENANT_BUDGET_EXHAUSTED,
        budgets.RefusalReason.TENANT_BUDGET_HELD,
        budgets.RefusalReason.FALLBACK_CAP_REACHED,
        budgets.RefusalReason.FALLBACK_CAP_HELD,
        budgets.RefusalReason.UNKNOWN_TENANT,
        BUDGET_UNREACHABLE,
    }
)


class _Models(Protocol):
    @property
    def targets(self) -> Mapping[str, tuple[Target, ...]]: ...


class Turn(Protocol):
    """What the cheap attempt uses of a turn (`worker.turn.chain._Turn`, which imports
    this module: a protocol, not an import, keeps the two out of a circle)."""

    @property
    def chain(self) -> _Models: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def request(self) -> TurnRequest: ...
    @property
    def report(self) -> TurnReport: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def deadline(self) -> float: ...
    @property
    def calls(self) -> int: ...
    def _skip_first(self) -> None: ...
    async def _reserve(self, target: Target, fit: Fit, fallback: bool) -> Charge | TurnResult: ...
    async def _reject(self) -> TurnResult: ...
    async def _attempt(
        self,
        step: int,
        target: Target,
        fit: Fit,
        charge: Charge,
        *,
        holder: str | None,
        retry_index: int,
    ) -> object: ...


def uses_cheaper_model(plan: DegradationSettings, reason: str) -> bool:
    """Whether a turn degraded for `reason` tries the cheaper model first."""
    return plan.action == "cheaper_model" and reason in CHEAPER_MODEL_REASONS


async def cheaper_answer(turn: Turn, reason: str) -> TurnResult:
    """The cheaper model's answer (degraded for `reason`), or the message for `reason`."""
    plan = turn.settings.degradation
    assert plan.cheaper_model is not None  # checked when the settings were loaded
    # A reservation still pending was made for the primary: given back, not reused.
    turn._skip_first()
    turn.report.stand_in(reason, plan)
    slug = plan.cheaper_model
    targets = turn.chain.targets[slug]
    fit = fit_turn(turn.request, turn.settings.models[slug])
    if isinstance(fit, Unfit):
        turn.report.skip(targets[0], fit.reason, fit.detail)
        return turn.report.degraded(reason, plan)
    try:
        # A refusal from `admit` comes before the chain's own deadline is set: this one's.
        async with asyncio.timeout_at(turn.deadline):
            return await _one_call(turn, slug, fit, reason)
    except TimeoutError:
        return turn.report.degraded(reason, plan)


async def _one_call(turn: Turn, slug: str, fit: Fit, reason: str) -> TurnResult:
    """At most one call, on the first of the model's providers the fleet lets serve it."""
    targets = turn.chain.targets[slug]
    # The admission looked at the chain's models only: a look of its own, as before a retry.
    view = (await turn.guard.admit(targets, None)).view
    if view.kill_switch is not None:
        return await turn._reject()
    for target in targets:
        state = view.of(target)
        if state not in (Availability.AVAILABLE, Availability.PROBE):
            turn.report.skip(target, state.value)
            continue
        holder = f"{turn.request.turn_id}:{turn.calls}" if state is Availability.PROBE else None
        if holder is not None and not await turn.guard.acquire_probe(target, holder):
            turn.report.skip(target, "breaker_half_open", "another worker holds the probe")
            continue
        # Refused, `_reserve` records the skip and ends the turn: the stand-in makes that the
        # message for `reason`; the kill switch still rejects.
        charge = await turn._reserve(target, fit, fallback=True)
        if isinstance(charge, TurnResult):
            return charge
        # The step is dropped from the result: the cheaper model is no step of the chain.
        outcome = await turn._attempt(0, target, fit, charge, holder=holder, retry_index=0)
        if isinstance(outcome, TurnResult):
            return outcome
        # It failed without ending the turn: no retry, no other provider (one call only).
        break
    return turn.report.degraded(reason, turn.settings.degradation)
