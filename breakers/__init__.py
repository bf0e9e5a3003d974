"""Fleet-wide circuit breakers, cooldowns, exhausted marks and the kill switch, on Redis.

Knows nothing of Celery, HTTP or LLMs: it takes scope names, holders, seconds and
verdicts. Importing it never touches Redis. Its Redis plumbing (keys, names, scripts,
clock, failures) is `rediskit`'s, shared with `budgets` and `worker`. See docs/breakers.md.
"""

from __future__ import annotations

from breakers.connection import connect, in_memory
from breakers.errors import (
    BreakersError,
    InvalidNameError,
    InvalidPolicyError,
    StoreForbiddenError,
    StoreUnavailableError,
    UnknownScopeError,
)
from breakers.hedges import HedgeStore
from breakers.held import HeldTurn, HeldTurns
from breakers.keys import validate_name
from breakers.killswitch import KillSwitch
from breakers.operators import CooldownReport, ExhaustedReport, FleetReport, Operators, ScopeReport
from breakers.outcomes import Cooldown, Entry, Exhausted, Gone, Outcome, Pair, Verdict
from breakers.policy import CooldownPolicy, Policy
from breakers.resilient import ResilientBreakers
from breakers.schema import ReadProblem
from breakers.state import (
    BreakerState,
    FleetState,
    KillSwitchState,
    ScopeState,
    Transition,
    TransitionKind,
)
from breakers.store import FleetBreakers
from rediskit import FORBIDDEN_ERRORS, STORE_ERRORS

__all__ = [
    "FORBIDDEN_ERRORS",
    "STORE_ERRORS",
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
    "Gone",
    "HedgeStore",
    "HeldTurn",
    "HeldTurns",
    "InvalidNameError",
    "InvalidPolicyError",
    "KillSwitch",
    "KillSwitchState",
    "Operators",
    "Outcome",
    "Pair",
    "Policy",
    "ReadProblem",
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
