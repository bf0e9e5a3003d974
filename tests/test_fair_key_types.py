"""A fair-queue key of the wrong type, a lease far ahead or a worker seen in the future
never stops or parks anyone.

Each script looks at its keys' types first: one of another type (a hand edit, another
tool) is deleted, reported as `Unreadable`, and what it said is rebuilt from the rest,
so that the round goes on. A lease is never held further ahead than one lease from now,
and a worker seen ahead of now is not alive.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from budgets.shares import Share
from tests.test_fair_dispatch import put
from worker.fleet.errors import Unreadable
from worker.fleet.fairqueue import FairQueue
from worker.fleet.heartbeat import AHEAD_S, Heartbeat, beat
from worker.fleet.turnstore import TurnKeys

# Every key dispatch.lua touches: its own name in the fair queue, or another one's.
_FAIR_KEYS = (
    "pending",
    "msgs",
    "index",
    "ready",
    "parked",
    "vtime",
    "clock",
    "queued",
    "leases",
    "inflight",
    "buckets",
    "expired",
    "deadlines",
)


def _key(fair: FairQueue, name: str) -> str:
    others = {"shares": fair.shares.key, "sent": TurnKeys(fair.keys.namespace).sent}
    return others.get(name) or (fair.queue if name == "queue" else fair.keys.key(name))


def _damage(client: redis.Redis, key: str) -> bytes:
    """Write `key` as a value of the wrong type; the type it is then."""
    if client.type(key) == b"string" or key.endswith(":clock"):
        client.delete(key)
        client.rpush(key, "x")
    else:
        client.delete(key)
        client.set(key, "x")
    return client.type(key)


def _backlog(client: redis.Redis, fair: FairQueue) -> None:
    for i in range(2):
        for tenant in ("acme", "zeta"):
            assert put(client, fair, tenant, f"{tenant}-{i}")


@pytest.mark.parametrize("name", [*_FAIR_KEYS, "shares", "sent", "queue"])
async def test_a_key_of_the_wrong_type_is_set_aside_and_the_round_goes_on(
    fair: FairQueue, sync_client: redis.Redis, name: str
) -> None:
    """Every queued turn is still dispatched (the queue's entries aside, which are what
    was damaged), and the key is reported once."""
    seen: list[Unreadable] = []
    fair.on_unreadable = seen.append
    _backlog(sync_client, fair)
    # Zeta parked by its limit, its first turn's lease held: every key holds something.
    await fair.shares.set("zeta", Share(max_in_flight=1))
    first = await fair.dispatch(most=10, depth=10)
    assert sorted(t for t, _ in first.moved) == ["acme", "acme", "zeta"]
    assert first.held == [("zeta", "max_in_flight")]
    for i in (2, 3):
        assert put(sync_client, fair, "acme", f"acme-{i}")
    key = _key(fair, name)
    kind = _damage(sync_client, key).decode()
    done = await fair.dispatch(most=10, depth=10)
    assert done.damaged == [f"{key}|{kind}"]
    assert [e.what for e in seen] == ["fair_key"]
    assert key in seen[0].why
    moved = sorted(t for t, _ in done.moved)
    if name == "msgs":
        assert moved == []  # the entries were what was lost: the sweeper sends them again
    elif name in ("shares", "leases"):
        assert moved == ["acme", "acme", "zeta"]  # zeta's limit, or its lease, went with it
    else:
        assert moved == ["acme", "acme"]  # zeta's second turn waits for its first's lease
    # And the next turns go as ever.
    assert put(sync_client, fair, "acme", "acme-next")
    assert [t for t, _ in (await fair.dispatch(most=10, depth=10)).moved] == ["acme"]
    assert (await fair.dispatch(most=10, depth=10)).damaged == []


async def test_a_queued_tenant_lost_with_the_ready_set_is_put_back(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """With ready and queued both gone, each tenant is found again from its queue, with
    its count: no new turn is needed to wake it."""
    _backlog(sync_client, fair)
    _damage(sync_client, fair.keys.key("ready"))
    _damage(sync_client, fair.keys.key("queued"))
    done = await fair.dispatch(most=0, depth=0)
    assert len(done.damaged) == 2
    queued = {k.decode(): int(v) for k, v in sync_client.hgetall(fair.keys.key("queued")).items()}
    assert queued == {"acme": 2, "zeta": 2}
    assert sorted(t for t, _ in (await fair.dispatch(most=10, depth=10)).moved) == [
        "acme",
        "acme",
        "zeta",
        "zeta",
    ]


async def test_lease_counts_lost_are_counted_again_from_the_leases(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """The bound still holds: the tenant's two running turns are counted."""
    await fair.shares.set("acme", Share(max_in_flight=2))
    for i in range(4):
        put(sync_client, fair, "acme", f"a{i}")
    assert len((await fair.dispatch(most=10, depth=10)).moved) == 2
    _damage(sync_client, fair.keys.key("inflight"))
    done = await fair.dispatch(most=10, depth=10)
    assert done.moved == []
    assert sync_client.hget(fair.keys.key("inflight"), "acme") == b"2"


async def test_a_queued_count_written_too_low_is_counted_again_from_the_queue(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """A count that says one turn is left when four are strands none: the tenant, one
    turn at a time (`max_in_flight` 1), is served all four."""
    await fair.shares.set("acme", Share(max_in_flight=1))
    for i in range(4):
        put(sync_client, fair, "acme", f"a{i}")
    sync_client.hset(fair.keys.key("queued"), "acme", 1)
    served = 0
    for i in range(4):
        served += len((await fair.dispatch(most=10, depth=10)).moved)
        assert await fair.release("acme", f"a{i}")
    assert served == 4


async def test_leases_written_by_hand_that_run_out_give_back_no_room(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """A lease with no turn behind it runs out without freeing one of the real ones."""
    await fair.shares.set("acme", Share(max_in_flight=2))
    for i in range(4):
        put(sync_client, fair, "acme", f"a{i}")
    assert len((await fair.dispatch(most=10, depth=10)).moved) == 2
    past = time.time() * 1000 - 1000
    sync_client.zadd(fair.keys.key("leases"), {f"acme|fake{i}": past for i in range(4)})
    assert (await fair.dispatch(most=10, depth=10)).moved == []
    assert sync_client.hget(fair.keys.key("inflight"), "acme") == b"2"


@pytest.mark.parametrize("name", ["leases", "inflight", "shares"])
async def test_a_worker_leases_renews_and_gives_back_past_a_damaged_key(
    fair: FairQueue, sync_client: redis.Redis, name: str
) -> None:
    seen: list[Unreadable] = []
    fair.on_unreadable = seen.append
    key = _key(fair, name)
    _damage(sync_client, key)
    assert await fair.lease("acme", "a1", hold_s=10)
    await fair.renew([("acme", "a1")], hold_s=10)
    assert await fair.release("acme", "a1")
    assert [e.what for e in seen] == ["fair_key"]
    assert sync_client.type(key) in (b"none", b"zset", b"hash")


async def test_a_lease_far_ahead_is_cut_to_one_lease_and_runs_out(
    sync_client: redis.Redis, redis_url: str, namespace: str
) -> None:
    """A lease written a year ahead no longer parks its tenant for a year: the next
    round cuts it to one lease, which its dead holder does not renew."""
    client = AsyncRedis.from_url(redis_url)
    fair = FairQueue(client, namespace=namespace, queue=f"{namespace}:q", lease_s=1.0)
    seen: list[Unreadable] = []
    fair.on_unreadable = seen.append
    try:
        await fair.shares.set("acme", Share(max_in_flight=1))
        for i in range(2):
            put(sync_client, fair, "acme", f"a{i}")
        assert len((await fair.dispatch(most=10, depth=10)).moved) == 1
        leases = fair.keys.key("leases")
        # A lease as its holder takes it is left as it is.
        assert (await fair.dispatch(most=10, depth=10)).clamped == 0
        year_ms = 365 * 86_400_000
        sync_client.zadd(leases, {"acme|a0": time.time() * 1000 + year_ms})
        done = await fair.dispatch(most=10, depth=10)
        assert done.clamped == 1
        assert [e.what for e in seen] == ["lease"]
        assert (sync_client.zscore(leases, "acme|a0") or 0) < time.time() * 1000 + 2000
        until = time.monotonic() + 5
        moved: list[tuple[str, int]] = []
        while not moved and time.monotonic() < until:
            await asyncio.sleep(0.2)
            moved = (await fair.dispatch(most=10, depth=10)).moved
        assert [t for t, _ in moved] == ["acme"]
    finally:
        keys = [k async for k in client.scan_iter(match=f"{{{namespace}}}:*", count=1000)]
        await client.delete(f"{namespace}:q", *keys)
        await client.aclose()


async def test_a_worker_seen_in_the_future_is_not_alive(
    redis_url: str, namespace: str, sync_client: redis.Redis
) -> None:
    """A member of the workers set a year ahead counted as a live process forever (each
    process's offline share of a tenant's room shrank by it); it is dropped."""
    keys = TurnKeys(namespace)
    now_ms = int(time.time() * 1000)
    sync_client.zadd(keys.workers, {"ghost:1": now_ms + 365 * 86_400_000})
    sync_client.zadd(keys.workers, {"skewed:2": now_ms + int(AHEAD_S * 1000) // 2})
    client = AsyncRedis.from_url(redis_url)
    me = Heartbeat(
        host="node-a", pid=1, version="9.9.9", in_flight=0, local_breakers=False, started_ms=0
    )
    try:
        assert await beat(client, keys, me) == 2  # itself and the one a little ahead
        assert sync_client.zscore(keys.workers, "ghost:1") is None
    finally:
        sync_client.delete(keys.workers, keys.worker(me.process))
        await client.aclose()
    ahead = me.model_copy(update={"seen_ms": now_ms + 365 * 86_400_000})
    assert not ahead.alive(now_ms)
    assert me.model_copy(update={"seen_ms": now_ms + 1000}).alive(now_ms)
