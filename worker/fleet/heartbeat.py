"""Each worker process says, every few seconds, that it lives and what it does.

What an operator asks first in an incident: which workers are alive, how many
processes each node runs, how many turns each has in flight, which version, and
whether it reaches Redis. A process writes its `Heartbeat` (`TurnKeys.worker`) and its
time in `TurnKeys.workers`; a reader lists the processes seen within `KEPT_S`, alive
when seen within `ALIVE_S`. A process that died stays listed, silent, until `KEPT_S`.
A heartbeat says its schema version (`worker.fleet.schema`); one this release cannot read
(a newer release's, or damaged) is listed by its process name among the unreadable.
A time ahead of now by more than `AHEAD_S` (a hand edit, a clock far off) is no sign of
life: such a member of `TurnKeys.workers` is dropped by the next beat, and such a
heartbeat is not alive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from breakers.schema import ReadProblem
from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
from budgets.scripts import SCRIPTS as BUDGET_SCRIPTS
from rediskit import text
from worker.fleet.errors import Unreadable
from worker.fleet.fairqueue import SCRIPTS as FAIR_SCRIPTS
from worker.fleet.schema import HEARTBEAT_SCHEMA, log_unreadable, read_stored
from worker.fleet.turnstore import TurnKeys
from worker.guard.allowance import OfflineAllowance

__all__ = [
    "AHEAD_S",
    "ALIVE_S",
    "BEAT_EVERY_S",
    "KEPT_S",
    "Heartbeat",
    "Heartbeats",
    "Node",
    "Unreached",
    "beat",
    "keep_scripts",
    "nodes",
    "read_heartbeats",
    "share_rooms",
    "unreached",
]

BEAT_EVERY_S = 5.0
# Three beats missed: the process is gone (or cannot reach Redis, which it also says).
ALIVE_S = 3 * BEAT_EVERY_S
KEPT_S = 600
# Hosts' clocks differ a little: a time this far ahead still counts, and no further.
AHEAD_S = ALIVE_S
_READ = 500


class Heartbeat(BaseModel):
    """One worker process as it last described itself."""

    # A newer release may say more: readers take what they know.
    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str
    pid: int
    version: str
    in_flight: int
    local_breakers: bool
    started_ms: int
    seen_ms: int = 0
    # relevo 0.1.0 ignores it: heartbeats were read leniently from the start.
    schema_version: int = HEARTBEAT_SCHEMA
    # The fleet settings it runs with (`worker.fleet.agreement.FleetShape.header`); None
    # from a release that did not say.
    fleet: str | None = None

    @property
    def process(self) -> str:
        return f"{self.host}:{self.pid}"

    def alive(self, now_ms: int) -> bool:
        return -AHEAD_S * 1000 <= now_ms - self.seen_ms <= ALIVE_S * 1000


async def beat(redis: Redis, keys: TurnKeys, heartbeat: Heartbeat) -> int:
    """Write `heartbeat` (its `seen_ms` now) and drop processes silent past `KEPT_S` or
    seen further ahead than `AHEAD_S` (each would count as alive for as long as it says);
    return how many processes are alive (seen within `ALIVE_S`), this one included."""
    now_ms = int(time.time() * 1000)
    ahead_ms = now_ms + int(AHEAD_S * 1000)
    fresh = heartbeat.model_copy(update={"seen_ms": now_ms})
    pipe = redis.pipeline(transaction=False)
    pipe.set(keys.worker(fresh.process), fresh.model_dump_json(), ex=KEPT_S)
    pipe.zadd(keys.workers, {fresh.process: now_ms})
    pipe.zremrangebyscore(keys.workers, "-inf", now_ms - KEPT_S * 1000)
    pipe.zremrangebyscore(keys.workers, f"({ahead_ms}", "+inf")
    pipe.expire(keys.workers, KEPT_S)
    pipe.zcount(keys.workers, now_ms - int(ALIVE_S * 1000), ahead_ms)
    replies = await pipe.execute()
    if replies[3]:
        # A live process writes its own time again within a beat: none is lost.
        log_unreadable(
            Unreadable(
                "worker time",
                ReadProblem(f"{replies[3]} process(es) seen ahead of now by over {AHEAD_S:g} s"),
            )
        )
    return max(1, int(replies[-1]))


async def keep_scripts(turns: Redis, shared: Redis) -> int:
    """Load, where Redis lost them (a restart, a failover), the scripts that other roles
    run by SHA only and may not load (deploy/redis/users.acl.in): the producer's fair
    enqueue on the turn store, the viewer's breaker inspection and budget report on the
    shared store. Three SCRIPT EXISTS while they are there; how many were loaded."""
    loaded = await FAIR_SCRIPTS.keep_loaded(turns, ("enqueue",))
    loaded += await BREAKER_SCRIPTS.keep_loaded(shared, ("inspect",))
    return loaded + await BUDGET_SCRIPTS.keep_loaded(shared, ("report",))


# A short room stays in the fleet's record until a process hears the tenant's room again.
ROOMS_KEPT_S = 86_400


async def share_rooms(redis: Redis, keys: TurnKeys, offline: OfflineAllowance) -> None:
    """Tell the fleet the short rooms this process heard since its last heartbeat (and
    drop those no longer short), then take every process's: a tenant that ran out of
    room in one process is not given the allowance's share offline in another."""
    heard = offline.take_heard()
    short = offline.short_below()
    low = {tenant: room for tenant, room in heard.items() if room < short}
    # Only a short room the record holds needs dropping: a busy fleet's every tenant would
    # make each heartbeat long.
    high = [t for t, room in heard.items() if room >= short and offline.fleet_knows(t)]
    try:
        pipe = redis.pipeline(transaction=False)
        if low:
            pipe.hset(keys.offline_rooms, mapping=low)  # type: ignore[arg-type]
            pipe.expire(keys.offline_rooms, ROOMS_KEPT_S)
        if high:
            pipe.hdel(keys.offline_rooms, *high)
        pipe.hgetall(keys.offline_rooms)
        replies = await pipe.execute()
    except BaseException:
        offline.untaken(heard)
        raise
    rooms: dict[str, int] = {}
    for tenant, room in replies[-1].items():
        try:
            rooms[text(tenant)] = max(0, int(room))
        except ValueError:
            continue  # damaged: that tenant keeps this process's own word
    offline.fleet_said(rooms)


@dataclass(frozen=True)
class Heartbeats:
    """The heartbeats read, by host then pid, and the processes whose heartbeat this
    release could not read."""

    beats: list[Heartbeat]
    unreadable: list[str]


async def read_heartbeats(redis: Redis, keys: TurnKeys) -> Heartbeats:
    """The processes seen within `KEPT_S`."""
    since_ms = int(time.time() * 1000) - KEPT_S * 1000
    names = await redis.zrange(
        keys.workers, "+inf", since_ms, desc=True, byscore=True, offset=0, num=_READ
    )
    if not names:
        return Heartbeats([], [])
    processes = [text(n) for n in names]
    raws = await redis.mget([keys.worker(p) for p in processes])
    beats, unreadable = [], []
    for process, raw in zip(processes, raws, strict=True):
        if raw is None:
            continue
        try:
            beats.append(
                read_stored(Heartbeat, raw, newest=HEARTBEAT_SCHEMA, what=f"heartbeat of {process}")
            )
        except Unreadable as exc:
            log_unreadable(exc)
            unreadable.append(process)
    return Heartbeats(sorted(beats, key=lambda b: (b.host, b.pid)), sorted(unreadable))


@dataclass(frozen=True)
class Node:
    """One host's worker processes, as an operator reads them."""

    host: str
    processes: int  # seen within KEPT_S
    alive: int
    in_flight: int  # of the live ones
    versions: tuple[str, ...]
    local_breakers: bool  # a live process cannot reach Redis
    seen_ms: int

    @property
    def healthy(self) -> bool:
        return self.alive == self.processes and not self.local_breakers


def nodes(beats: list[Heartbeat], now_ms: int) -> list[Node]:
    """The processes grouped by host, in host order."""
    hosts: dict[str, list[Heartbeat]] = {}
    for b in beats:
        hosts.setdefault(b.host, []).append(b)
    found = []
    for host in sorted(hosts):
        group = hosts[host]
        live = [b for b in group if b.alive(now_ms)]
        found.append(
            Node(
                host,
                len(group),
                len(live),
                sum(b.in_flight for b in live),
                tuple(sorted({b.version for b in group})),
                any(b.local_breakers for b in live),
                max(b.seen_ms for b in group),
            )
        )
    return found


@dataclass(frozen=True)
class Unreached:
    """The worker processes that may not be reading the shared state now."""

    cut_off: list[Heartbeat]  # alive, and said they could not reach Redis
    silent: list[Heartbeat]  # not heard from within ALIVE_S: stopped, or cut off from Redis

    def lines(self) -> list[str]:
        """What an operator is told, a sentence a group (none when every process reaches Redis)."""
        said = []
        if self.cut_off:
            names = ", ".join(b.process for b in self.cut_off)
            said.append(
                f"{len(self.cut_off)} worker process(es) could not reach Redis at their last "
                f"heartbeat and run turns until they reach it again: {names}"
            )
        if self.silent:
            said.append(
                f"{len(self.silent)} worker process(es) silent for more than {ALIVE_S:.0f} s "
                "(stopped, or cut off from Redis): the console's fleet page lists them."
            )
        return said


def unreached(beats: list[Heartbeat], now_ms: int) -> Unreached:
    """What a person who just flipped the kill switch needs to know: the processes that
    run turns on their own memory of it until they reach Redis again, if they are running."""
    return Unreached(
        [b for b in beats if b.alive(now_ms) and b.local_breakers],
        [b for b in beats if not b.alive(now_ms)],
    )
