"""Fleet-wide circuit breakers, cooldowns, exhausted marks and the kill switch, on Redis.

Knows nothing of Celery, HTTP or LLMs: it takes scope names, holders, seconds and
verdicts. Importing it never touches Redis. See docs/breakers.md.
"""

from __future__ import annotations

from breakers.client import connect, in_memory
from breakers.entries import Cooldown, Entry, Exhausted, Outcome, Pair, Verdict
from breakers.errors import (
    BreakersError,
    InvalidNameError,
    InvalidPolicyError,
    StoreForbiddenError,
    StoreUnavailableError,
    UnknownScopeError,
)
from breakers.held import HeldTurn, HeldTurns
from breakers.keys import Keys, validate_name
from breakers.killswitch import KillSwitch
from breakers.operators import CooldownReport, ExhaustedReport, FleetReport, Operators, ScopeReport
from breakers.policy import CooldownPolicy, Policy
from breakers.resilient import ResilientBreakers
from breakers.scripts import Parse
from breakers.state import (
    BreakerState,
    FleetState,
    KillSwitchState,
    ScopeState,
    Transition,
    TransitionKind,
)
from breakers.store import FleetBreakers

__all__ = [
    "BreakerState",
    "BreakersError",
    "Cooldown",
    "CooldownPolicy",
    "CooldownReport",
    "Entry",
    "Exhausted",
    "ExhaustedReport",
    "FleetBreakers",
    "FleetReport",
    "FleetState",
    "HeldTurn",
    "HeldTurns",
    "InvalidNameError",
    "InvalidPolicyError",
    "Keys",
    "KillSwitch",
    "KillSwitchState",
    "Operators",
    "Outcome",
    "Pair",
    "Parse",
    "Policy",
    "ResilientBreakers",
    "ScopeReport",
    "ScopeState",
    "StoreForbiddenError",
    "StoreUnavailableError",
    "Transition",
    "TransitionKind",
    "UnknownScopeError",
    "Verdict",
    "connect",
    "in_memory",
    "validate_name",
]
