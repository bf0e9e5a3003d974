"""A tenant's limits hold it back for as long as they say, and no longer: a turn larger than
its bucket, a share changed while it is parked, and what `relevo tenants` shows meanwhile.
On the real Redis, with the real dispatch step."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from budgets import Share
from tests.test_fair_dispatch import _dispatcher, put
from tests.test_operate import ns, out_json, relevo
from worker.fleet.dispatcher import QUEUE_DEADLINE
from worker.fleet.fairqueue import FairQueue

__all__ = ["ns"]


async def test_a_turn_larger_than_the_bucket_leaves_a_debt_of_one_bucket_at_most(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.shares.set("acme", Share(input_tokens_per_minute=6000))
    put(sync_client, fair, "acme", "huge", tokens=93_000)
    for i in range(3):
        put(sync_client, fair, "acme", f"small{i}", tokens=10)
    done = await fair.dispatch(most=8, depth=8)
    # The bucket was full: the huge turn leaves at once, and the small ones wait.
    assert [t for t, _ in done.moved] == ["acme"]
    assert done.held == [("acme", "input_tokens_per_minute")]
    assert done.next_ms is not None
    # One bucket of debt: about a minute (not 93,000 / 6,000 minutes) for the next turn.
    assert 55_000 <= done.next_ms <= 61_000
    raw = sync_client.hget(fair.keys.key("buckets"), "acme")
    assert raw is not None
    assert float(raw.decode().split("|")[1]) >= -6000


async def test_a_deeper_debt_already_stored_is_read_as_one_bucket(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.shares.set("acme", Share(input_tokens_per_minute=6000))
    sync_client.hset(fair.keys.key("buckets"), "acme", f"|-87351|{int(time.time() * 1000)}")
    put(sync_client, fair, "acme", "a0", tokens=10)
    done = await fair.dispatch(most=8, depth=8)
    assert done.next_ms is not None
    assert done.next_ms <= 61_000


async def test_a_new_share_takes_effect_at_the_next_round(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.set_share("acme", Share(input_tokens_per_minute=6000))
    put(sync_client, fair, "acme", "huge", tokens=93_000)
    put(sync_client, fair, "acme", "small", tokens=10)
    done = await fair.dispatch(most=8, depth=8)
    assert len(done.moved) == 1
    assert done.next_ms is not None
    assert done.next_ms > 50_000
    await fair.set_share("acme", Share(input_tokens_per_minute=100_000_000))
    assert await fair.wait(0.1), "an idle dispatcher is woken"
    await asyncio.sleep(0.01)
    done = await fair.dispatch(most=8, depth=8)
    assert [t for t, _ in done.moved] == ["acme"]


async def test_clearing_a_share_takes_effect_at_the_next_round(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    await fair.set_share("acme", Share(turns_per_minute=1))
    put(sync_client, fair, "acme", "a0")
    put(sync_client, fair, "acme", "a1")
    done = await fair.dispatch(most=8, depth=8)
    assert len(done.moved) == 1
    assert done.held == [("acme", "turns_per_minute")]
    assert await fair.clear_share("acme")
    done = await fair.dispatch(most=8, depth=8)
    assert [t for t, _ in done.moved] == ["acme"]


def test_relevo_tenants_shows_a_parked_tenant_and_until_when(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("tenants", "set", "acme", "--turns-per-minute", "1") == 0
    fair = FairQueue(redis.asyncio.Redis.from_url(redis_url), namespace=ns, queue=f"{ns}:q")
    with redis.Redis.from_url(redis_url) as client:
        put(client, fair, "acme", "a0")
        put(client, fair, "acme", "a1")

    async def round_() -> None:
        await fair.dispatch(most=8, depth=8)
        await fair.redis.aclose()

    asyncio.run(round_())
    capsys.readouterr()
    assert relevo("tenants", "--json") == 0
    row = {r["tenant"]: r for r in out_json(capsys)}["acme"]
    assert row["parked_until_ms"] is not None
    assert 50_000 < row["parked_until_ms"] - time.time() * 1000 <= 61_000
    assert relevo("tenants") == 0
    assert "(in " in capsys.readouterr().out
    with redis.Redis.from_url(redis_url) as client:
        client.delete(f"{ns}:q", *client.scan_iter(match=f"{{{ns}}}:*"))


@pytest.mark.parametrize(
    ("share", "limit"),
    [
        (Share(turns_per_minute=1), "turns_per_minute"),
        (Share(max_in_flight=1), "max_in_flight"),
        (Share(input_tokens_per_minute=600), "input_tokens_per_minute"),
    ],
)
async def test_a_queued_turn_ends_within_a_round_of_its_deadline_whatever_holds_its_tenant(
    sync_client: redis.Redis, fair: FairQueue, share: Share, limit: str
) -> None:
    await fair.shares.set("acme", share)
    put(sync_client, fair, "acme", "first", tokens=600)
    for i in range(3):
        put(sync_client, fair, "acme", f"late{i}", deadline_ms=1500, tokens=600)
    dispatcher = _dispatcher(fair, [None])
    first = await dispatcher.round()
    assert len(first.moved) == 1
    assert first.held == [("acme", limit)]
    started = time.monotonic()
    ended: list[str] = []
    while len(ended) < 3 and time.monotonic() - started < 10:
        await dispatcher.round()
        for i in range(3):
            result = await dispatcher.store.result(f"late{i}")
            if result is not None and f"late{i}" not in ended:
                assert result.reason == QUEUE_DEADLINE
                ended.append(f"late{i}")
        await asyncio.sleep(0.2)
    # Each ended within a round (here 0.2 s) of its 1.5 s deadline, not when the limit let go.
    assert len(ended) == 3
    assert time.monotonic() - started < 1.5 + 0.5
    loads = {load.tenant: load for load in await fair.load()}
    assert "acme" not in loads or loads["acme"].queued == 0
    # The tenant is idle: a new turn is dispatched as its limits allow, not lost.
    assert await fair.redis.zscore(fair.keys.key("parked"), "acme") is None
