"""AutoPipeline against a real Redis: one round trip per loop iteration, replies to each caller."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

import breakers
from tests.netkit import free_port
from worker.guard.autopipeline import AutoPipeline


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = breakers.connect(redis_url, timeout_s=2.0, timed_by_caller=True)
    yield client
    await client.aclose()


@pytest.fixture
async def silent() -> AsyncIterator[Redis]:
    """A timed client of a server that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        url = f"redis://127.0.0.1:{server.getsockname()[1]}"
        client = breakers.connect(url, timeout_s=5.0, timed_by_caller=True)
        yield client
        await client.aclose()


async def _incr(pipes: AutoPipeline, key: str, by: int) -> list[object]:
    slot = pipes.open()
    slot.pipe.incrby(key, by)
    slot.pipe.get(key)
    return await slot.send()


async def test_callers_of_one_iteration_share_one_round_trip(redis: Redis, namespace: str) -> None:
    pipes = AutoPipeline(redis, timeout_s=2.0)
    slots, sent = [], []
    for i in range(20):  # what 20 turns do in one loop iteration: open, queue, send
        slot = pipes.open()
        slot.pipe.incrby(f"{namespace}:n{i}", i)
        slots.append(slot)
        sent.append(slot.send())
    replies = await asyncio.gather(*sent)
    assert len({id(slot.pipe) for slot in slots}) == 1
    assert replies == [[i] for i in range(20)]


async def test_each_caller_gets_the_replies_to_its_own_commands(
    redis: Redis, namespace: str
) -> None:
    pipes = AutoPipeline(redis, timeout_s=2.0)
    replies = await asyncio.gather(*(_incr(pipes, f"{namespace}:k{i}", i + 1) for i in range(50)))
    assert replies == [[i + 1, str(i + 1).encode()] for i in range(50)]


async def test_later_iterations_send_their_own_round_trip(redis: Redis, namespace: str) -> None:
    pipes = AutoPipeline(redis, timeout_s=2.0)
    first = pipes.open()
    first.pipe.incr(f"{namespace}:seq")
    assert await first.send() == [1]
    second = pipes.open()
    second.pipe.incr(f"{namespace}:seq")
    assert await second.send() == [2]
    assert first.pipe is not second.pipe


async def test_a_failed_command_is_in_its_own_place_only(redis: Redis, namespace: str) -> None:
    await redis.set(f"{namespace}:text", "not a number")
    pipes = AutoPipeline(redis, timeout_s=2.0)
    good = _incr(pipes, f"{namespace}:ok", 5)
    bad = _incr(pipes, f"{namespace}:text", 1)
    ok_replies, bad_replies = await asyncio.gather(good, bad)
    assert ok_replies == [5, b"5"]
    assert isinstance(bad_replies[0], ResponseError)
    assert bad_replies[1] == b"not a number"


async def test_a_cancelled_caller_does_not_stop_the_others(redis: Redis, namespace: str) -> None:
    pipes = AutoPipeline(redis, timeout_s=2.0)
    leaving = asyncio.ensure_future(_incr(pipes, f"{namespace}:a", 1))
    staying = asyncio.ensure_future(_incr(pipes, f"{namespace}:b", 2))
    await asyncio.sleep(0)  # both have joined the batch
    leaving.cancel()
    assert await staying == [2, b"2"]
    with pytest.raises(asyncio.CancelledError):
        await leaving
    # The batch was sent whole: the cancelled caller's command ran too.
    assert await redis.get(f"{namespace}:a") == b"1"


async def test_redis_gone_puts_the_error_in_every_place() -> None:
    port = free_port()  # nothing listens there
    client = breakers.connect(f"redis://127.0.0.1:{port}", timeout_s=0.5, timed_by_caller=True)
    try:
        pipes = AutoPipeline(client, timeout_s=0.5)
        replies = await asyncio.gather(*(_incr(pipes, f"k{i}", 1) for i in range(5)))
    finally:
        await client.aclose()
    assert all(len(r) == 2 and all(isinstance(e, Exception) for e in r) for r in replies)


async def test_a_silent_redis_times_out_once_per_round_trip(silent: Redis) -> None:
    pipes = AutoPipeline(silent, timeout_s=0.3)
    started = time.monotonic()
    replies = await asyncio.gather(*(_incr(pipes, f"k{i}", 1) for i in range(5)))
    elapsed = time.monotonic() - started
    assert all(isinstance(e, TimeoutError) for r in replies for e in r)
    assert 0.25 < elapsed < 2.0


async def test_a_reply_that_came_in_time_survives_a_loop_that_was_busy(
    redis: Redis, namespace: str
) -> None:
    # Redis answers the BLPOP after 0.1 s, while this loop is blocked from 0.05 s
    # to 0.55 s; the 0.2 s deadline and the reply are then seen in the same
    # iteration. The reply came in time: the round trip must not time out.
    pipes = AutoPipeline(redis, timeout_s=0.2)
    slot = pipes.open()
    slot.pipe.blpop([f"{namespace}:empty"], timeout=0.1)
    replies = slot.send()
    asyncio.get_running_loop().call_later(0.05, time.sleep, 0.5)
    assert await replies == [None]


async def test_a_silent_redis_still_times_out_after_a_busy_loop(silent: Redis) -> None:
    pipes = AutoPipeline(silent, timeout_s=0.2)
    started = time.monotonic()
    pending = _incr(pipes, "k", 1)
    asyncio.get_running_loop().call_later(0.05, time.sleep, 0.3)
    replies = await pending
    elapsed = time.monotonic() - started
    # The deadline, noticed late, got one more 0.2 s: no more.
    assert all(isinstance(e, TimeoutError) for e in replies)
    assert 0.5 < elapsed < 1.5
