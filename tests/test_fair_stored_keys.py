"""One hand-edited key of the fair queue's own never refuses every tenant's turns.

The sequence number, a tenant's queued count and the wake list are read by every
enqueue (`enqueue.lua`); one value that is not what the script expects would otherwise
fail each producer's publish, for every tenant, until someone finds the key.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from tests.test_celery_fleet import request
from tests.workerkit import celery_worker_process, stop, wait_for_heartbeats
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn, send_turn
from worker.fleet.fairqueue import FairKeys, FairQueue, enqueue_sync
from worker.fleet.sweeper import Sweeper
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.settings import load_settings
from worker.simulator import Simulator
from worker.types import Status


@pytest.fixture
def config(fleet_toml: Path, fresh_sim: Simulator, provider_key: str) -> Path:
    return fleet_toml


@pytest.fixture
def node(config: Path, redis_url: str, namespace: str) -> Iterator[None]:
    """One worker process of the fleet, consuming (its heartbeat is written)."""
    proc = celery_worker_process(config, queue=namespace, name=f"keys@{namespace}")
    client = redis.Redis.from_url(redis_url)
    try:
        wait_for_heartbeats(redis_url, namespace, [proc])
        yield
    finally:
        stop([proc])
        keys = list(client.scan_iter(match=f"*{namespace}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.mark.parametrize("seq", ["abc", str(2**63 - 1)])
def test_a_sequence_number_that_is_not_one_refuses_no_turn(
    config: Path, node: None, sync_client: redis.Redis, namespace: str, seq: str
) -> None:
    """A sequence number that is text or at its end: every tenant's turns still run."""
    settings = load_settings(config)
    sync_client.set(FairKeys(namespace).key("seq"), seq)
    app = make_app(settings)
    handles = [
        enqueue_turn(request(i, tenant_id=tenant), app=app, limits=settings.limits)
        for i, tenant in enumerate(("acme", "zeta", "acme"))
    ]
    results = [handle.get(timeout_s=30) for handle in handles]
    assert [r.status for r in results] == [Status.OK] * 3
    # Enqueued again from a number: INCR works on it, for this release and 0.1.0 alike.
    assert int(sync_client.get(FairKeys(namespace).key("seq")) or b"x") > 0


async def test_a_queued_count_that_is_not_one_is_counted_again(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """The tenant's turns are queued and dispatched in order; the others' too."""
    sync_client.hset(fair.keys.key("queued"), "acme", "1.5")

    def put(tenant: str, turn: str) -> bool | None:
        return enqueue_sync(
            sync_client,
            fair.keys.namespace,
            tenant=tenant,
            turn_id=turn,
            deadline_ms=60_000,
            input_tokens=10,
            message=turn,
        )

    assert [put("acme", "a1"), put("zeta", "z1"), put("acme", "a2")] == [True] * 3
    assert sync_client.hget(fair.keys.key("queued"), "acme") == b"2"
    done = await fair.dispatch(most=10, depth=10)
    assert sorted(t for t, _ in done.moved) == ["acme", "acme", "zeta"]
    assert sync_client.lrange(fair.queue, 0, -1)[::-1] in (
        [b"a1", b"a2", b"z1"],
        [b"z1", b"a1", b"a2"],
        [b"a1", b"z1", b"a2"],
    )


async def test_a_wake_key_that_is_not_a_list_is_replaced(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """Turns are queued and leases given back; the dispatchers put the key right."""
    wake = fair.keys.key("wake")
    sync_client.set(wake, "x")
    queued = enqueue_sync(
        sync_client,
        fair.keys.namespace,
        tenant="acme",
        turn_id="a1",
        deadline_ms=60_000,
        input_tokens=10,
        message="a1",
    )
    assert queued is True
    assert [t for t, _ in (await fair.dispatch(most=10, depth=10)).moved] == ["acme"]
    assert await fair.lease("acme", "a1", hold_s=10)
    assert await fair.release("acme", "a1")
    # A dispatcher waiting on it replaces it (a round follows), and tokens come again.
    assert await fair.wait(0.1)
    assert sync_client.type(wake) == b"none"
    assert await fair.lease("acme", "a2", hold_s=10)
    assert await fair.release("acme", "a2")
    assert sync_client.lrange(wake, 0, -1) == [b"1"]


def _backlogs(fair: FairQueue, client: redis.Redis, count: int) -> None:
    for i in range(count):
        for tenant in ("acme", "zeta"):
            enqueue_sync(
                client,
                fair.keys.namespace,
                tenant=tenant,
                turn_id=f"{tenant}-{i}",
                deadline_ms=60_000,
                input_tokens=10,
                message=f"{tenant}-{i}",
            )


async def _served(fair: FairQueue, client: redis.Redis, rounds: int) -> list[str]:
    order: list[str] = []
    for _ in range(rounds):
        order += [tenant for tenant, _ in (await fair.dispatch(most=4, depth=4)).moved]
        client.delete(fair.queue)  # the workers took them
    return order


@pytest.mark.parametrize("clock", ["1e17", "1e299", "-1e17"])
async def test_a_virtual_clock_out_of_range_keeps_the_tenants_turn_about(
    fair: FairQueue, sync_client: redis.Redis, clock: str
) -> None:
    """Past 1e12 a step of 1 / weight is lost to rounding: every tenant would tie, and the
    lowest name take every turn until its backlog is gone."""
    sync_client.set(fair.keys.key("clock"), clock)
    _backlogs(fair, sync_client, 20)
    order = await _served(fair, sync_client, 4)
    assert len(order) == 16
    assert order.count("zeta") == 8, "".join(t[0] for t in order)


async def test_a_tenant_whose_virtual_time_is_out_of_range_takes_no_turn_ahead(
    fair: FairQueue, sync_client: redis.Redis
) -> None:
    """A ready score of -inf (a hand edit) starts again at the clock."""
    _backlogs(fair, sync_client, 20)
    sync_client.zadd(fair.keys.key("ready"), {"zeta": float("-inf")})
    sync_client.hset(fair.keys.key("vtime"), "acme", "-1e200")
    order = await _served(fair, sync_client, 4)
    assert order.count("acme") == 8, "".join(t[0] for t in order)


def test_a_turn_the_index_names_stale_is_queued_and_runs(
    config: Path, node: None, sync_client: redis.Redis, namespace: str
) -> None:
    """An index entry naming no queued turn (a hand edit) would make its turn's sends
    no-ops ("queued already"), and the sweeper leave its record alone: it waited a day."""
    settings = load_settings(config)
    turn = request(0, tenant_id="acme")
    sync_client.hset(FairKeys(namespace).index(), turn.turn_id, "acme|0000000000000001")
    app = make_app(settings)
    handle = enqueue_turn(turn, app=app, limits=settings.limits)
    assert handle.get(timeout_s=30).status == Status.OK


async def test_the_sweeper_sends_again_a_turn_the_index_names_stale(
    config: Path, sync_client: redis.Redis, namespace: str
) -> None:
    """A recorded turn the broker lost, whose index entry names no queued turn."""
    settings = load_settings(config)
    app = make_app(settings)
    turn = request(0, tenant_id="acme")
    keys, fair = TurnKeys(namespace), FairKeys(namespace)
    sync_client.zadd(keys.sent, {turn.turn_id: int(time.time() * 1000) - 60_000})
    sync_client.hset(keys.payloads, turn.turn_id, turn.model_dump_json())
    sync_client.hset(fair.index(), turn.turn_id, "acme|0000000000000001")
    client = AsyncRedis.from_url(settings.redis.url)
    try:
        sweeper = Sweeper(
            TurnStore(client, namespace=namespace),
            lambda t: send_turn(app, t),
            holder="test:1",
            interval_s=1,
            older_than_s=10,
        )
        assert await sweeper.sweep_once() == 1
        member = sync_client.hget(fair.index(), turn.turn_id)
        assert member is not None
        assert sync_client.zscore(fair.key("pending"), member) is not None
    finally:
        await client.aclose()
        found = list(sync_client.scan_iter(match=f"*{namespace}*", count=1000))
        if found:
            sync_client.delete(*found)
