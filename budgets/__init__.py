"""Per-tenant spend on Redis: prices, reservations, settlement and hand-offs.

Knows nothing of Celery, HTTP or LLMs: it takes tenant ids, charge ids,
provider names and integer micro-dollars. It shares its Redis plumbing (keys,
names, script loading, the test clock, Redis failures) with `breakers`, in
`rediskit`. See docs/budgets.md.
"""

from budgets.attribution import Attribution, check_label_key, encode_labels
from budgets.errors import BudgetError, InvalidAmountError, InvalidNameError, UnknownTenantError
from budgets.evidence import OutputEvidence, percentile
from budgets.handoffs import Handoff, Handoffs
from budgets.keys import check_provider, check_tenant
from budgets.ledger import Ledger
from budgets.migrate import MigrationReport, migrate_keys, old_keys_present
from budgets.money import (
    MICROS_PER_DOLLAR,
    cost_micros,
    format_micros,
    parse_dollars,
    worst_case_micros,
)
from budgets.routes import Route, Routes
from budgets.shares import MAX_WEIGHT, Share, Shares
from budgets.types import (
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
    "MAX_WEIGHT",
    "MICROS_PER_DOLLAR",
    "Attribution",
    "BudgetError",
    "BudgetReport",
    "Handoff",
    "Handoffs",
    "InvalidAmountError",
    "InvalidNameError",
    "Ledger",
    "Limits",
    "MigrationReport",
    "OutputEvidence",
    "PeriodReport",
    "Refusal",
    "RefusalReason",
    "Release",
    "Reservation",
    "Route",
    "Routes",
    "Settlement",
    "Share",
    "Shares",
    "UnknownTenantError",
    "check_label_key",
    "check_provider",
    "check_tenant",
    "cost_micros",
    "encode_labels",
    "format_micros",
    "migrate_keys",
    "old_keys_present",
    "parse_dollars",
    "percentile",
    "worst_case_micros",
]
