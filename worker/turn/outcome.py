"""What one attempt is given (`Plan`, then `Flight` once reserved) and what it ends with
(`Outcome`): the words the walk (`worker.turn.chain`) and the attempts
(`worker.turn.attempt`, `worker.turn.race`) speak to each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from worker.guard.protocol import Charge, Refusal, Target
from worker.turn.capability import Fit
from worker.types import Usage

__all__ = [
    "Answered",
    "Degrade",
    "Failed",
    "Flight",
    "MoveOn",
    "Outcome",
    "Plan",
    "Refused",
    "Retry",
]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to attempt: a target, as which step of the chain, with the turn fitted to it."""

    step: int
    target: Target
    fit: Fit
    fallback: bool
    retry_index: int = 0
    probe: bool = False  # the breaker is half-open: call only holding the fleet's probe slot


@dataclass(slots=True)
class Flight:
    """A planned attempt with its reservation: about to be called, or in the air."""

    plan: Plan
    charge: Charge
    holder: str | None = None  # of the probe slot
    on_content: Callable[[], None] | None = None  # at each event until the turn is locked
    # Set by a hedged race when this call is cut because its twin answered: what it is
    # charged instead of its reservation (the race reports it).
    cut_micros: int | None = None
    # What the call has streamed (text, tool names and arguments), counted if it is cut.
    streamed: list[str] = field(default_factory=list)
    content: bool = False  # it has sent content: a cut is charged what it produced
    # What the provider reported the call had used before its end (Gemini's thinking).
    usage_seen: Usage | None = None


@dataclass(frozen=True, slots=True)
class Answered:
    """The model answered; the report holds its reply."""


@dataclass(frozen=True, slots=True)
class MoveOn:
    """Leave this provider; `min_window` > 0 also leaves every model that small."""

    min_window: int = 0


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the same target again after `delay_s`."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn fails: no other model would do better."""

    reason: str
    error: Exception


@dataclass(frozen=True, slots=True)
class Degrade:
    """Money stopped the turn (a provider's quota): the product degrades, no fallback."""

    reason: str
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class Refused:
    """The fleet's shared state refused the attempt before any call."""

    refusal: Refusal


Outcome = Answered | MoveOn | Retry | Failed | Degrade | Refused
