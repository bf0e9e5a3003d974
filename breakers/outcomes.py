"""What callers tell the fleet after an attempt (`FleetBreakers.record`'s entries).

One call's `Verdict` for a scope (`Outcome`), a rate-limited `Pair`'s `Cooldown`, an
`Exhausted` account.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from breakers.keys import validate_name

__all__ = ["Cooldown", "Entry", "Exhausted", "Outcome", "Pair", "Verdict"]


class Verdict(StrEnum):
    """How one call ended, as far as a breaker cares."""

    SUCCESS = "success"  # counts as a call
    FAILURE = "failure"  # counts as a call and a failure (the dependency is unavailable)
    NEUTRAL = "neutral"  # counts as nothing (caller errors, 429, quota, auth, context length)


class Pair(NamedTuple):
    """A (provider account, model) pair, the unit a rate limit cools down."""

    account: str
    model: str


@dataclass(frozen=True)
class Outcome:
    """One call's verdict for one breaker scope; `holder` is the probe holder id, if any."""

    scope: str
    verdict: Verdict
    holder: str | None = None

    def __post_init__(self) -> None:
        validate_name(self.scope, "scope")
        if self.holder is not None:
            validate_name(self.holder, "holder")


@dataclass(frozen=True)
class Cooldown:
    """A rate limit: the pair cools down fleet-wide for `seconds` (None: the default)."""

    account: str
    model: str
    seconds: float | None = None

    def __post_init__(self) -> None:
        validate_name(self.account, "account")
        validate_name(self.model, "model")


@dataclass(frozen=True)
class Exhausted:
    """A quota, credit or spend-limit error: the account is marked exhausted fleet-wide."""

    account: str
    seconds: float | None = None

    def __post_init__(self) -> None:
        validate_name(self.account, "account")


Entry = Outcome | Cooldown | Exhausted
