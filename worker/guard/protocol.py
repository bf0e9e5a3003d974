"""What the chain asks of the fleet's shared state, at fixed points of a turn.

One `Guard` answers for breakers, cooldowns, exhausted accounts, the kill
switch and the tenant's budget, so that a Redis-backed guard can batch them:
`admit` (the fleet view and the first attempt's reservation) and `conclude`
(the signal and the settlement) are one round trip each on a healthy turn.

    admit ─► [acquire_probe ─►] [reserve ─►] call ─► conclude ─► … next attempt

What it refuses is named by `Refusal`; what it is told after a call is one `Conclusion`.
`OpenGuard` is the in-process default: nothing is shared, nothing refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import budgets

__all__ = [
    "Admission",
    "Availability",
    "Charge",
    "Conclusion",
    "FleetView",
    "Guard",
    "OpenGuard",
    "Refusal",
    "Signal",
    "Target",
]


class Refusal(StrEnum):
    """Why the fleet's shared state stopped an attempt (or a whole turn) before any call.

    The budget reasons are `budgets.RefusalReason`'s, value for value.
    """

    KILL_SWITCH = "kill_switch"  # a person turned the fleet off: the turn is held
    BREAKER_HALF_OPEN = "breaker_half_open"  # another worker holds the probe slot
    TENANT_BUDGET_EXHAUSTED = budgets.RefusalReason.TENANT_BUDGET_EXHAUSTED.value
    TENANT_BUDGET_HELD = budgets.RefusalReason.TENANT_BUDGET_HELD.value
    FALLBACK_CAP_REACHED = budgets.RefusalReason.FALLBACK_CAP_REACHED.value
    FALLBACK_CAP_HELD = budgets.RefusalReason.FALLBACK_CAP_HELD.value
    UNKNOWN_TENANT = budgets.RefusalReason.UNKNOWN_TENANT.value
    # The store is away and the tenant spent its offline allowance in this process.
    BUDGET_UNREACHABLE = "budget_store_unreachable"

    @property
    def held(self) -> bool:
        """Whether attempts in flight hold what is refused: it may pass once they settle."""
        return self in (Refusal.TENANT_BUDGET_HELD, Refusal.FALLBACK_CAP_HELD)


class Signal(StrEnum):
    """What the breaker and cooldown layer is told about an attempt."""

    SUCCESS = "success"
    FAILURE = "failure"  # the model and its vendor: 5xx, silence, broken connections
    MODEL_FAILURE = "model_failure"  # this model only: overloaded, another model may serve
    NEUTRAL = "neutral"
    RATE_LIMITED = "rate_limited"
    EXHAUSTED = "exhausted"  # the provider account: every model on it
    MODEL_EXHAUSTED = "model_exhausted"  # one model's quota on the account
    MODEL_GONE = "model_gone"  # the provider does not know the model: skip it for long


@dataclass(frozen=True, slots=True)
class Target:
    """One model on one provider: what a breaker or a cooldown is about."""

    model: str
    vendor: str
    provider: str
    provider_model: str


@dataclass(frozen=True, slots=True)
class Charge:
    """One attempt's reservation: its expected cost (`micros`) is held, its worst case
    (`worst_micros`, by default the same) must fit the tenant's overdraft. `labels`
    (`budgets.encode_labels`) attribute its spend, wherever it is charged."""

    charge_id: str
    tenant: str
    provider: str
    micros: int
    fallback: bool
    worst_micros: int | None = None
    labels: str = ""

    @property
    def worst(self) -> int:
        return self.micros if self.worst_micros is None else self.worst_micros


class Availability(StrEnum):
    """What the fleet says about a target before the turn calls it."""

    AVAILABLE = "available"
    PROBE = "probe"  # half-open: call only while holding the fleet's probe slot
    OPEN = "breaker_open"
    VENDOR_OPEN = "vendor_breaker_open"
    COOLDOWN = "cooldown"
    EXHAUSTED = "provider_quota_exhausted"


@dataclass(frozen=True, slots=True)
class FleetView:
    """One look at the fleet's shared state, taken before the turn."""

    kill_switch: str | None = None
    availability: Mapping[Target, Availability] = field(default_factory=dict)

    def of(self, target: Target) -> Availability:
        return self.availability.get(target, Availability.AVAILABLE)


@dataclass(frozen=True, slots=True)
class Admission:
    """The fleet view, and the answer to the first attempt's reservation."""

    view: FleetView
    refusal: Refusal | None = None


@dataclass(frozen=True, slots=True)
class Conclusion:
    """What the guard is told when an attempt ends: the charge settled to `cost_micros`
    (released when None), the breaker `signal` (None: nothing to say), the probe slot
    `holder` gives back, the provider's `retry_after_s`, and the answer's
    `output_tokens` (evidence for sizing later reservations)."""

    target: Target
    charge: Charge
    signal: Signal | None = None
    cost_micros: int | None = None
    holder: str | None = None
    retry_after_s: float | None = None
    output_tokens: int | None = None


class Guard(Protocol):
    """The fleet's shared state as the chain sees it."""

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        """Look at the fleet and reserve the first planned attempt, if there is one."""
        ...

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> Refusal | None:
        """Reserve a later attempt: None when granted, else why not.

        `replacing` is a reservation to give back in the same breath (the first
        attempt's, when that attempt was skipped). `Refusal.KILL_SWITCH` means the
        switch went on since `admit`.
        """
        ...

    def output_tokens(self, model: str, max_tokens: int) -> int:
        """How many output tokens an attempt of `model` reserves (at most `max_tokens`)."""
        ...

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        """Take the fleet's half-open probe slot for `target`."""
        ...

    async def conclude(self, end: Conclusion) -> None:
        """Settle or release the attempt's charge and tell the breakers how it went."""
        ...

    async def hold(self, turn_id: str, payload: str) -> None:
        """Keep a turn the kill switch refused, for replay."""
        ...

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        """Hand a degraded turn to people."""
        ...

    async def route(self, tenant: str) -> budgets.Route | None:
        """The tenant's default and allowed chains, as operators set them (None: none)."""
        ...


class OpenGuard:
    """Everything available, nothing remembered or charged: one process on its own."""

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        return Admission(FleetView())

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> Refusal | None:
        return None

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return max_tokens

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        return True

    async def conclude(self, end: Conclusion) -> None:
        return None

    async def hold(self, turn_id: str, payload: str) -> None:
        return None

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        return None

    async def route(self, tenant: str) -> budgets.Route | None:
        return None
