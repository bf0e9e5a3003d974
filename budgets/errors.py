"""The exceptions budgets raises.

    BudgetError
    ├── InvalidNameError    (ValueError) a tenant, provider, charge id or namespace unfit for a key
    ├── InvalidAmountError  (ValueError) a negative, fractional, oversized or unparsable amount
    └── UnknownTenantError  (LookupError) an operator asked about a tenant budgets never saw

Refusing a reservation is not an error: `Ledger.reserve` returns a `Refusal`.
Redis failures surface as `redis.exceptions.RedisError`, untranslated: the
caller decides whether a control path may proceed without its store.
"""

from __future__ import annotations

__all__ = ["BudgetError", "InvalidAmountError", "InvalidNameError", "UnknownTenantError"]


class BudgetError(Exception):
    """Base of every budgets error."""


class InvalidNameError(BudgetError, ValueError):
    """A name that would become part of a Redis key is not a plain short identifier."""


class InvalidAmountError(BudgetError, ValueError):
    """An amount of money is not a non-negative whole number of micro-dollars in range."""


class UnknownTenantError(BudgetError, LookupError):
    """The tenant has no configured limits and no recorded spend."""
