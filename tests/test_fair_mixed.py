"""Release 0.1.0's fair-queue scripts and this release's on one Redis: a rolling upgrade.

While a fleet is upgraded, producers and workers of both releases share the fair queue's
keys: a turn enqueued by either is dispatched by either, a lease taken by one is given
back by the other, and the limits hold across both. 0.1.0's scripts come from its wheel
(tests/fairkit.py).
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import redis

from budgets import Share
from tests.fairkit import Release010
from worker.fleet.fairqueue import FairQueue, enqueue_sync


def _put(
    client: redis.Redis, fair: FairQueue, old: Release010, tenant: str, turn: str, *, by_old: bool
) -> bool:
    message = f"msg:{tenant}:{turn}"
    if by_old:
        return old.enqueue(client, tenant, turn, message=message)
    namespace = fair.keys.namespace
    return enqueue_sync(
        client,
        namespace,
        tenant=tenant,
        turn_id=turn,
        deadline_ms=60_000,
        input_tokens=10,
        message=message,
    )


async def _consistent(fair: FairQueue) -> dict[str, int]:
    """The counts agree with the sets they count; returns the leases held per tenant."""
    pipe = fair.redis.pipeline(transaction=False)
    for name in ("pending", "msgs", "index", "ready", "parked", "queued", "inflight", "leases"):
        key = fair.keys.key(name)
        kind = {"pending": "zset", "ready": "zset", "parked": "zset", "leases": "zset"}
        if kind.get(name) == "zset":
            pipe.zrange(key, 0, -1)
        else:
            pipe.hgetall(key)
    pending, msgs, index, ready, parked, queued, inflight, leases = await pipe.execute()
    text = [m.decode() for m in pending]
    assert sorted(text) == sorted(k.decode() for k in msgs)
    assert sorted(text) == sorted(v.decode() for v in index.values())
    per_tenant = Counter(m.split("|", 1)[0] for m in text)
    assert {k.decode(): int(v) for k, v in queued.items()} == dict(per_tenant)
    active = {t.decode() for t in (*ready, *parked)}
    assert set(per_tenant) <= active
    held = Counter(m.decode().split("|", 1)[0] for m in leases)
    assert {k.decode(): int(v) for k, v in inflight.items()} == dict(held)
    return dict(held)


@pytest.mark.parametrize("seed", [1, 2])
async def test_turns_and_leases_cross_between_releases(
    sync_client: redis.Redis, fair: FairQueue, seed: int
) -> None:
    """Both releases' enqueues, rounds and lease releases in a random order: every turn
    comes out once, each tenant's oldest first; the capped tenant never has more than 2
    running, the metered one starts what its bucket holds and no more; after every step
    the counts agree with the sets."""
    rng = random.Random(seed)
    old = Release010(fair)
    await fair.shares.set("capped", Share(max_in_flight=2))
    await fair.shares.set("metered", Share(turns_per_minute=6))  # 6 at once, then 1 per 10 s
    await fair.shares.set("heavy", Share(weight=3))
    counts = {"capped": 20, "metered": 8, "heavy": 30, "light": 20}
    to_send = [f"{t}-{i}" for t, n in counts.items() for i in range(n)]
    rng.shuffle(to_send)
    sent: dict[str, list[str]] = {t: [] for t in counts}
    out: dict[str, list[str]] = {t: [] for t in counts}
    running: list[tuple[str, str]] = []
    folded: list[tuple[str, str]] = []  # leases handed to this release's next round
    started = time.monotonic()
    unmetered = sum(counts.values()) - counts["metered"]
    while sum(map(len, out.values())) - len(out["metered"]) < unmetered or running:
        assert time.monotonic() - started < 30, out
        op = rng.choice(["enqueue", "enqueue", "round", "round", "take", "take", "done"])
        if op == "enqueue" and to_send:
            turn = to_send.pop()
            tenant = turn.rsplit("-", 1)[0]
            assert _put(sync_client, fair, old, tenant, turn, by_old=rng.random() < 0.5)
            sent[tenant].append(turn)
        elif op == "round":
            depth, most = rng.randint(1, 10), rng.randint(1, 6)
            if rng.random() < 0.5:
                await old.dispatch(most=most, depth=depth)
            else:
                await fair.dispatch(most=most, depth=depth, released=folded)
                folded.clear()
        elif op == "take" and (raw := await fair.redis.rpop(fair.queue)) is not None:
            _, tenant, turn = raw.decode().split(":", 2)
            out[tenant].append(turn)
            running.append((tenant, turn))
        elif op == "done" and running:
            tenant, turn = running.pop(rng.randrange(len(running)))
            how = rng.randrange(3)
            if how == 0:
                assert await old.release(tenant, turn)
            elif how == 1:
                assert await fair.release(tenant, turn)
            else:
                folded.append((tenant, turn))
        held = await _consistent(fair)
        assert held.get("capped", 0) <= 2
    await fair.dispatch(most=0, depth=0, released=folded)
    assert 6 <= len(out["metered"]) <= 6 + (time.monotonic() - started) / 10
    assert out == {t: v[: len(out[t])] for t, v in sent.items()}  # each tenant's in order
    assert {t: len(v) for t, v in out.items() if t != "metered"} == {
        t: n for t, n in counts.items() if t != "metered"
    }
    assert await _consistent(fair) == {}


@pytest.mark.parametrize("first_old", [True, False])
async def test_a_turn_resent_across_releases_is_queued_once(
    sync_client: redis.Redis, fair: FairQueue, first_old: bool
) -> None:
    old = Release010(fair)
    assert _put(sync_client, fair, old, "acme", "t1", by_old=first_old)
    assert not _put(sync_client, fair, old, "acme", "t1", by_old=not first_old)
    moved = await (old.dispatch(most=5, depth=5) if first_old else fair.dispatch(most=5, depth=5))
    assert [tenant for tenant, _ in moved.moved] == ["acme"]
    assert await fair.redis.llen(fair.queue) == 1
