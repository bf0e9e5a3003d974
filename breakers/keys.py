"""Every Redis key `breakers` writes, in one place.

All keys of a namespace share the Redis Cluster hash tag ``{namespace}`` (the same tag as
`budgets`' keys), so one Lua script may touch any of them; every key a script touches is
passed in KEYS. Names follow `NAME_RULE`, the namespace `rediskit.NAMESPACE`. Layout
(``N`` = namespace)::

    {N}:kill                  hash    who, why, since_ms            (no TTL: set by a person)
    {N}:epoch                 hash    id, off_by                    (no TTL: this data's identity)
    {N}:held                  stream  turn_id, payload              (no TTL: turns kept for replay)
    {N}:br:<scope>            hash    state, opened_at_ms, until_ms, break_ms, streak, pinned
    {N}:win:<scope>           hash    c<bucket> / f<bucket> call and failure counts
    {N}:probe:<scope>         zset    probe holder -> slot expiry (ms)
    {N}:cool:<account>|<model> string cooldown end (ms), PX = the cooldown (or the gone skip)
    {N}:exh:<account>         string  exhausted-mark end (ms), PX = the mark's TTL
    {N}:exh:<account>|<model> string  the same, for one model's quota on the account
    {N}:idx:scopes            zset    scope -> last seen (ms)        operators' listing
    {N}:idx:cool              zset    "<account>|<model>" -> end (ms)
    {N}:idx:exh               zset    account (or "<account>|<model>") -> end (ms)
    {N}:idx:gone              zset    "<account>|<model>" -> end (ms) of a gone mark
    {N}:fb:<account>|<model>:<slot>  hash  first-byte latency bucket -> count, one window
    {N}:hedge:budget          hash    milli: hedges the fleet may still start, in thousandths

Every key a worker writes carries a TTL that the Lua scripts refresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from breakers.errors import InvalidNameError
from rediskit import NAMESPACE, NameRule, check_name, hash_tag

__all__ = ["MAX_NAME_CHARS", "NAME_ALPHABET", "NAME_RULE", "Keys", "validate_name"]

MAX_NAME_CHARS = 200
NAME_ALPHABET = "A-Z a-z 0-9 and . _ - : / @"
# Scopes, accounts, models, holders and turn ids: wide enough for "model:openai/gpt-5@azure".
NAME_RULE = NameRule(
    chars="A-Za-z0-9._:/@-",
    first="A-Za-z0-9",
    max_chars=MAX_NAME_CHARS,
    says=NAME_ALPHABET,
    first_says="a letter or digit",
    dots=False,
)
PAIR_SEPARATOR = "|"  # outside the alphabet, so "<account>|<model>" splits back unambiguously


def validate_name(name: str, what: str = "name") -> str:
    """Return `name` if it may appear inside a key, else raise `InvalidNameError` saying why.

    Allowed: 1-200 characters from A-Z a-z 0-9 . _ - : / @, starting with a letter or
    digit, without "..". So ``vendor:openai`` and ``model:openai/gpt-5@azure-east`` pass;
    ``*``, ``{``, whitespace and empty names do not.
    """
    return check_name(name, what, NAME_RULE, InvalidNameError)


@dataclass(frozen=True)
class Keys:
    """Key names under one namespace (default ``relevo``)."""

    namespace: str = "relevo"

    def __post_init__(self) -> None:
        check_name(self.namespace, "namespace", NAMESPACE, InvalidNameError)

    @property
    def _prefix(self) -> str:
        return hash_tag(self.namespace)

    @property
    def kill(self) -> str:
        """The kill switch hash."""
        return f"{self._prefix}:kill"

    @property
    def epoch(self) -> str:
        """The store's epoch: a random id that is gone when Redis loses its data."""
        return f"{self._prefix}:epoch"

    @property
    def held(self) -> str:
        """The stream of turns held while the kill switch was on."""
        return f"{self._prefix}:held"

    @property
    def scope_index(self) -> str:
        """Scopes the fleet has recorded outcomes for."""
        return f"{self._prefix}:idx:scopes"

    @property
    def cooldown_index(self) -> str:
        """Pairs in cooldown, scored by end time."""
        return f"{self._prefix}:idx:cool"

    @property
    def exhausted_index(self) -> str:
        """Accounts marked exhausted, scored by end time."""
        return f"{self._prefix}:idx:exh"

    @property
    def gone_index(self) -> str:
        """Pairs whose model the provider does not know (their cooldown is a gone mark)."""
        return f"{self._prefix}:idx:gone"

    def breaker(self, scope: str) -> str:
        """The breaker's state hash."""
        return f"{self._prefix}:br:{validate_name(scope, 'scope')}"

    def window(self, scope: str) -> str:
        """The breaker's sliding window of call and failure counts."""
        return f"{self._prefix}:win:{validate_name(scope, 'scope')}"

    def probe(self, scope: str) -> str:
        """The breaker's half-open probe slots."""
        return f"{self._prefix}:probe:{validate_name(scope, 'scope')}"

    def cooldown(self, account: str, model: str) -> str:
        """The cooldown of one (provider account, model) pair."""
        return f"{self._prefix}:cool:{pair_member(account, model)}"

    def first_byte(self, account: str, model: str, slot: int) -> str:
        """The first-byte latency histogram of one (account, model) pair in window `slot`."""
        return f"{self._prefix}:fb:{pair_member(account, model)}:{slot}"

    @property
    def hedge_budget(self) -> str:
        """The hedges the fleet may still start (a token bucket)."""
        return f"{self._prefix}:hedge:budget"

    def exhausted(self, account: str, model: str | None = None) -> str:
        """The exhausted mark of one provider account, or of one model's quota on it."""
        return f"{self._prefix}:exh:{exhausted_member(account, model)}"


def pair_member(account: str, model: str) -> str:
    """The ``<account>|<model>`` form of a pair used in keys and the cooldown index."""
    return f"{validate_name(account, 'account')}{PAIR_SEPARATOR}{validate_name(model, 'model')}"


def exhausted_member(account: str, model: str | None = None) -> str:
    """The account, or ``<account>|<model>``, as exhausted keys and their index name it."""
    return validate_name(account, "account") if model is None else pair_member(account, model)


def split_pair(member: str) -> tuple[str, str]:
    """Undo `pair_member`."""
    account, _, model = member.partition(PAIR_SEPARATOR)
    return account, model
