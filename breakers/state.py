"""What the fleet store answers: breaker states, the kill switch, transitions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from breakers.outcomes import Pair

__all__ = [
    "BreakerState",
    "FleetState",
    "KillSwitchState",
    "ScopeState",
    "Transition",
    "TransitionKind",
]


class BreakerState(StrEnum):
    """A breaker's state as seen now (half-open is open with its break elapsed)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class TransitionKind(StrEnum):
    """A state change that one `record` call caused; it is returned to that caller only."""

    OPENED = "opened"  # closed -> open: the failure rate or streak crossed its threshold
    REOPENED = "reopened"  # half-open -> open: the probe failed; the break grew
    CLOSED = "closed"  # half-open -> closed: the probe succeeded


@dataclass(frozen=True)
class Transition:
    """One breaker transition; exactly one caller in the fleet receives it."""

    scope: str
    kind: TransitionKind
    break_s: float | None = None  # the new break, for OPENED and REOPENED


@dataclass(frozen=True)
class KillSwitchState:
    """The kill switch while it is on: who turned it on, why, and when (Redis server time).

    `unreadable` says what of the stored switch could not be read (a hand edit): it is on
    all the same, and a person can turn it off."""

    who: str
    reason: str
    since_ms: int
    unreadable: str | None = None


@dataclass(frozen=True)
class ScopeState:
    """One breaker as a caller needs it before a call."""

    scope: str
    state: BreakerState
    probe_free: bool = False  # half-open with a probe slot free
    retry_in_s: float = 0.0  # open: time left in the break (math.inf while pinned open)

    @property
    def callable(self) -> bool:
        """A call may go now: closed, or half-open with a slot to take."""
        return self.state is BreakerState.CLOSED or (
            self.state is BreakerState.HALF_OPEN and self.probe_free
        )


@dataclass(frozen=True)
class FleetState:
    """Everything the chain checks before a turn, read in one round trip."""

    kill_switch: KillSwitchState | None
    scopes: Mapping[str, ScopeState]
    cooldowns: Mapping[Pair, float] = field(default_factory=dict)  # seconds left, 0 = none
    # Keyed as asked: an account (str), or a `Pair` for one model's quota on an account.
    exhausted: Mapping[str | Pair, bool] = field(default_factory=dict)
    fleet_view: bool = True  # False: served by this process's local breakers (Redis lost)
    epoch: str = ""  # the store's epoch id ("" for a store that has none yet)
    epoch_off_by: str = ""  # who turned the kill switch off in this epoch, if anyone
