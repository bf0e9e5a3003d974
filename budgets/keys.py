"""Every Redis key budgets uses, in one place, and the checks on the names inside them.

Layout under a namespace ``N`` (default "relevo"); `<t>` is a tenant id (`TENANT_PATTERN`). The
keys of one tenant start with the tenant's own Redis Cluster hash tag ``{N/<t>}``: every
budget script touches one tenant's keys only, all in one slot, and on a Cluster the
tenants spread over the nodes. The others start with ``{N}``, the same tag as `breakers`'
keys. Every key a script touches is passed in KEYS:

    {N}:budget:tenants                 set   tenants with limits or spend     no TTL (operators')
    {N/<t>}:budget:limits              hash  daily, monthly, fallback_cap     no TTL (operators')
    {N/<t>}:budget:held                hash  charge id -> "micros|fallback|   last hold's expiry
                                             worst|provider|labels", =total,  + HOLD_GRACE_S
                                             =worst,
                                             =fallback =fallback_worst,
                                             =reclaimed
    {N/<t>}:budget:holds               zset  charge id by expiry (ms)         same as held
    {N/<t>}:budget:reclaimed           hash  charge id -> "micros|fallback|   charge_ttl_s
                                             provider|labels": charged at reclaim
    {N/<t>}:budget:charge:<charge>     hash  one charge's state               charge_ttl_s (7 d)
    {N/<t>}:budget:day:<YYYY-MM-DD>    hash  spent, fallback, fb:<provider>,  DAY_TTL_S
                                             reclaimed, reclaimed_micros,
                                             by:<key>=<value> !none !other #
                                             (budgets.attribution)
    {N/<t>}:budget:month:<YYYY-MM>     hash  the same for the UTC month       MONTH_TTL_S
    {N/<t>}:budget:migrated            hash  old-layout claims applied here   7 d (budgets.migrate)
    {N}:budget:migrating               set   claims of a migration underway   no TTL (emptied)
    {N}:budget:evidence:<model>        list  output tokens, newest first      EVIDENCE_TTL_S
    {N}:handoffs                       stream  degraded turns for people      capped (MAXLEN ~)
    {N}:budget:routes                  hash  tenant -> default and allowed    no TTL (operators')
                                             chains (`budgets.routes`)

The tenants set is written beside the scripts (in the same pipeline), not inside them: it
lives on another slot.

The client cannot know the script's clock before it sends, so it passes the day and month
keys of two instants, 12 h before and after its own clock (`BudgetKeys.periods`); the
script uses the pair of its own clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache

from budgets.errors import InvalidNameError
from rediskit import NAMESPACE, NameRule, check_name, hash_tag

__all__ = [
    "CHARGE_TTL_S",
    "DAY_TTL_S",
    "HOLD_GRACE_S",
    "MONTH_TTL_S",
    "PERIOD_SLACK_MS",
    "TENANT_MAX_CHARS",
    "TENANT_PATTERN",
    "BudgetKeys",
    "check_charge_id",
    "check_namespace",
    "check_plain",
    "check_provider",
    "check_tenant",
]

DAY_TTL_S = 40 * 86_400
MONTH_TTL_S = 400 * 86_400
HOLD_GRACE_S = 60
CHARGE_TTL_S = 7 * 86_400
# How far the client's clock may be from the script's for it to pass the right period keys.
PERIOD_SLACK_MS = 12 * 3_600_000
_DAY_MS = 86_400_000
_EPOCH = date(1970, 1, 1)

_PLAIN_SAYS = "ASCII letters, digits, '_', '.' and '-'"
_FIRST_SAYS = "a letter, a digit or '_'"
# Provider names, hand-off reasons, and the tenant ids of the keys' older layout.
PLAIN = NameRule("A-Za-z0-9_.-", "A-Za-z0-9_", 64, _PLAIN_SAYS, _FIRST_SAYS)

# Tenant ids as platforms write them: "org:1234" (URNs, ARNs), "team/42" (paths), "acme.eu"
# (domains), "user+eu@example.com" (e-mail addresses). The one rule for every place a tenant
# id enters (`TurnRequest`, the commands, the console, the fair queue). Left out, because
# something parses them: '|' (the fair queue's "<tenant>|<seq>" members and packed values
# split on it), '{' and '}' (a key's Cluster hash tag ends at the first '}'), '%' (URL
# encoding), whitespace, quotes, glob characters and anything not ASCII. Every id of the
# PLAIN rule is one: an existing tenant's keys stay where they are. Each part between '/'
# starts like an id, so no id reads as a path going up ("a/../b") or an empty part ("a//b").
TENANT_MAX_CHARS = 64
_TENANT_FIRST = "A-Za-z0-9_"
_TENANT_REST = "A-Za-z0-9_.:@+-"
TENANT_PATTERN = rf"^[{_TENANT_FIRST}][{_TENANT_REST}]*(?:/[{_TENANT_FIRST}][{_TENANT_REST}]*)*$"
_TENANT_SAYS = "ASCII letters, digits, '_', '.', '-', ':', '/', '@' and '+'"
TENANT = NameRule("A-Za-z0-9_.:@+/-", _TENANT_FIRST, TENANT_MAX_CHARS, _TENANT_SAYS, _FIRST_SAYS)
_TENANT_VALID = re.compile(TENANT_PATTERN)
# Charge ids may hold a colon ("turn-1:0"): they are always the last segment of a key.
CHARGE = NameRule("A-Za-z0-9_.:-", "A-Za-z0-9_", 200, _PLAIN_SAYS + " and ':'", _FIRST_SAYS)
# Model names as the chain spells them ("openai/gpt-5"): the last segment of a key.
MODEL = NameRule(
    "A-Za-z0-9_.:/@-", "A-Za-z0-9_", 200, _PLAIN_SAYS + ", ':', '/' and '@'", _FIRST_SAYS
)


def check_plain(what: str, value: object) -> str:
    """`value` if it is a plain name (1-64 of A-Z a-z 0-9 _ . -, not starting with . or -)."""
    return check_name(value, what, PLAIN, InvalidNameError)


def check_tenant(value: object) -> str:
    """`value` if it is a valid tenant id (`TENANT_PATTERN`, at most 64 characters), else
    `InvalidNameError` in one line naming the characters allowed and the one at fault."""
    checked = check_name(value, "tenant id", TENANT, InvalidNameError)
    if _TENANT_VALID.fullmatch(checked) is None:
        raise InvalidNameError(
            f"tenant id {checked!r} must start with {_FIRST_SAYS} and use only "
            f"{_TENANT_SAYS}, each part between '/' starting with {_FIRST_SAYS}"
        )
    return checked


def check_provider(value: object) -> str:
    """`value` if it is a valid provider name."""
    return check_plain("provider", value)


def check_charge_id(value: object) -> str:
    """`value` if it is a valid charge id (1-200 characters; ':' allowed, e.g. "turn-1:0")."""
    return check_name(value, "charge id", CHARGE, InvalidNameError)


def check_namespace(value: object) -> str:
    """`value` if it is a valid key namespace (`rediskit.NAMESPACE`, as breakers')."""
    return check_name(value, "namespace", NAMESPACE, InvalidNameError)


@lru_cache(maxsize=16)
def _periods_of(day_index: int) -> tuple[str, str]:
    day = (_EPOCH + timedelta(days=day_index)).isoformat()
    return day, day[:7]


def utc_periods(ms: int) -> tuple[str, str]:
    """The UTC day ("YYYY-MM-DD") and month ("YYYY-MM") of epoch milliseconds `ms`."""
    return _periods_of(ms // _DAY_MS)


@dataclass(frozen=True, slots=True)
class BudgetKeys:
    """Builds every key; tenant ids are checked before they become part of one."""

    namespace: str = "relevo"

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    def tenants(self) -> str:
        return f"{hash_tag(self.namespace)}:budget:tenants"

    def handoffs(self) -> str:
        return f"{hash_tag(self.namespace)}:handoffs"

    def prefix(self, tenant: str) -> str:
        """The prefix of every per-tenant key: the tenant's own hash tag."""
        return f"{hash_tag(self.namespace, check_tenant(tenant))}:budget:"

    def limits(self, tenant: str) -> str:
        return self.prefix(tenant) + "limits"

    def held(self, tenant: str) -> str:
        return self.prefix(tenant) + "held"

    def holds(self, tenant: str) -> str:
        return self.prefix(tenant) + "holds"

    def reclaimed(self, tenant: str) -> str:
        return self.prefix(tenant) + "reclaimed"

    def evidence(self, model: str) -> str:
        """Output tokens the fleet has seen from `model`, newest first."""
        checked = check_name(model, "model", MODEL, InvalidNameError)
        return f"{hash_tag(self.namespace)}:budget:evidence:{checked}"

    def charge(self, tenant: str, charge_id: str) -> str:
        return self.prefix(tenant) + "charge:" + check_charge_id(charge_id)

    def day(self, tenant: str, day: str) -> str:
        """The spend hash of a UTC day, `day` as "YYYY-MM-DD"."""
        return self.prefix(tenant) + "day:" + day

    def month(self, tenant: str, month: str) -> str:
        """The spend hash of a UTC month, `month` as "YYYY-MM"."""
        return self.prefix(tenant) + "month:" + month

    def periods(self, tenant: str, around_ms: int) -> tuple[list[str], list[str]]:
        """The keys a script may need for its day and month, and their periods.

        Day, day, month, month of the instants `PERIOD_SLACK_MS` before and after
        `around_ms`: one of each is the script's when its clock is that close.
        """
        (day_a, month_a), (day_b, month_b) = (
            utc_periods(around_ms - PERIOD_SLACK_MS),
            utc_periods(around_ms + PERIOD_SLACK_MS),
        )
        names = [day_a, day_b, month_a, month_b]
        keys = [self.day(tenant, day_a), self.day(tenant, day_b)]
        keys += [self.month(tenant, month_a), self.month(tenant, month_b)]
        return keys, names
