"""The fair queue on the real Redis: weighted fair dispatch, limits, deadlines, kill switch.

Rounds run the real Lua step; a test stands in for the workers by popping the broker's
queue (the message is what kombu would have queued) and giving leases back.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from multiprocessing.synchronize import Event

import pytest
import redis

from breakers import KillSwitchState
from budgets import InvalidAmountError, Share
from worker.fleet.dispatcher import QUEUE_DEADLINE, Dispatcher
from worker.fleet.fairqueue import SCRIPTS, FairQueue, enqueue_sync
from worker.fleet.turnstore import TurnStore
from worker.settings import FairnessSettings
from worker.types import Status

# Fork: the children run a few Redis commands, no event loop; spawning re-imports Celery.
FORK = multiprocessing.get_context("fork")


def put(
    client: redis.Redis,
    fair: FairQueue,
    tenant: str,
    turn: str,
    *,
    deadline_ms: int = 60_000,
    tokens: int = 10,
) -> bool:
    return enqueue_sync(
        client,
        fair.keys.namespace,
        tenant=tenant,
        turn_id=turn,
        deadline_ms=deadline_ms,
        input_tokens=tokens,
        message=f"msg:{tenant}:{turn}",
    )


async def drain(fair: FairQueue) -> list[str]:
    """What the workers would take: the broker's queue, oldest first, leases given back."""
    taken: list[str] = []
    while (raw := await fair.redis.rpop(fair.queue)) is not None:
        _, tenant, turn = raw.decode().split(":", 2)
        taken.append(tenant)
        await fair.release(tenant, turn)
    return taken


async def test_an_idle_tenant_starts_within_one_round_behind_thousands(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    for i in range(3000):
        put(sync_client, fair, "noisy", f"n{i}")
    for _ in range(5):
        await fair.dispatch(most=8, depth=8)
        assert set(await drain(fair)) == {"noisy"}
    put(sync_client, fair, "quiet", "q0")
    done = await fair.dispatch(most=1, depth=8)
    assert [tenant for tenant, _ in done.moved] == ["quiet"]
    assert done.moved[0][1] < 1000


async def test_a_tenant_alone_gets_every_free_slot(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    for i in range(100):
        put(sync_client, fair, "alone", f"a{i}")
    done = await fair.dispatch(most=64, depth=40)
    assert len(done.moved) == 40
    assert await fair.redis.llen(fair.queue) == 40


async def test_weights_share_a_saturated_fleet(sync_client: redis.Redis, fair: FairQueue) -> None:
    for tenant, weight in (("w1", 1), ("w2", 2), ("w4", 4)):
        await fair.shares.set(tenant, Share(weight=weight))
        for i in range(800):
            put(sync_client, fair, tenant, f"{tenant}-{i}")
    served: Counter[str] = Counter()
    while sum(served.values()) < 700:
        await fair.dispatch(most=7, depth=7)
        served.update(await drain(fair))
    total = sum(served.values())
    for tenant, share in (("w1", 1 / 7), ("w2", 2 / 7), ("w4", 4 / 7)):
        assert served[tenant] / total == pytest.approx(share, rel=0.10)


async def test_max_in_flight_holds_a_tenant_until_a_turn_concludes(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.shares.set("capped", Share(max_in_flight=3))
    for i in range(10):
        put(sync_client, fair, "capped", f"c{i}")
    put(sync_client, fair, "free", "f0")
    done = await fair.dispatch(most=20, depth=20)
    assert Counter(t for t, _ in done.moved) == {"capped": 3, "free": 1}
    assert done.held == [("capped", "max_in_flight")]
    assert [(x.tenant, x.queued, x.in_flight, x.own) for x in await fair.load()] == [
        ("capped", 7, 3, True),
        ("free", 0, 1, False),
    ]
    assert await fair.release("capped", "c0")
    assert not await fair.release("capped", "c0")  # once
    done = await fair.dispatch(most=20, depth=20)
    assert [t for t, _ in done.moved] == ["capped"]


async def test_token_buckets_hold_turns_and_input_tokens(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.shares.set("tpm", Share(turns_per_minute=4))
    await fair.shares.set("itpm", Share(input_tokens_per_minute=1000))
    for i in range(10):
        put(sync_client, fair, "tpm", f"t{i}")
        put(sync_client, fair, "itpm", f"i{i}", tokens=300)
    done = await fair.dispatch(most=40, depth=40)
    assert Counter(t for t, _ in done.moved) == {"tpm": 4, "itpm": 3}
    assert sorted(done.held) == [("itpm", "input_tokens_per_minute"), ("tpm", "turns_per_minute")]


async def test_the_same_turn_is_queued_once(sync_client: redis.Redis, fair: FairQueue) -> None:
    assert put(sync_client, fair, "acme", "t1")
    assert not put(sync_client, fair, "acme", "t1")
    assert len((await fair.dispatch(most=10, depth=10)).moved) == 1


def test_a_share_out_of_range_names_the_field() -> None:
    with pytest.raises(InvalidAmountError, match="weight"):
        Share(weight=0)
    with pytest.raises(InvalidAmountError, match="max_in_flight"):
        Share(max_in_flight=0)
    assert Share.unpacked(Share(5, None, 100, 3).packed()) == Share(5, None, 100, 3)


def _dispatcher(fair: FairQueue, kill: list[KillSwitchState | None]) -> Dispatcher:
    async def killed() -> KillSwitchState | None:
        return kill[0]

    store = TurnStore(fair.redis, namespace=fair.keys.namespace)
    settings = FairnessSettings(queue_depth=10)
    return Dispatcher(fair, store, settings, killed=killed, primary_model="alpha/a")


async def test_a_turn_past_its_deadline_in_the_queue_ends_failed_queue_deadline(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    put(sync_client, fair, "late", "late-1", deadline_ms=50)
    put(sync_client, fair, "late", "late-2")
    await asyncio.sleep(0.1)
    dispatcher = _dispatcher(fair, [None])
    assert len((await dispatcher.round()).moved) == 1
    result = await dispatcher.store.result("late-1")
    assert result is not None
    assert (result.status, result.reason, result.tenant_id) == (
        Status.FAILED,
        QUEUE_DEADLINE,
        "late",
    )
    assert "fair queue" in (result.error or "")
    assert await fair.expired() == []
    assert await drain(fair) == ["late"]


async def test_while_the_kill_switch_is_on_every_turn_goes_on_to_be_rejected_limits_unchecked(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    """The workers reject and hold each turn at once (tests/test_operate.py end to end):
    nothing waits in the fair queue, not even behind a limit, and no bucket is paid."""
    await fair.shares.set("acme", Share(max_in_flight=1, turns_per_minute=1))
    put(sync_client, fair, "acme", "before")
    kill: list[KillSwitchState | None] = [None]
    dispatcher = _dispatcher(fair, kill)
    assert len((await dispatcher.round()).moved) == 1
    for i in range(4):
        put(sync_client, fair, "acme", f"k{i}")
    held = await dispatcher.round()
    assert held.moved == []
    assert held.held == [("acme", "max_in_flight")]
    kill[0] = KillSwitchState("ops", "incident", 0)
    drained = await dispatcher.round()
    assert [t for t, _ in drained.moved] == ["acme"] * 4
    assert await fair.redis.llen(fair.queue) == 5
    assert [(x.queued, x.in_flight) for x in await fair.load()] == [(0, 5)]
    # Off again: the limits hold as before, the bucket untouched by the drained turns.
    kill[0] = None
    await drain(fair)
    put(sync_client, fair, "acme", "after-1")
    put(sync_client, fair, "acme", "after-2")
    after = await dispatcher.round()
    assert (len(after.moved), after.held) == (0, [("acme", "turns_per_minute")])


async def test_a_turn_or_a_lease_given_back_wakes_an_idle_dispatcher(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    assert not await fair.wait(0.05)  # nothing pushed: the wait runs out
    dispatcher = Dispatcher(
        fair,
        TurnStore(fair.redis, namespace=fair.keys.namespace),
        FairnessSettings(queue_depth=10, interval_s=30),
        killed=_never_killed,
        primary_model="alpha/a",
    )
    running = asyncio.create_task(dispatcher.run_forever())
    try:
        await asyncio.sleep(0.2)  # its first round found nothing: it waits, for 30 s at most
        started = time.monotonic()
        put(sync_client, fair, "acme", "w1")
        moved = await fair.redis.brpop([fair.queue], timeout=1.0)
        assert moved is not None
        assert time.monotonic() - started < 1.0
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    # One token however many arrive: a woken dispatcher moves them all.
    for i in range(3):
        put(sync_client, fair, f"idle{i}", "t")
    assert await fair.redis.llen(fair.keys.key("wake")) == 1
    assert await fair.wait(0.05)
    assert await fair.release("acme", "w1")
    assert await fair.wait(0.05)  # the lease given back


async def test_a_lease_handed_to_the_dispatcher_goes_back_in_its_next_round(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    """A tenant capped at one turn gets its second as soon as its first's lease is handed
    over (no gathering while a tenant is parked); a lease handed over with none parked goes
    back once gathered; one still held at close goes back then."""
    await fair.shares.set("capped", Share(max_in_flight=1))
    for turn in ("c1", "c2", "c3"):
        put(sync_client, fair, "capped", turn)
    store = TurnStore(fair.redis, namespace=fair.keys.namespace)
    settings = FairnessSettings(queue_depth=10, interval_s=30, gather_s=0.3)
    dispatcher = Dispatcher(fair, store, settings, killed=_never_killed, primary_model="alpha/a")
    running = asyncio.create_task(dispatcher.run_forever())
    inflight = fair.keys.key("inflight")
    try:
        assert await fair.redis.brpop([fair.queue], timeout=2) is not None
        assert await fair.redis.brpop([fair.queue], timeout=0.3) is None  # capped
        started = time.monotonic()
        dispatcher.give_back("capped", "c1")
        assert await fair.redis.brpop([fair.queue], timeout=2) is not None
        assert time.monotonic() - started < settings.gather_s
        dispatcher.give_back("capped", "c2")  # c3 goes next; nothing parked after it
        assert await fair.redis.brpop([fair.queue], timeout=2) is not None
        dispatcher.give_back("capped", "c3")
        deadline = time.monotonic() + 2
        while await fair.redis.hget(inflight, "capped") is not None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    put(sync_client, fair, "capped", "c4")
    await fair.dispatch(most=1, depth=10)
    dispatcher.give_back("capped", "c4")
    await dispatcher.close()
    assert await fair.redis.hget(inflight, "capped") is None


async def _never_killed() -> KillSwitchState | None:
    return None


# -- several processes --------------------------------------------------------------------


def _eval(client: redis.Redis, name: str, keys: list[str], *args: object) -> object:
    return client.evalsha(SCRIPTS.sha(name), len(keys), *keys, "", *args)


def _dispatch_forever(redis_url: str, keys: list[str], moving: Event) -> None:
    """A dispatcher process: rounds as fast as it can, until killed."""
    client = redis.Redis.from_url(redis_url)
    while True:
        _eval(client, "dispatch", keys, 5, 1_000_000, 60_000, Share().packed())
        moving.set()


@pytest.mark.slow
async def test_dispatchers_killed_mid_move_lose_and_duplicate_nothing(
    sync_client: redis.Redis, fair: FairQueue, redis_url: str
) -> None:
    """SIGKILL dispatcher processes again and again while they move 3000 turns."""
    turns = 3000
    for i in range(turns):
        put(sync_client, fair, f"t{i % 7}", f"turn-{i}")
    await fair.dispatch(most=0, depth=0)  # the script is in Redis's cache
    taken: list[str] = []
    kills = 0
    deadline = time.monotonic() + 90
    while len(taken) < turns and time.monotonic() < deadline:
        moving = [FORK.Event() for _ in range(3)]
        args = [(redis_url, fair.dispatch_keys, m) for m in moving]
        procs = [FORK.Process(target=_dispatch_forever, args=a) for a in args]
        for proc in procs:
            proc.start()
        for event in moving:
            assert event.wait(30)
        await asyncio.sleep(random.uniform(0, 0.02))
        for proc in procs:
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            kills += 1
        while (raw := sync_client.rpop(fair.queue)) is not None:
            taken.append(raw.decode().rsplit(":", 1)[1])
    assert kills >= 3
    assert len(taken) == turns
    assert len(set(taken)) == turns
    assert [x.queued for x in await fair.load() if x.queued] == []


def _consume(redis_url: str, keys: tuple[list[str], list[str]], stop_at: float) -> None:
    """A worker stand-in: dispatch, take a turn, 'run' it a moment, give its lease back."""
    client = redis.Redis.from_url(redis_url)
    dispatch, release = keys
    while time.time() < stop_at:
        _eval(client, "dispatch", dispatch, 5, 5, 60_000, Share().packed())
        raw = client.rpop(dispatch[-1])
        if raw is None:
            time.sleep(0.005)
            continue
        _, tenant, turn = raw.decode().split(":", 2)
        time.sleep(0.02)
        _eval(client, "release", release, tenant, turn)


@pytest.mark.slow
async def test_max_in_flight_holds_across_processes(
    sync_client: redis.Redis, fair: FairQueue, redis_url: str
) -> None:
    """Four processes dispatch and 'run' turns; the capped tenant never has more than 3
    leases, sampled from Redis, while the others use the rest."""
    await fair.shares.set("capped", Share(max_in_flight=3))
    for i in range(200):
        put(sync_client, fair, "capped", f"c{i}")
        put(sync_client, fair, "other", f"o{i}")
    await fair.release("capped", "none")  # the scripts are in Redis's cache
    await fair.dispatch(most=0, depth=0)
    stop_at = time.time() + 3
    keys = (fair.dispatch_keys, fair.release_keys)
    procs = [FORK.Process(target=_consume, args=(redis_url, keys, stop_at)) for _ in range(4)]
    for proc in procs:
        proc.start()
    peak = 0
    samples = 0
    while time.time() < stop_at:
        running = sync_client.hget(fair.keys.key("inflight"), "capped")
        peak = max(peak, int(running or 0))
        samples += 1
        await asyncio.sleep(0.002)
    for proc in procs:
        proc.join(10)
    left = {x.tenant: x.queued for x in await fair.load()}
    assert samples > 100
    assert peak == 3
    assert left.get("capped", 0) < 200  # it ran, within its limit
