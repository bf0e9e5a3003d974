"""Per-tenant spend on Redis: prices, reservations, settlement and hand-offs.

Knows nothing of Celery, HTTP or LLMs: it takes tenant ids, charge ids,
provider names and integer micro-dollars. See docs/budgets.md.
"""

from budgets.errors import BudgetError, InvalidAmountError, InvalidNameError, UnknownTenantError
from budgets.handoffs import Handoff, Handoffs
from budgets.keys import BudgetKeys, check_charge_id, check_provider, check_tenant
from budgets.ledger import Ledger
from budgets.money import (
    MAX_MICROS,
    MICROS_PER_DOLLAR,
    cost_micros,
    format_micros,
    parse_dollars,
    worst_case_micros,
)
from budgets.records import (
    BudgetReport,
    Limits,
    PeriodReport,
    Refusal,
    RefusalReason,
    Release,
    Reservation,
    Settlement,
)

__all__ = [
    "MAX_MICROS",
    "MICROS_PER_DOLLAR",
    "BudgetError",
    "BudgetKeys",
    "BudgetReport",
    "Handoff",
    "Handoffs",
    "InvalidAmountError",
    "InvalidNameError",
    "Ledger",
    "Limits",
    "PeriodReport",
    "Refusal",
    "RefusalReason",
    "Release",
    "Reservation",
    "Settlement",
    "UnknownTenantError",
    "check_charge_id",
    "check_provider",
    "check_tenant",
    "cost_micros",
    "format_micros",
    "parse_dollars",
    "worst_case_micros",
]
