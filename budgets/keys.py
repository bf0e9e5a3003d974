"""Every Redis key budgets uses, in one place, and the checks on the names inside them.

Layout under a namespace (default "relevo"); `<t>` is a validated tenant id:

    <ns>:budget:tenants                 set   tenants with limits or spend     no TTL (operators')
    <ns>:budget:t:<t>:limits            hash  daily, monthly, fallback_cap     no TTL (operators')
    <ns>:budget:t:<t>:held              hash  charge id -> "micros|fallback"   last hold's expiry
                                              and =total =fallback =reclaimed  + HOLD_GRACE_S
    <ns>:budget:t:<t>:holds             zset  charge id by expiry (ms)         same as held
    <ns>:budget:t:<t>:charge:<charge>   hash  one charge's state               charge_ttl_s (7 d)
    <ns>:budget:t:<t>:day:<YYYY-MM-DD>  hash  spent, fallback, fb:<provider>   DAY_TTL_S
    <ns>:budget:t:<t>:month:<YYYY-MM>   hash  the same for the UTC month       MONTH_TTL_S
    <ns>:handoffs                       stream  degraded turns for people      capped (MAXLEN ~)

The Lua scripts build the charge, day and month keys from the tenant prefix
(the period comes from the server's clock), so they run on one Redis server or
a primary with replicas, not on Redis Cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from budgets.errors import InvalidNameError

__all__ = [
    "CHARGE_TTL_S",
    "DAY_TTL_S",
    "HOLD_GRACE_S",
    "MONTH_TTL_S",
    "BudgetKeys",
    "check_charge_id",
    "check_name",
    "check_namespace",
    "check_provider",
    "check_tenant",
]

DAY_TTL_S = 40 * 86_400
MONTH_TTL_S = 400 * 86_400
HOLD_GRACE_S = 60
CHARGE_TTL_S = 7 * 86_400

_PLAIN = "ASCII letters, digits, '_', '.' and '-'"
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# Charge ids may hold a colon ("turn-1:0"): they are always the last segment of a key.
_CHARGE_CHARS = _NAME_CHARS | {":"}
_SHOWN = 40
# The same alphabets as regexes: a valid name (every key of every turn) is checked in C.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_CHARGE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")


def _problem(value: str, chars: frozenset[str], max_len: int, allowed: str) -> str | None:
    if not value:
        return "is empty"
    if len(value) > max_len:
        return f"is {len(value)} characters long; at most {max_len} are allowed"
    for index, char in enumerate(value):
        if char not in chars:
            what = "character" if char.isascii() else "non-ASCII character"
            return f"has the {what} {char!r} at position {index}; only {allowed} are allowed"
    if value[0] in ".-:":
        return f"starts with {value[0]!r}; it must start with a letter, a digit or '_'"
    return None


def _check(kind: str, value: object, chars: frozenset[str], max_len: int, allowed: str) -> str:
    if not isinstance(value, str):
        raise InvalidNameError(f"{kind} must be a string, not {type(value).__name__}")
    valid = _CHARGE_RE if ":" in chars else _NAME_RE
    if len(value) <= max_len and valid.fullmatch(value):
        return value
    problem = _problem(value, chars, max_len, allowed)
    if problem is not None:
        shown = value if len(value) <= _SHOWN else value[:_SHOWN] + "…"
        raise InvalidNameError(f"{kind} {shown!r} {problem}")
    return value


def check_name(kind: str, value: object) -> str:
    """`value` if it is a plain name (1-64 of A-Z a-z 0-9 _ . -, not starting with . or -)."""
    return _check(kind, value, _NAME_CHARS, 64, _PLAIN)


def check_tenant(value: object) -> str:
    """`value` if it is a valid tenant id, else `InvalidNameError` saying what is wrong with it."""
    return check_name("tenant id", value)


def check_provider(value: object) -> str:
    """`value` if it is a valid provider name."""
    return check_name("provider", value)


def check_charge_id(value: object) -> str:
    """`value` if it is a valid charge id (1-200 characters; ':' allowed, e.g. "turn-1:0")."""
    return _check("charge id", value, _CHARGE_CHARS, 200, _PLAIN + " and ':'")


def check_namespace(value: object) -> str:
    """`value` if it is a valid key namespace (1-64 characters; ':' allowed)."""
    return _check("namespace", value, _CHARGE_CHARS, 64, _PLAIN + " and ':'")


@dataclass(frozen=True, slots=True)
class BudgetKeys:
    """Builds every key; tenant ids are checked before they become part of one."""

    namespace: str = "relevo"

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    def tenants(self) -> str:
        return f"{self.namespace}:budget:tenants"

    def handoffs(self) -> str:
        return f"{self.namespace}:handoffs"

    def prefix(self, tenant: str) -> str:
        """The prefix of every per-tenant key; the Lua scripts append the rest."""
        return f"{self.namespace}:budget:t:{check_tenant(tenant)}:"

    def limits(self, tenant: str) -> str:
        return self.prefix(tenant) + "limits"

    def held(self, tenant: str) -> str:
        return self.prefix(tenant) + "held"

    def holds(self, tenant: str) -> str:
        return self.prefix(tenant) + "holds"

    def charge(self, tenant: str, charge_id: str) -> str:
        return self.prefix(tenant) + "charge:" + check_charge_id(charge_id)

    def day(self, tenant: str, day: str) -> str:
        """The spend hash of a UTC day, `day` as "YYYY-MM-DD"."""
        return self.prefix(tenant) + "day:" + day

    def month(self, tenant: str, month: str) -> str:
        """The spend hash of a UTC month, `month` as "YYYY-MM"."""
        return self.prefix(tenant) + "month:" + month
