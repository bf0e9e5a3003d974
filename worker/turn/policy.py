"""What the chain does about each failure, and what the breakers are told: one table.

`RULES` gives each error class (`worker.errors`) a `Decision` for the chain, a
`Signal` for the breaker and cooldown layer, as in DESIGN.md "What each failure gets",
and whether the provider may bill the failed call (it is then charged at its
reservation: the books follow what providers bill, call for call).
Which class a provider's response is belongs to `worker.adapters.classify`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from worker.errors import (
    AuthFailed,
    ConnectionFailed,
    ContextTooLong,
    DeadlineExceeded,
    FirstByteTimeout,
    InvalidRequest,
    MalformedResponse,
    ModelNotFound,
    ModelQuotaExhausted,
    OutputInvalid,
    Overloaded,
    QuotaExhausted,
    RateLimited,
    ResponseCutOff,
    ResponseTimeout,
    ServerError,
)
from worker.guard.protocol import Signal

__all__ = ["RULES", "Decision", "Rule", "rule_for"]


class Decision(StrEnum):
    """What the chain does after a failed attempt."""

    RETRY_THEN_NEXT = "retry_then_next"
    NEXT = "next"
    WAIT_OR_NEXT = "wait_or_next"
    DEGRADE = "degrade"
    FAIL = "fail"
    LARGER_WINDOW = "larger_window"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the decision table."""

    decision: Decision
    signal: Signal
    # The request reached a model that may have answered: a timeout, or a body we could
    # not read. An error response (4xx, 5xx) is not billed by any provider here.
    billed: bool = False


RULES: Mapping[type[BaseException], Rule] = MappingProxyType(
    {
        ServerError: Rule(Decision.RETRY_THEN_NEXT, Signal.FAILURE),
        ConnectionFailed: Rule(Decision.RETRY_THEN_NEXT, Signal.FAILURE),
        ResponseCutOff: Rule(Decision.RETRY_THEN_NEXT, Signal.FAILURE, billed=True),
        MalformedResponse: Rule(Decision.RETRY_THEN_NEXT, Signal.FAILURE, billed=True),
        # The model answered, in the wrong shape: the backup may follow the schema; the
        # same model, asked the same, tends to answer the same. Its health is not at issue.
        OutputInvalid: Rule(Decision.NEXT, Signal.NEUTRAL, billed=True),
        Overloaded: Rule(Decision.NEXT, Signal.MODEL_FAILURE),
        FirstByteTimeout: Rule(Decision.NEXT, Signal.FAILURE, billed=True),
        # Only raised once content has streamed, where the chain's lock forbids moving on.
        ResponseTimeout: Rule(Decision.NEXT, Signal.FAILURE, billed=True),
        RateLimited: Rule(Decision.WAIT_OR_NEXT, Signal.RATE_LIMITED),
        QuotaExhausted: Rule(Decision.DEGRADE, Signal.EXHAUSTED),
        ModelQuotaExhausted: Rule(Decision.DEGRADE, Signal.MODEL_EXHAUSTED),
        AuthFailed: Rule(Decision.FAIL, Signal.NEUTRAL),
        InvalidRequest: Rule(Decision.FAIL, Signal.NEUTRAL),
        ContextTooLong: Rule(Decision.LARGER_WINDOW, Signal.NEUTRAL),
        # A retired model or a deleted deployment: the primary is not available, so
        # fall back; the fleet skips it for long, and a person must fix the chain.
        ModelNotFound: Rule(Decision.NEXT, Signal.MODEL_GONE),
        DeadlineExceeded: Rule(Decision.STOP, Signal.NEUTRAL),
        asyncio.CancelledError: Rule(Decision.STOP, Signal.NEUTRAL),
    }
)
"""The decision table of DESIGN.md, keyed by exception class."""

_UNKNOWN = Rule(Decision.FAIL, Signal.NEUTRAL)


def rule_for(error: BaseException) -> Rule:
    """The rule of the nearest class of `error` in `RULES`; unknown errors fail, neutrally."""
    for klass in type(error).__mro__:
        rule = RULES.get(klass)
        if rule is not None:
            return rule
    return _UNKNOWN
