"""The fair queue in front of the broker: each tenant's turns wait their turn here.

A producer's publish lands in its tenant's queue (`enqueue_sync`, called by the broker
channel in place of its LPUSH); each worker's dispatcher moves turns on into the broker's
queue (`dispatch`), one Lua step that picks the least-served tenant (virtual time: turns
served / weight) whose limits allow it, and keeps the broker's queue short. A turn's
lease (`release`) is given back when it concludes; a dead worker's lease runs out.

Every key lives on the broker's Redis (`[redis] url`), under the namespace's hash tag,
because the step that moves a turn also pushes it onto the broker's queue: one server,
one atomic step, nothing lost or sent twice between them (docs/fairness.md).

    {N}:fair:pending    zset   "<tenant>|<seq>" (lexical): each tenant's turns, oldest first
    {N}:fair:msgs       hash   "<tenant>|<seq>" -> turn, times, input tokens, message
    {N}:fair:index      hash   turn id -> "<tenant>|<seq>", while queued
    {N}:fair:seq        string the queue's sequence number
    {N}:fair:ready      zset   tenant -> virtual time, tenants with turns to dispatch
    {N}:fair:parked     zset   tenant -> ms, tenants a limit holds back, until then
    {N}:fair:vtime      hash   tenant -> virtual time, tenants not in ready
    {N}:fair:clock      string the virtual clock
    {N}:fair:queued     hash   tenant -> turns queued
    {N}:fair:inflight   hash   tenant -> leases held
    {N}:fair:leases     zset   "<tenant>|<turn>" -> lease expiry ms
    {N}:fair:buckets    hash   tenant -> token buckets "turns|input tokens|ms"
    {N}:fair:expired    hash   turn id -> "<tenant>|<ms waited>", until its result is saved
    {N}:fair:deadlines  zset   "<tenant>|<seq>" -> queue deadline ms, while queued: each
                               round ends the turns past theirs, whatever holds the tenant
    {N}:fair:wake       list   at most one token: a turn arrived for an idle tenant, or a
                               lease was given back; idle dispatchers block on it (BLPOP)

None has a TTL: each is emptied by dispatch (turns), by expiry inside (leases), by a
dispatcher (`wake`), or is one field per tenant (`vtime`, `buckets`).

A key of another type than the one above (a hand edit, another tool) would fail every
round: each script looks at its keys' types first and deletes one of the wrong type
(what the others say is rebuilt from what is left: the queue from its entries, the
ready tenants and their counts from the queue, the lease counts from the leases), and
each is reported as `Unreadable` ("fair_key"). A lease whose expiry lies further ahead
than any holder takes is brought back to one lease from now ("lease").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import structlog
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

from breakers.schema import ReadProblem
from budgets.errors import InvalidAmountError
from budgets.shares import Share, Shares
from rediskit import LuaScripts, hash_tag, text
from worker.fleet.errors import Unreadable
from worker.fleet.schema import log_unreadable
from worker.fleet.turnstore import TurnKeys
from worker.turn.tokens import estimate_tokens
from worker.types import TurnRequest

__all__ = [
    "DEADLINE_HEADER",
    "SCRIPTS",
    "TENANT_HEADER",
    "TOKENS_HEADER",
    "DispatchRound",
    "FairKeys",
    "FairQueue",
    "FairTurn",
    "TenantLoad",
    "enqueue_sync",
]

SCRIPTS = LuaScripts("worker.fleet")
log = structlog.get_logger("relevo.fleet")
# What the fair queue needs of a turn, in its message's headers (`send_turn`); a message
# without them (an older producer's) goes straight to the broker's queue.
TENANT_HEADER = "relevo_tenant"
DEADLINE_HEADER = "relevo_queue_deadline_ms"
TOKENS_HEADER = "relevo_input_tokens"
log = structlog.get_logger("relevo.dispatch")


@dataclass(frozen=True, slots=True)
class FairTurn:
    """What the fair queue reads of a turn, in its message's headers: whose it is, its id
    (Celery's `id` header), how long it may wait, and the input tokens its tenant's
    bucket pays. `headers` writes them (`send_turn`), `read` reads them back (the broker
    channels, Redis's and RabbitMQ's, as they publish)."""

    tenant: str
    turn_id: str
    deadline_ms: int
    input_tokens: int

    @staticmethod
    def headers(turn: TurnRequest) -> dict[str, Any]:
        """The headers a turn's message carries for the fair queue."""
        return {
            TENANT_HEADER: turn.tenant_id,
            DEADLINE_HEADER: int(turn.deadline_s * 1000),
            TOKENS_HEADER: estimate_tokens(turn.messages, turn.tools),
        }

    @classmethod
    def read(cls, headers: Mapping[str, Any]) -> FairTurn | None:
        """The turn a message's headers describe; None: none for the fair queue (an older
        producer's message, or another task's)."""
        tenant = headers.get(TENANT_HEADER)
        if tenant is None:
            return None
        return cls(
            tenant, headers["id"], int(headers[DEADLINE_HEADER]), int(headers[TOKENS_HEADER])
        )

    def enqueue(self, client: Any, namespace: str, message: str) -> bool | None:
        """Queue the turn's broker `message` for its tenant (`enqueue_sync`)."""
        return enqueue_sync(
            client,
            namespace,
            tenant=self.tenant,
            turn_id=self.turn_id,
            deadline_ms=self.deadline_ms,
            input_tokens=self.input_tokens,
            message=message,
        )


@dataclass(frozen=True, slots=True)
class FairKeys:
    """The fair queue's keys under one namespace."""

    namespace: str = "relevo"

    def key(self, name: str) -> str:
        return f"{hash_tag(self.namespace)}:fair:{name}"

    def common(self) -> list[str]:
        """KEYS[1..8] of every script (lib.lua)."""
        names = ("pending", "msgs", "index", "ready", "parked", "vtime", "clock", "queued")
        return [self.key(n) for n in names]

    def index(self) -> str:
        return self.key("index")


@dataclass(frozen=True, slots=True)
class DispatchRound:
    """What one round did: turns moved (tenant, ms waited), tenants held (tenant, limit),
    how many turns it found past their queue deadline, the ms until the first parked
    tenant is looked at again (None: none parked), whether a round run at once would
    find more to move, the tenants whose stored share it could not read (served on
    the default share), the keys of the wrong type it set aside ("<key>|<type>") and
    how many leases' expiries it brought back to one lease."""

    moved: list[tuple[str, int]]
    held: list[tuple[str, str]]
    expired: int
    next_ms: int | None = None
    again: bool = False
    unreadable: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    clamped: int = 0

    @classmethod
    def from_reply(cls, reply: Any) -> DispatchRound:
        """The round `dispatch.lua` answered (release 0.1.0's answers the first five)."""
        moved, held, expired, next_ms, again = reply[:5]
        unreadable = [_name(t) for t in reply[5]] if len(reply) > 5 else []
        damaged = [_name(k) for k in reply[6]] if len(reply) > 6 else []
        clamped = int(reply[7]) if len(reply) > 7 else 0
        waits = [(tenant, int(ms)) for tenant, ms in _pairs(moved)]
        parked = None if int(next_ms) < 0 else int(next_ms)
        return cls(
            waits, _pairs(held), int(expired), parked, bool(again), unreadable, damaged, clamped
        )


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """A tenant's turns waiting in the fair queue and running under a lease, and its share
    (`own`: set for it; else the default). `unreadable`: why its stored share could not be
    read (dispatch then uses the default, which `share` is); `parked_until_ms`: while a
    limit holds it back, when it is looked at again (Redis server time, ms; a time past
    is the next round)."""

    tenant: str
    queued: int
    in_flight: int
    share: Share
    own: bool
    unreadable: str | None = None
    parked_until_ms: int | None = None


def _pairs(items: object) -> list[tuple[str, str]]:
    return [cast(tuple[str, str], tuple(_name(i).split("|", 1))) for i in cast(list[Any], items)]


def _name(value: object) -> str:
    """A stored name as text; bytes that are not UTF-8 (a hand edit) shown escaped."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def enqueue_sync(
    client: Any,
    namespace: str,
    *,
    tenant: str,
    turn_id: str,
    deadline_ms: int,
    input_tokens: int,
    message: str,
) -> bool | None:
    """Queue a broker message for its tenant, on a blocking client (the broker channel's);
    False when the turn is queued already. None when Redis lacks the script and this
    client may not run it otherwise (a producer runs it by SHA only: the workers load it,
    deploy/redis/users.acl.in): the caller sends the message straight to the queue."""
    fair = FairKeys(namespace)
    keys = [*fair.common(), fair.key("seq"), fair.key("wake"), fair.key("deadlines")]
    args = [tenant, turn_id, deadline_ms, input_tokens, message]
    try:
        return bool(SCRIPTS.call_sync(client, "enqueue", keys, args))
    except NoPermissionError:
        # No worker has loaded it since Redis started: the turn waits in the broker's
        # queue instead, outside the tenants' shares, rather than fail to be sent.
        log.warning("fair.enqueue_script_missing", turn_id=turn_id)
        return None


class FairQueue:
    """Dispatch rounds, lease releases and the tenants' load, on the broker's Redis."""

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "relevo",
        queue: str = "relevo",
        default: Share | None = None,
        lease_s: float = 300.0,
        blocking: Redis | None = None,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> None:
        """`queue`: the broker's queue the workers consume; `default`: the share of a tenant
        with none of its own; `lease_s`: how long a dead worker's lease holds; `blocking`:
        the client `wait` blocks on (its reads must outlast the wait), else `redis`;
        `on_unreadable` hears each damaged item a script set aside (the metrics; else it
        is logged)."""
        self.redis = redis
        self.on_unreadable = on_unreadable
        self.blocking = blocking or redis
        self.keys = FairKeys(namespace)
        self.shares = Shares(redis, namespace=namespace)
        self.queue = queue
        self.default = default or Share()
        self.lease_ms = int(lease_s * 1000)
        # The KEYS of each script, in order (a test's processes send them too).
        self.dispatch_keys = [
            *self.keys.common(),
            *(self.keys.key(n) for n in ("leases", "inflight", "buckets", "expired")),
            self.shares.key,
            TurnKeys(namespace).sent,
            queue,
            self.keys.key("deadlines"),
        ]
        self.lease_keys = [*self.keys.common(), self.keys.key("leases")]
        self.lease_keys += [self.keys.key("inflight"), self.shares.key]
        self.release_keys = [*self.keys.common(), self.keys.key("leases")]
        self.release_keys += [self.keys.key("inflight"), self.keys.key("wake")]

    async def _call(self, name: str, keys: list[str], args: list[str | int]) -> Any:
        return await SCRIPTS.call(self.redis, name, keys, args)

    async def dispatch(
        self,
        *,
        most: int,
        depth: int,
        drain: bool = False,
        expire: bool = True,
        released: Sequence[tuple[str, str]] = (),
    ) -> DispatchRound:
        """Move up to `most` turns while the broker's queue holds fewer than `depth`;
        `drain` (the kill switch is on): every tenant's turns, no limit checked; `expire`:
        let leases a dead worker left run out; `released`: (tenant, turn id) of concluded
        turns whose leases are given back first."""
        args: list[str | int] = [most, depth, self.lease_ms, self.default.packed(), int(drain)]
        args += [int(expire), *(f"{tenant}|{turn}" for tenant, turn in released)]
        done = DispatchRound.from_reply(await self._call("dispatch", self.dispatch_keys, args))
        self._set_aside(done.damaged)
        if done.clamped:
            why = f"{done.clamped} lease(s) ran further ahead than any holder takes: cut to one"
            self._noted(Unreadable("lease", ReadProblem(why)))
        return done

    def _set_aside(self, damaged: Sequence[object]) -> None:
        """Report the keys of the wrong type a script deleted ("<key>|<type>")."""
        for item in damaged:
            key, _, kind = _name(item).rpartition("|")
            why = f"{key} was a {kind}, not what the fair queue keeps there: deleted"
            self._noted(Unreadable("fair_key", ReadProblem(why)))

    def _noted(self, exc: Unreadable) -> None:
        if self.on_unreadable is not None:
            self.on_unreadable(exc)
        else:
            log_unreadable(exc)

    def _answer(self, reply: Any) -> int:
        """A lease script's answer, its damaged keys reported."""
        self._set_aside(reply[1])
        return int(reply[0])

    async def wait(self, timeout_s: float) -> bool:
        """Block until a turn arrives for an idle tenant or a lease is given back (True),
        or `timeout_s` passes (False). A wake key that is not a list (a hand edit) is
        replaced: the scripts push no token onto it, and every wait would fail on it."""
        wake = self.keys.key("wake")
        try:
            return await self.blocking.blpop([wake], timeout=timeout_s) is not None
        except ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
        log.warning("fair.wake_unreadable", key=wake)
        await self.redis.delete(wake)
        return True

    async def lease(self, tenant: str, turn_id: str, *, hold_s: float) -> bool:
        """Hold the lease of a turn about to run, for `hold_s` unless renewed: the one its
        dispatch took, or a new one if the tenant holds fewer than its `max_in_flight`
        (a turn redelivered after its lease ran out). False: the tenant holds that many;
        the turn waits for one."""
        args: list[str | int] = [tenant, turn_id, int(hold_s * 1000), self.default.packed()]
        return bool(self._answer(await self._call("lease", self.lease_keys, args)))

    async def renew(self, leases: Sequence[tuple[str, str]], *, hold_s: float) -> None:
        """Hold the leases of turns still running (tenant, turn id) `hold_s` longer; one
        that ran out meanwhile stays out."""
        if leases:
            args: list[str | int] = [int(hold_s * 1000), *(f"{t}|{turn}" for t, turn in leases)]
            self._answer(await self._call("renew", self.release_keys[:9], args))

    async def release(self, tenant: str, turn_id: str) -> bool:
        """Give back the lease of a concluded turn now; False if it held none. A process
        with a dispatcher hands it the lease instead (`Dispatcher.give_back`)."""
        reply = await self._call("release", self.release_keys, [tenant, turn_id])
        return bool(self._answer(reply))

    async def set_share(self, tenant: str, share: Share) -> None:
        """Set a tenant's share, in effect from the next round: a tenant a limit parked is
        looked at again at once, under the new share."""
        await self.shares.set(tenant, share)
        await self.look_again([tenant])

    async def clear_share(self, tenant: str) -> bool:
        """Back to the default share, from the next round; False if it had none."""
        had = await self.shares.clear(tenant)
        await self.look_again([tenant])
        return had

    async def look_again(self, tenants: Sequence[str]) -> None:
        """Look at `tenants` again from the next round, as after their shares changed (the
        shares written by another hand: `budgets.tenantfile`)."""
        if not tenants:
            return
        # Due at once if parked (XX: a tenant not parked stays as it is), and a wake token
        # for an idle dispatcher, as a lease given back does.
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(self.keys.key("parked"), dict.fromkeys(tenants, 0), xx=True)
        pipe.lpush(self.keys.key("wake"), "1")
        pipe.ltrim(self.keys.key("wake"), 0, 0)
        await pipe.execute()

    async def expired(self, count: int = 100) -> list[tuple[str, str, int]]:
        """Turns found past their queue deadline: (turn id, tenant, ms waited)."""
        _, found = await self.redis.hscan(self.keys.key("expired"), 0, count=count)
        out, bad = [], []
        for turn_id, value in cast(dict[bytes | str, bytes | str], found).items():
            try:
                tenant, waited = text(value).split("|", 1)
                out.append((text(turn_id), tenant, int(waited)))
            except (ValueError, UnicodeDecodeError):
                # A hand edit: dropped, so that it is not met again every round.
                bad.append(turn_id)
                log.warning("fair.expired_unreadable", turn_id=_name(turn_id)[:80])
        if bad:
            await self.redis.hdel(self.keys.key("expired"), *bad)
        return out

    async def forget_expired(self, *turn_ids: str) -> None:
        await self.redis.hdel(self.keys.key("expired"), *turn_ids)

    async def load(self) -> list[TenantLoad]:
        """Every tenant with turns queued or running, or a share of its own, by name."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.key("queued"))
        pipe.hgetall(self.keys.key("inflight"))
        pipe.hgetall(self.shares.key)
        pipe.zrange(self.keys.key("parked"), 0, -1, withscores=True)
        queued, running, shares, parked = await pipe.execute()
        until = {_name(t): int(ms) for t, ms in parked}
        counts: dict[str, list[int]] = {_name(t): [0, 0] for t in shares}
        for at, raw in enumerate((queued, running)):
            for tenant, n in raw.items():
                counts.setdefault(_name(tenant), [0, 0])[at] = _count(n)
        own: dict[str, Share] = {}
        bad: dict[str, str] = {}
        for t, v in shares.items():
            try:
                own[_name(t)] = Share.unpacked(_name(v))
            except InvalidAmountError as exc:
                bad[_name(t)] = f"{_name(v)[:40]!r}: {exc}"
                log.warning("fair.share_unreadable", tenant_id=_name(t), why=str(exc))
        return [
            TenantLoad(
                t, q, r, own.get(t, self.default), t in own or t in bad, bad.get(t), until.get(t)
            )
            for t, (q, r) in sorted(counts.items())
        ]


def _count(raw: object) -> int:
    """A stored count; 0 when it is not one (it is rewritten by the next round)."""
    try:
        return int(_name(raw))
    except ValueError:
        return 0
