"""What the chain asks of the fleet's shared state, at fixed points of a turn.

One `Guard` answers for breakers, cooldowns, exhausted accounts, the kill
switch and the tenant's budget, so that a Redis-backed guard can batch them:
`admit` (the fleet view and the first attempt's reservation) and `conclude`
(the signal and the settlement) are one round trip each on a healthy turn.

    admit ─► [reserve ─►] [acquire_probe ─►] call ─► conclude ─► … next attempt

`OpenGuard` is the in-process default: nothing is shared, nothing refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

__all__ = [
    "Admission",
    "Availability",
    "Charge",
    "FleetView",
    "Guard",
    "OpenGuard",
    "Signal",
    "Target",
]


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
    (`worst_micros`, by default the same) must fit the tenant's overdraft."""

    charge_id: str
    tenant: str
    provider: str
    micros: int
    fallback: bool
    worst_micros: int | None = None

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
    refusal: str | None = None


class Guard(Protocol):
    """The fleet's shared state as the chain sees it."""

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        """Look at the fleet and reserve the first planned attempt, if there is one."""
        ...

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> str | None:
        """Reserve a later attempt: None when granted, else the refusal reason.

        `replacing` is a reservation to give back in the same breath (the first
        attempt's, when that attempt was skipped). "kill_switch" means the switch
        went on since `admit`.
        """
        ...

    def output_tokens(self, model: str, max_tokens: int) -> int:
        """How many output tokens an attempt of `model` reserves (at most `max_tokens`)."""
        ...

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        """Take the fleet's half-open probe slot for `target`."""
        ...

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
        """Settle `charge` to `cost_micros` (release it when None) and record the signal,
        and the answer's `output_tokens` as evidence for sizing reservations."""
        ...

    async def hold(self, turn_id: str, payload: str) -> None:
        """Keep a turn the kill switch refused, for replay."""
        ...

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        """Hand a degraded turn to people."""
        ...


class OpenGuard:
    """Everything available, nothing remembered or charged: one process on its own."""

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        return Admission(FleetView())

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> str | None:
        return None

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return max_tokens

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        return True

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
        return None

    async def hold(self, turn_id: str, payload: str) -> None:
        return None

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        return None
