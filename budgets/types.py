"""The values budgets takes and returns: frozen dataclasses, amounts in integer micro-dollars."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from budgets.attribution import Attribution
from budgets.money import check_micros

__all__ = [
    "BudgetReport",
    "ChargeState",
    "Limits",
    "PeriodReport",
    "Refusal",
    "RefusalReason",
    "Release",
    "Reservation",
    "Settlement",
]

ChargeState = Literal["reserved", "settled"]


class RefusalReason(StrEnum):
    """Why a reservation was refused; the values are stable strings."""

    # The attempt does not fit what the period has left, even with nothing held.
    TENANT_BUDGET_EXHAUSTED = "tenant_budget_exhausted"
    # It would fit, but attempts in flight hold the rest; they settle, usually for less.
    TENANT_BUDGET_HELD = "tenant_budget_held"
    FALLBACK_CAP_REACHED = "fallback_cap_reached"
    FALLBACK_CAP_HELD = "fallback_cap_held"
    UNKNOWN_TENANT = "unknown_tenant"


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's limits per UTC day and month; the fallback cap is per UTC day, None for none.

    `overdraft_micros` is how far past a limit worst cases may run while reservations
    hold expected costs: spend never passes limit + overdraft (docs/budgets.md).
    """

    daily_micros: int
    monthly_micros: int
    fallback_cap_micros: int | None = None
    overdraft_micros: int = 0

    def __post_init__(self) -> None:
        check_micros("daily_micros", self.daily_micros)
        check_micros("monthly_micros", self.monthly_micros)
        check_micros("overdraft_micros", self.overdraft_micros)
        if self.fallback_cap_micros is not None:
            check_micros("fallback_cap_micros", self.fallback_cap_micros)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A hold on the budget for one charge (or, when `state` is "settled", the charge itself).

    `replayed` is True when the charge id was already reserved or settled: nothing
    new was held. `reclaimed` counts expired holds this call reclaimed (any charge).
    `room_micros` is what the tenant's worst cases may still take with this hold
    (limit + overdraft - spent - held worst, the least of the day and the month); None
    on a replay.
    """

    tenant: str
    charge_id: str
    state: ChargeState
    micros: int
    expires_at_ms: int
    fallback: bool
    provider: str
    replayed: bool
    reclaimed: int = 0
    room_micros: int | None = None

    @property
    def ok(self) -> Literal[True]:
        return True


@dataclass(frozen=True, slots=True)
class Refusal:
    """The budget does not allow the attempt; `reason` says why.

    `period` is "day" or "month" for the tenant's budget, "day" for the fallback
    cap, None for an unknown tenant; `remaining_micros` is what was free there (limit
    minus spent minus held) and `held_micros` what attempts in flight held;
    `room_micros` what the tenant's worst cases may still take (see `Reservation`).
    """

    reason: RefusalReason
    tenant: str = ""
    charge_id: str = ""
    micros: int = 0
    period: Literal["day", "month"] | None = None
    remaining_micros: int = 0
    reclaimed: int = 0
    held_micros: int = 0
    room_micros: int | None = None

    @property
    def ok(self) -> Literal[False]:
        return False


@dataclass(frozen=True, slots=True)
class Settlement:
    """A charge turned into spend. `charged_micros` is what this call added: 0 on a replay.

    A charge whose hold had been reclaimed was already charged `precharged_micros` (its
    reservation); this call adds the difference, which may be negative.
    """

    tenant: str
    charge_id: str
    charged_micros: int
    settled_micros: int
    released_hold_micros: int
    fallback: bool
    provider: str
    day: str
    month: str
    replayed: bool
    reclaimed: int = 0
    precharged_micros: int = 0


@dataclass(frozen=True, slots=True)
class Release:
    """A reservation dropped without charge; `released` is False when nothing was held.

    `refunded_micros` is what a reclaim had charged for it, given back.
    """

    tenant: str
    charge_id: str
    released: bool
    micros: int
    reclaimed: int = 0
    refunded_micros: int = 0


@dataclass(frozen=True, slots=True)
class PeriodReport:
    """Spend of one UTC period (`period` is "YYYY-MM-DD" or "YYYY-MM").

    `remaining_micros` is what is free: the limit minus spent minus held. Spent includes
    `reclaimed_micros`: holds of attempts that never reported back, charged at their
    reservation (`reclaimed_charges` of them), since their calls may have been billed.
    """

    period: str
    limit_micros: int
    spent_micros: int
    reserved_micros: int
    remaining_micros: int
    fallback_spent_micros: int
    fallback_by_provider: dict[str, int] = field(default_factory=dict)
    reclaimed_charges: int = 0
    reclaimed_micros: int = 0
    attribution: dict[str, Attribution] = field(default_factory=dict)
    """The spend by each label key, when the report was asked for it (`Ledger.report`)."""

    def by(self, key: str) -> Attribution:
        """The spend by `key` (all of it unattributed when no charge carried the key)."""
        return self.attribution.get(key) or Attribution(key, self.spent_micros)


@dataclass(frozen=True, slots=True)
class BudgetReport:
    """A tenant's budget as operators see it.

    `limits_source` is "configured" (set by an operator), "default" (the ledger's
    default for unknown tenants) or "none" (unknown tenants are refused: zero limits).
    """

    tenant: str
    limits: Limits
    limits_source: Literal["configured", "default", "none"]
    day: PeriodReport
    month: PeriodReport
    reserved_micros: int
    reserved_fallback_micros: int
    fallback_remaining_micros: int | None
    reclaimed_total: int
    now_ms: int
    reserved_worst_micros: int = 0
