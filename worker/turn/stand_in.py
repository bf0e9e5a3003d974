"""A turn the tenant's budget refused, answered by `[degradation] cheaper_model`.

Only budget refusals move a turn to the cheaper model. A provider's quota error or an
exhausted account never does: quota and money problems degrade the product instead of
falling back, so for those "cheaper_model" acts as "message".

The cheaper model gets one call, on the first of its providers that the fleet lets serve
it (breakers, cooldowns, exhausted accounts and half-open probes as for any model). It is
one attempt like any of the chain's (`worker.turn.attempt`): reserved, concluded and
settled the same way, charged to the tenant, and reserved as a fallback (it is not the
primary, so the tenant's fallback cap bounds it too). Refused, failed or out of time,
the turn ends with the message and the reason money first stopped it.
"""

from __future__ import annotations

import asyncio

from worker.guard.protocol import Availability, Refusal, Target
from worker.settings import DegradationSettings
from worker.turn.attempt import Attempts
from worker.turn.capability import Unfit, fit_turn
from worker.turn.outcome import Degrade, MoveOn, Outcome, Plan, Refused, Retry

__all__ = ["CHEAPER_MODEL_REASONS", "cheaper_answer", "uses_cheaper_model"]

# The refusals a cheaper model may answer: the tenant's money, never a provider's quota.
CHEAPER_MODEL_REASONS: frozenset[str] = frozenset(
    {
        Refusal.TENANT_BUDGET_EXHAUSTED,
        Refusal.TENANT_BUDGET_HELD,
        Refusal.FALLBACK_CAP_REACHED,
        Refusal.FALLBACK_CAP_HELD,
        Refusal.UNKNOWN_TENANT,
        Refusal.BUDGET_UNREACHABLE,
    }
)


def uses_cheaper_model(plan: DegradationSettings, reason: str) -> bool:
    """Whether a turn degraded for `reason` tries the cheaper model first."""
    return plan.action == "cheaper_model" and reason in CHEAPER_MODEL_REASONS


async def cheaper_answer(
    attempts: Attempts, targets: tuple[Target, ...], reason: str, plan: DegradationSettings
) -> Outcome:
    """The cheaper model's one attempt at a turn money stopped for `reason` (`targets`
    are its providers'; `plan` the turn's chain's degradation); whatever does not answer
    ends degraded for `reason`."""
    assert plan.cheaper_model is not None  # checked when the settings were loaded
    # A reservation still pending was made for the primary: given back, not reused.
    attempts.set_aside_first()
    attempts.report.stand_in(reason, plan)
    fit = fit_turn(attempts.request, attempts.settings.models[plan.cheaper_model])
    if isinstance(fit, Unfit):
        attempts.skip(targets[0], fit.reason, fit.detail)
        return Degrade(reason)
    try:
        # A refusal from `admit` comes before the chain's own deadline is set: this one's.
        async with asyncio.timeout_at(attempts.deadline):
            # The admission looked at the chain's models only: a look of its own.
            view = (await attempts.guard.admit(targets, None)).view
            if view.kill_switch is not None:
                return Refused(Refusal.KILL_SWITCH)
            for target in targets:
                state = view.of(target)
                if state not in (Availability.AVAILABLE, Availability.PROBE):
                    attempts.skip(target, state.value)
                    continue
                # The step is dropped from the result: the cheaper model is no step of the
                # chain.
                probe = state is Availability.PROBE
                calls = attempts.calls
                outcome = await attempts.attempt(Plan(0, target, fit, fallback=True, probe=probe))
                if not isinstance(outcome, MoveOn | Retry):
                    return outcome
                if attempts.calls > calls:
                    break  # called, and no answer: no retry, no other provider
    except TimeoutError:
        pass
    return Degrade(reason)
