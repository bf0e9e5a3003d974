"""TurnStore on the real Redis: one claim per turn, the first saved result stands."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

import breakers
from tests.netkit import free_port
from worker.fleet import turnstore
from worker.fleet.errors import StreamRestarted
from worker.fleet.streams import StreamReader
from worker.fleet.turnstore import TurnStore
from worker.guard.autopipeline import AutoPipeline
from worker.types import Status, TurnResult


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = breakers.connect(redis_url, timeout_s=2.0)
    yield client
    await client.aclose()


def result(turn_id: str, text: str = "first") -> TurnResult:
    return TurnResult(
        turn_id=turn_id,
        tenant_id="acme",
        status=Status.FAILED,
        reason=text,
        primary_model="openai/alpha",
    )


async def test_the_first_saved_result_stands_and_releases_the_claim(
    redis: Redis, namespace: str
) -> None:
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    assert await store.claim("t1", "w1", 30) is True
    assert await store.save(result("t1", "first")) == result("t1", "first")
    assert not await redis.exists(store.keys.claim("t1"))
    assert await store.save(result("t1", "second")) == result("t1", "first")
    assert await store.result("t1") == result("t1", "first")
    assert 0 < await redis.ttl(store.keys.result("t1")) <= 60


async def test_a_claim_is_taken_once_and_a_finished_turn_returns_its_result(
    redis: Redis, namespace: str
) -> None:
    store = TurnStore(redis, namespace=namespace)
    assert await store.claim("t2", "w1", 30) is True
    assert await store.claim("t2", "w2", 30) is False
    await store.save(result("t2"))
    assert await store.claim("t2", "w3", 30) == result("t2")
    # Finding the result must not leave a claim behind for the waiters to sit on.
    assert not await redis.exists(store.keys.claim("t2"))


async def test_concurrent_saves_in_one_batch_all_return_the_first(
    redis: Redis, namespace: str
) -> None:
    pipes = AutoPipeline(redis)
    store = TurnStore(redis, namespace=namespace, pipes=pipes)
    saves = [store.save(result("t3", f"run {i}")) for i in range(20)]
    standing = await asyncio.gather(*saves, store.save(result("t4", "other")))
    assert standing[:20] == [result("t3", "run 0")] * 20
    assert standing[20] == result("t4", "other")


async def test_claims_of_many_turns_share_the_guards_round_trips(
    redis: Redis, namespace: str
) -> None:
    pipes = AutoPipeline(redis)
    store = TurnStore(redis, namespace=namespace, pipes=pipes)
    sent: list[int] = []
    execute = type(redis.pipeline()).execute

    async def counted(pipe: object, *args: object, **kwargs: object) -> list[object]:
        sent.append(len(pipe.command_stack))  # type: ignore[attr-defined]
        return await execute(pipe, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(redis.pipeline()), "execute", counted)
        claimed = await asyncio.gather(*(store.claim(f"m{i}", "w", 30) for i in range(50)))
    assert claimed == [True] * 50
    assert sent == [100]  # 50 turns x (GET result, SET claim), one round trip


async def test_a_waiting_delivery_gets_the_other_ones_result(redis: Redis, namespace: str) -> None:
    store = TurnStore(redis, namespace=namespace)
    assert await store.claim("t5", "w1", 30) is True
    waiting = asyncio.create_task(store.wait_result("t5", 5))
    await asyncio.sleep(0.15)
    await store.save(result("t5"))
    assert await waiting == result("t5")


async def test_a_waiting_delivery_stops_when_the_claim_lapses(redis: Redis, namespace: str) -> None:
    store = TurnStore(redis, namespace=namespace)
    assert await store.claim("t6", "dead", 0.2) is True
    assert await asyncio.wait_for(store.wait_result("t6", 5), 2) is None


async def test_stream_chunks_arrive_in_order_until_the_end(redis: Redis, namespace: str) -> None:
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    await asyncio.gather(*(store.publish("t7", f"{i} ") for i in range(3)))
    await store.end_stream("t7")
    assert [text async for text in store.tail("t7", block_ms=100)] == ["0 ", "1 ", "2 "]


async def test_a_run_starts_the_stream_over_for_every_reader(redis: Redis, namespace: str) -> None:
    """A second run of a turn (its first worker died) drops the first run's text. A reader
    that had passed text on gets a restart; one that starts now, the second run alone; one
    resuming after an id of the first run, a restart first. Its end goes with the result."""
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    key = store.keys.chunks("t9")
    await store.start_stream("t9", "w1")
    for piece in ("Hel", "lo"):
        await store.publish("t9", piece)
    live = StreamReader(redis, key)
    first = await live.read()
    assert [e.text for e in first] == ["Hel", "lo"]
    untouched = StreamReader(redis, key)  # has passed nothing on yet
    await store.start_stream("t9", "w2")
    await store.publish("t9", "Hi")
    second = await live.read()
    assert [(e.text, e.restart) for e in second] == [("", True), ("Hi", False)]
    assert [e.text for e in await untouched.read()] == ["Hi"]
    assert [e.text for e in await StreamReader(redis, key).read()] == ["Hi"]
    resumed = StreamReader(redis, key, after=first[0].id)
    assert [(e.text, e.restart) for e in await resumed.read()] == [("", True), ("Hi", False)]
    assert await StreamReader(redis, key, after=second[-1].id).read() == []
    tail = store.tail("t9", block_ms=100)
    assert await anext(tail) == "Hi"
    await store.start_stream("t9", "w3")
    with pytest.raises(StreamRestarted, match="'t9'"):
        await anext(tail)
    await store.publish("t9", "Hey")
    await store.save(result("t9"), end_stream=True)
    assert [(e.text, e.restart) for e in await live.drain()] == [("", True), ("Hey", False)]
    assert live.ended
    assert [text async for text in store.tail("t9", block_ms=100)] == ["Hey"]
    assert await store.result("t9") is not None


async def test_an_unreachable_store_raises_a_redis_error(namespace: str) -> None:
    down = breakers.connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    store = TurnStore(down, namespace=namespace)
    try:
        with pytest.raises((RedisError, OSError)):
            await store.claim("t8", "w1", 30)
        with pytest.raises((RedisError, OSError)):
            await store.save(result("t8"))
    finally:
        await down.aclose()


async def test_saved_turns_are_kept_among_the_recent_ones_newest_first(
    redis: Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recent` gives the newest results saved since a time; the record is trimmed to about
    RECENT_TURNS, and a turn whose result is gone is left out."""
    monkeypatch.setattr(turnstore, "RECENT_TURNS", 3)
    monkeypatch.setattr(turnstore, "_TRIM_EVERY", 2)
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    before_ms = int(time.time() * 1000) - 1
    for i in range(6):
        await store.save(result(f"t{i}"))
        await asyncio.sleep(0.002)  # one ms apart at least: the order is the save order
    assert [r.turn_id for r in await store.recent(before_ms)] == ["t5", "t4", "t3", "t2"]
    assert await redis.zcard(store.keys.recent) == 4  # trimmed at the 5th save, then one more
    assert 0 < await redis.ttl(store.keys.recent) <= 60
    await redis.delete(store.keys.result("t4"))
    assert [r.turn_id for r in await store.recent(before_ms, count=2)] == ["t5"]
    assert await store.recent(int(time.time() * 1000) + 1000) == []
