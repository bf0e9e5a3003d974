"""What callers tell the fleet after an attempt (`FleetBreakers.record`'s entries).

One call's `Verdict` for a scope (`Outcome`), a rate-limited `Pair`'s `Cooldown`, a
`Gone` pair (the provider no longer serves the model), an `Exhausted` account or pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from breakers.keys import validate_name

__all__ = ["Cooldown", "Entry", "Exhausted", "Gone", "Outcome", "Pair", "Verdict"]


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
class Gone:
    """The provider does not know the model (retired, deleted deployment): the pair is
    skipped fleet-wide for `CooldownPolicy.gone_s`, past the cooldown cap."""

    account: str
    model: str

    def __post_init__(self) -> None:
        validate_name(self.account, "account")
        validate_name(self.model, "model")


@dataclass(frozen=True)
class Exhausted:
    """A quota, credit or spend-limit error: the account (or, with `model`, that model's
    quota on it) is marked exhausted fleet-wide for `seconds` (None: the default)."""

    account: str
    seconds: float | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        validate_name(self.account, "account")
        if self.model is not None:
            validate_name(self.model, "model")


Entry = Outcome | Cooldown | Gone | Exhausted
