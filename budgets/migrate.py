"""Moving tenants' budget keys from the released layout to the current one.

The released version kept a tenant's keys under the namespace's hash tag,
``{N}:budget:t:<tenant>:<rest>``; the current one under the tenant's own,
``{N/<tenant>}:budget:<rest>`` (`budgets.keys`). `migrate_keys` moves every old key:

- new name free: the old key is copied there with its remaining TTL, then deleted;
- new name taken (workers of this version wrote it first): a day's or a month's
  counters are added into it (HINCRBY per field); any other key (limits, holds, a
  charge) keeps the new one, reported as a conflict. The old key is deleted.

It is safe to run twice and from several processes at once. Each key goes through
(1) a claim (`lua/migrate/claim.lua`): RENAME of the old key to a name of this claim's
own in the same slot, noted in a set of claims, so one process wins each key;
(2) the write under the new name (`lua/migrate/apply.lua`), on the new key's slot, which
records the claim as applied in the same script; (3) the release: DEL of the claim and
its note. A run stopped between (1) and (3) leaves a claim a later run finishes, and the
record makes (2) happen once per claim. Nothing crosses slots by RENAME, and the copy is
written field by field (HSET or ZADD, then PEXPIRE), so it also works on a Redis Cluster,
and for ACL users that may not RESTORE (a @dangerous command).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import count
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster

from budgets.keys import CHARGE, PLAIN, BudgetKeys, utc_periods
from rediskit import LuaScripts, hash_tag, raise_if_error, text

__all__ = ["MigrationReport", "migrate_keys", "old_keys_present"]

# A live run holds a claim for milliseconds: one this old was left by a run that stopped.
# (Finishing a claim its run still holds is safe too, only wasted work.)
STALE_CLAIM_MS = 60_000
# How long a tenant's record of applied claims outlives the last one.
APPLIED_TTL_MS = 7 * 86_400_000
BATCH = 500
_SHOWN_CONFLICTS = 100
_DAY_MS = 86_400_000
_FIXED = frozenset({"limits", "held", "holds", "reclaimed"})
_COUNTERS = ("day:", "month:")


# Sent whole (EVAL): a migration runs once, on whatever Redis has loaded.
_SCRIPTS = LuaScripts("budgets", "lua/migrate", library=False)


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What `migrate_keys` did, or with `dry_run` would do, counted in old keys."""

    moved: int = 0  # copied to a free new name
    merged: int = 0  # day or month counters added into the new key
    kept: int = 0  # the new key existed and was kept; the old one was dropped
    skipped: int = 0  # names under the old prefix that are no budget key, left alone
    tenants: int = 0  # tenants with an old key
    conflicts: tuple[str, ...] = ()  # new keys that existed (merged or kept), the first 100
    dry_run: bool = False

    @property
    def changed(self) -> int:
        """Old keys moved, merged or dropped."""
        return self.moved + self.merged + self.kept


@dataclass(frozen=True, slots=True)
class _Move:
    """One old key (or its claim, `source`) and where it goes."""

    tenant: str
    rest: str
    source: str
    new: str

    @property
    def merge(self) -> bool:
        return self.rest.startswith(_COUNTERS)


@dataclass
class _Tally:
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("moved", "merged", "kept", "skipped"), 0)
    )
    tenants: set[str] = field(default_factory=set)
    conflicts: list[str] = field(default_factory=list)

    def add(self, move: _Move, outcome: str) -> None:
        self.tenants.add(move.tenant)
        self.counts[outcome] += 1
        if outcome in ("merged", "kept") and len(self.conflicts) < _SHOWN_CONFLICTS:
            self.conflicts.append(move.new)

    def report(self, dry_run: bool) -> MigrationReport:
        return MigrationReport(
            **self.counts,
            tenants=len(self.tenants),
            conflicts=tuple(self.conflicts),
            dry_run=dry_run,
        )


class _Names:
    """The old names, the claims' names and the new names of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.keys = BudgetKeys(namespace)
        tag = hash_tag(namespace)
        self.old_prefix = f"{tag}:budget:t:"
        self.claims = f"{tag}:budget:migrating"
        self._claim_prefix = self.claims + ":"
        self._run = secrets.token_hex(4)
        self._seq = count()

    def old(self, tenant: str, rest: str) -> str:
        return f"{self.old_prefix}{tenant}:{rest}"

    def parse_old(self, name: str) -> _Move | None:
        """The move of old key `name`; None for a name that is no budget key."""
        tenant, _, rest = name.removeprefix(self.old_prefix).partition(":")
        if not name.startswith(self.old_prefix) or not _is_budget_key(tenant, rest):
            return None
        return _Move(tenant, rest, name, self.keys.prefix(tenant) + rest)

    def claim(self, move: _Move) -> str:
        """A name of this claim's own: when, the run, a sequence number, the tenant, the rest."""
        token = f"{int(time.time() * 1000)}.{self._run}.{next(self._seq)}"
        return f"{self._claim_prefix}{token}:{move.tenant}:{move.rest}"

    def parse_claim(self, name: str) -> tuple[int, _Move] | None:
        """When claim `name` was made (epoch ms) and its move; None if it is no claim."""
        token, _, tail = name.removeprefix(self._claim_prefix).partition(":")
        tenant, _, rest = tail.partition(":")
        made = token.partition(".")[0]
        if not name.startswith(self._claim_prefix) or not made.isdigit():
            return None
        if not _is_budget_key(tenant, rest):
            return None
        return int(made), _Move(tenant, rest, name, self.keys.prefix(tenant) + rest)

    def applied(self, tenant: str) -> str:
        return self.keys.prefix(tenant) + "migrated"


def _is_budget_key(tenant: str, rest: str) -> bool:
    if not PLAIN.valid(tenant):
        return False
    if rest in _FIXED:
        return True
    kind, _, name = rest.partition(":")
    if kind == "charge":
        return CHARGE.valid(name)
    return kind in ("day", "month") and PLAIN.valid(name)


async def migrate_keys(
    redis: Redis, namespace: str = "relevo", *, dry_run: bool = False, batch: int = BATCH
) -> MigrationReport:
    """Move every budget key of `namespace`'s released layout to its current name.

    `redis` is a plain client or a `RedisCluster` (the old keys share the namespace's
    slot: its node is scanned). With `dry_run`, nothing is written: the report says
    what a run would do now. Redis failures surface as `redis.exceptions.RedisError`.
    """
    names = _Names(namespace)
    tally = _Tally()
    if not dry_run:
        await _finish_stale_claims(redis, names, tally)
    async for page in _scan(redis, names.old_prefix + "*", batch):
        moves = [move for name in page if (move := names.parse_old(name)) is not None]
        tally.counts["skipped"] += len(page) - len(moves)
        if dry_run:
            await _preview(redis, moves, tally)
        else:
            await _move_claimed(redis, names, [(m, names.claim(m)) for m in moves], tally)
    return tally.report(dry_run)


async def old_keys_present(redis: Redis, namespace: str = "relevo") -> bool:
    """Whether a tenant of the tenants set has old-layout limits, holds or recent spend,
    or a claim is unfinished: a few EXISTS for a thousand tenants, no scan.

    Old days and months of tenants idle since are not looked for: `migrate_keys` is.
    """
    names = _Names(namespace)
    if await redis.scard(names.claims):
        return True
    now = int(time.time() * 1000)
    day, month = utc_periods(now)
    yesterday = utc_periods(now - _DAY_MS)[0]
    last_month = (date.fromisoformat(day).replace(day=1) - timedelta(days=1)).isoformat()[:7]
    rests = ["limits", "held", f"day:{day}", f"day:{yesterday}"]
    rests += [f"month:{month}", f"month:{last_month}"]
    cursor = 0
    while True:
        cursor, tenants = await redis.sscan(names.keys.tenants(), cursor, count=BATCH)
        keys = [names.old(t, rest) for t in map(text, tenants) for rest in rests]
        if keys and await redis.exists(*keys):
            return True
        if int(cursor) == 0:
            return False


async def _scan(redis: Redis, match: str, batch: int) -> AsyncIterator[list[str]]:
    """SCAN for `match`, page by page; on a Cluster, on the node of `match`'s slot only."""
    options: dict[str, Any] = {}
    if isinstance(redis, RedisCluster):
        options["target_nodes"] = redis.get_node_from_key(match)
    cursor = 0
    while True:
        at, page = await redis.scan(cursor, match=match, count=batch, **options)
        # A cluster client answers with a cursor per node: here, of the one node.
        (cursor,) = at.values() if isinstance(at, dict) else (at,)
        if page:
            yield [text(name) for name in page]
        if cursor == 0:
            return


async def _send(redis: Redis, queue: Callable[[Pipeline], None]) -> list[Any]:
    """One pipeline's replies, an error in the place of a command that failed."""
    async with redis.pipeline(transaction=False) as pipe:
        queue(pipe)
        return list(await pipe.execute(raise_on_error=False))


async def _preview(redis: Redis, moves: Sequence[_Move], tally: _Tally) -> None:
    def queue(pipe: Pipeline) -> None:
        for move in moves:
            pipe.exists(move.new)

    for move, taken in zip(moves, await _send(redis, queue), strict=True):
        raise_if_error(taken)
        tally.add(move, ("merged" if move.merge else "kept") if taken else "moved")


async def _finish_stale_claims(redis: Redis, names: _Names, tally: _Tally) -> None:
    """Finish the claims of runs that stopped before releasing them."""
    oldest = int(time.time() * 1000) - STALE_CLAIM_MS
    stale: list[tuple[_Move, str]] = []
    for member in map(text, await redis.smembers(names.claims)):
        parsed = names.parse_claim(member)
        if parsed is None:
            await redis.srem(names.claims, member)
        elif parsed[0] < oldest:
            stale.append((parsed[1], member))
    for start in range(0, len(stale), BATCH):
        await _move_claimed(redis, names, stale[start : start + BATCH], tally)


async def _move_claimed(
    redis: Redis, names: _Names, claims: Sequence[tuple[_Move, str]], tally: _Tally
) -> None:
    """Claim each move's source (or read a claim already made), write it under its new
    name, release the claims written; the first error is raised once the rest are done."""

    def claim(pipe: Pipeline) -> None:
        for move, name in claims:
            _SCRIPTS.queue_whole(pipe, "claim", [move.source, name, names.claims], [])

    held: list[tuple[_Move, str, list[Any]]] = []
    for (move, name), reply in zip(claims, await _send(redis, claim), strict=True):
        if reply is not None:  # None: gone, another process took it
            held.append((move, name, raise_if_error(reply)))
    writes = [entry for entry in held if text(entry[2][0]) in _TYPES]

    def apply(pipe: Pipeline) -> None:
        for move, name, (kind, ttl, flat) in writes:
            mode = "merge" if move.merge else "keep"
            args = [name, APPLIED_TTL_MS, mode, text(kind), ttl, *flat]
            _SCRIPTS.queue_whole(pipe, "apply", [move.new, names.applied(move.tenant)], args)

    outcomes = await _send(redis, apply) if writes else []
    written = {name for (_, name, _), out in zip(writes, outcomes, strict=True) if _ok(out)}

    def release(pipe: Pipeline) -> None:
        for move, name, (kind, _, _) in held:
            if text(kind) == "none" or name in written:  # expired, or written
                pipe.delete(name)
            elif text(kind) not in _TYPES:  # no type budgets writes: not ours, put back
                pipe.renamenx(name, names.old(move.tenant, move.rest))
                tally.counts["skipped"] += 1
            else:
                continue  # the write failed: a later run finishes this claim
            pipe.srem(names.claims, name)
        if written:
            pipe.sadd(names.keys.tenants(), *{move.tenant for move, _, _ in writes})

    await _send(redis, release)
    for (move, _, _), outcome in zip(writes, outcomes, strict=True):
        if _ok(outcome) and text(outcome) != "done":
            tally.add(move, text(outcome))
    for outcome in outcomes:
        raise_if_error(outcome)


_TYPES = frozenset({"hash", "zset"})


def _ok(reply: object) -> bool:
    return not isinstance(reply, BaseException)
