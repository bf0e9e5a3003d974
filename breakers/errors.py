"""The exceptions `breakers` raises on purpose.

BreakersError
├── InvalidNameError       a scope, account, model, holder or namespace outside the alphabet
├── InvalidPolicyError     a policy value out of range, naming the field
└── UnknownScopeError      an operator named a scope nobody configured or used

rediskit.StoreError        the store's failures, as every room raises them (`rediskit.errors`)
├── StoreUnavailableError  Redis could not be reached on a path with no local fallback
└── StoreForbiddenError    Redis answered but refused us (authentication, ACL permissions)
"""

from __future__ import annotations

from rediskit.errors import StoreForbiddenError, StoreUnavailableError

__all__ = [
    "BreakersError",
    "InvalidNameError",
    "InvalidPolicyError",
    "StoreForbiddenError",
    "StoreUnavailableError",
    "UnknownScopeError",
]


class BreakersError(Exception):
    """Base class of every error `breakers` raises on purpose."""


class InvalidNameError(BreakersError, ValueError):
    """A name that cannot be used inside a Redis key; the message says why."""


class InvalidPolicyError(BreakersError, ValueError):
    """A policy field out of range; the message names the field."""


class UnknownScopeError(BreakersError, LookupError):
    """An operator command named a scope that is neither configured nor seen by the fleet."""

    def __init__(self, scope: str, known: list[str]) -> None:
        listed = ", ".join(known[:20]) or "none"
        super().__init__(f"unknown breaker scope {scope!r}; known scopes: {listed}")
        self.scope = scope
