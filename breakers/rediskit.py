"""The Redis plumbing `breakers` and `budgets` share: one way to do each of these.

- Keys: every key of a namespace starts with its Redis Cluster hash tag (`hash_tag`), or a
  shard's tag (one tenant's budget keys), and every key a Lua script touches arrives in
  KEYS with one tag: each script runs on one slot, so the state can be sharded on Cluster.
- Names: `check_name` checks a name against the `NameRule` of its kind, one message format.
- Scripts: `LuaScripts` reads ``<package>/lua/*.lua`` with ``breakers/lua/clock.lua`` and the
  package's ``lua/lib.lua`` prepended, queues EVALSHA on a caller's pipeline and, for a
  command sent alone, reloads the scripts once on NOSCRIPT.
- Time: ARGV[1] of every script is the clock: "" for the Redis server's TIME, or epoch
  milliseconds from a test's `ManualClock`.
- Failures: `STORE_ERRORS` is what a call to Redis raises when the store is slow, gone or
  refusing us; `FORBIDDEN_ERRORS` is the part of it that means "refusing".

`budgets` imports this module; `breakers` never imports `budgets`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeAlias, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
    NoScriptError,
    RedisError,
)

from breakers.errors import StoreForbiddenError, StoreUnavailableError

__all__ = [
    "FORBIDDEN_ERRORS",
    "NAMESPACE",
    "STORE_ERRORS",
    "LuaScripts",
    "ManualClock",
    "NameRule",
    "Parse",
    "check_name",
    "hash_tag",
    "raise_if_error",
    "raise_if_forbidden",
    "read_clock",
    "text",
    "unavailable_as_error",
]

T = TypeVar("T")
Parse: TypeAlias = Callable[[object], Awaitable[T]]

# -- Redis failures ------------------------------------------------------------------------

# What "Redis is slow, gone or refusing us" looks like from redis-py and asyncio.
STORE_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
# What "Redis answered, and said no" looks like: a configuration problem, not an outage.
FORBIDDEN_ERRORS: tuple[type[BaseException], ...] = (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
)


def raise_if_forbidden(exc: BaseException) -> None:
    """Raise `StoreForbiddenError` if Redis refused us rather than failed to answer."""
    if isinstance(exc, FORBIDDEN_ERRORS):
        raise StoreForbiddenError(f"Redis refused this client: {exc}") from exc


@asynccontextmanager
async def unavailable_as_error(what: str) -> AsyncIterator[None]:
    """Raise `StoreUnavailableError` (naming `what`) instead of a redis-py or socket error."""
    try:
        yield
    except STORE_ERRORS as exc:
        raise_if_forbidden(exc)
        raise StoreUnavailableError(f"{what}: Redis did not answer ({type(exc).__name__})") from exc


# -- Keys and the names inside them ----------------------------------------------------------


def hash_tag(namespace: str, shard: str | None = None) -> str:
    """The first segment of every key under `namespace` (checked with `NAMESPACE`).

    With `shard` (e.g. a tenant id), the tag of that part of the namespace's state: its
    keys share a slot of their own, so on a Redis Cluster the shards spread over the
    nodes. The "/" between them is outside `NAMESPACE`: no namespace's tag equals a shard's.
    """
    if shard is None:
        return "{" + namespace + "}"
    return "{" + namespace + "/" + shard + "}"


@dataclass(frozen=True)
class NameRule:
    """What one kind of name may hold: `chars` and `first` are regex class bodies."""

    chars: str
    first: str
    max_chars: int
    says: str  # `chars` for people
    first_says: str  # `first` for people
    dots: bool = True  # whether ".." may appear
    _valid: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_valid", re.compile(f"[{self.first}][{self.chars}]*"))

    def valid(self, value: str) -> bool:
        """Whether `value` follows the rule (in C: every key of every turn is checked)."""
        return (
            len(value) <= self.max_chars
            and self._valid.fullmatch(value) is not None
            and (self.dots or ".." not in value)
        )

    def broken(self, value: str) -> str:
        """What `value` must do and does not, completing "<what> <value> must ..."."""
        if not value:
            return "not be empty"
        if len(value) > self.max_chars:
            return f"be at most {self.max_chars} characters, not {len(value)}"
        usage = f"start with {self.first_says} and use only {self.says}"
        for index, char in enumerate(value):
            if not re.fullmatch(f"[{self.chars}]", char):
                kind = "character" if char.isascii() else "non-ASCII character"
                return f"{usage} (found the {kind} {char!r} at position {index})"
        if not re.fullmatch(f"[{self.first}]", value[0]):
            return f"{usage} (it starts with {value[0]!r})"
        return "not contain '..'"


# One namespace, one hash tag, for both packages: what each of them accepted before.
NAMESPACE = NameRule(
    chars="A-Za-z0-9_.:-",
    first="A-Za-z0-9",
    max_chars=64,
    says="ASCII letters, digits, '_', '.', ':' and '-'",
    first_says="a letter or digit",
    dots=False,
)
_SHOWN_CHARS = 40


def check_name(value: object, what: str, rule: NameRule, error: type[Exception]) -> str:
    """`value` if it follows `rule`, else `error("<what> <value> must ...")` saying why."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, not {type(value).__name__}")
    if rule.valid(value):
        return value
    shown = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…"
    raise error(f"{what} {shown!r} must {rule.broken(value)}")


# -- Lua scripts -----------------------------------------------------------------------------

_PREPENDED = ("clock", "lib")  # libraries, not scripts of their own


def _read(package: str, name: str) -> str:
    return resources.files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


class LuaScripts:
    """One package's Lua scripts, called by SHA1; reading them never touches Redis."""

    def __init__(self, package: str) -> None:
        self.lib = lib = _read("breakers", "clock") + "\n" + _read(package, "lib") + "\n"
        names = sorted(
            entry.name.removesuffix(".lua")
            for entry in resources.files(package).joinpath("lua").iterdir()
            if entry.name.endswith(".lua")
        )
        self.bodies = {n: lib + _read(package, n) for n in names if n not in _PREPENDED}
        self._shas = {
            name: hashlib.sha1(body.encode(), usedforsecurity=False).hexdigest()
            for name, body in self.bodies.items()
        }

    def sha(self, name: str) -> str:
        """The SHA1 an EVALSHA of `name` is sent with."""
        return self._shas[name]

    def queue(
        self,
        pipe: Pipeline,
        name: str,
        keys: list[str],
        args: list[str | int],
        now_ms: int | None = None,
    ) -> None:
        """Queue one EVALSHA of `name` on `pipe`: ARGV[1] is `now_ms` (None: server TIME)."""
        clock = "" if now_ms is None else now_ms
        # As a raw command: redis-py's cluster pipeline blocks its `evalsha` method, yet
        # routes a raw EVALSHA by its keys (one slot per script, as every key is tagged).
        pipe.execute_command("EVALSHA", self._shas[name], len(keys), *keys, clock, *args)

    async def load(self, redis: Redis) -> None:
        """SCRIPT LOAD every script in one round trip (after a restart or SCRIPT FLUSH);
        on a Redis Cluster, one call per script, each sent to every primary."""
        if isinstance(redis, RedisCluster):
            for body in self.bodies.values():
                await redis.script_load(body)
            return
        async with redis.pipeline(transaction=False) as pipe:
            for body in self.bodies.values():
                pipe.script_load(body)
            await pipe.execute()

    async def keep_loaded(self, redis: Redis, names: tuple[str, ...]) -> int:
        """SCRIPT LOAD those of `names` the server lacks, for users who may run them by SHA
        and not load them (deploy/redis/users.acl.in); how many were missing."""
        if isinstance(redis, RedisCluster):  # per primary: load them all, each everywhere
            for name in names:
                await redis.script_load(self.bodies[name])
            return len(names)
        there = await redis.script_exists(*(self._shas[n] for n in names))
        missing = [name for name, known in zip(names, there, strict=True) if not known]
        if missing:
            async with redis.pipeline(transaction=False) as pipe:
                for name in missing:
                    pipe.script_load(self.bodies[name])
                await pipe.execute()
        return len(missing)

    async def run(self, redis: Redis, queue: Callable[[Pipeline], Parse[T]]) -> T:
        """Send what `queue` queues on a pipeline of its own; reload once on NOSCRIPT.

        `parse` gets the first reply: that of the script (what `queue` queues after it is
        bookkeeping, such as the ledger's tenants set)."""
        for attempt in range(2):
            async with redis.pipeline(transaction=False) as pipe:
                parse = queue(pipe)
                reply = (await pipe.execute(raise_on_error=False))[0]
            if isinstance(reply, NoScriptError) and attempt == 0:
                await self.load(redis)
                continue
            return await parse(reply)
        raise AssertionError("unreachable")  # pragma: no cover


def read_clock(clock_ms: Callable[[], int] | None) -> int | None:
    """What ARGV[1] carries: the time of a test's clock, or None for the server's TIME."""
    return None if clock_ms is None else int(clock_ms())


def raise_if_error(reply: object) -> Any:
    """Return `reply` unless it is the exception a pipeline handed over in its place."""
    if isinstance(reply, BaseException):
        raise reply
    return reply


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


# -- A clock for tests -----------------------------------------------------------------------


class ManualClock:
    """Epoch milliseconds that move only when told: a store's or ledger's `clock_ms`.

    The scripts compare times with it; Redis key TTLs still run on real time, so a test
    advances it by less than the TTLs it relies on.
    """

    def __init__(self, start: datetime | int) -> None:
        self.now_ms = start if isinstance(start, int) else _to_ms(start)

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` (whole milliseconds)."""
        self.now_ms += round(seconds * 1000)

    def set(self, when: datetime) -> None:
        """Jump to `when` (an aware datetime)."""
        self.now_ms = _to_ms(when)


def _to_ms(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("ManualClock needs an aware datetime, e.g. datetime(..., tzinfo=UTC)")
    return int(when.astimezone(UTC).timestamp() * 1000)
