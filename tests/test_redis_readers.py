"""A reader's one command must not cost the deploy's Redis more than it reads.

The viewer (and the producer) may only read, but a read can ask the server for far more
than its own size: a random pick of twenty million fields from a one-field hash, the union
of one ten-thousand-member set with itself a thousand times, a thousand GETs of one large
result sent without reading a reply. Each stalls the one-threaded server for seconds or
parks hundreds of megabytes in an output buffer, and with maxmemory reached every worker's
write is refused. The private server runs as the deploy starts it (start.sh, redis.conf,
the rendered ACL file); the workers' user seeds what a fleet holds.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import NoPermissionError, ResponseError

from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
from tests.test_deploy import acl_server
from worker.fleet.fairqueue import FairQueue, enqueue_sync
from worker.fleet.heartbeat import keep_scripts

__all__ = ["acl_server"]

pytestmark = pytest.mark.redis

TENANTS = "{relevo}:budget:tenants"
SPEND = "{relevo}:budget:t1:limits"
INDEX = "{relevo}:idx:breakers"
RESULT = "{relevo}:turn:big:result"
MANY = 1000

Command = tuple[str | int, ...]

# Each asks the server for work or a reply out of all proportion to the request.
AMPLIFIERS: list[Command] = [
    ("HRANDFIELD", SPEND, -20_000_000),
    ("SRANDMEMBER", TENANTS, -20_000_000),
    ("ZRANDMEMBER", INDEX, -20_000_000),
    ("SUNION", *[TENANTS] * MANY),
    ("SINTER", *[TENANTS] * MANY),
    ("SDIFF", *[TENANTS] * MANY),
    ("SINTERCARD", MANY, *[TENANTS] * MANY),
    ("ZUNION", MANY, *[INDEX] * MANY),
    ("ZINTER", MANY, *[INDEX] * MANY),
    ("ZDIFF", MANY, *[INDEX] * MANY),
    ("ZINTERCARD", MANY, *[INDEX] * MANY),
    ("SORT_RO", TENANTS, "ALPHA", *["GET", "#"] * MANY),
    ("ECHO", "x" * 1000),
]


@pytest.fixture(scope="module")
def seeded(acl_server: dict[str, str]) -> Iterator[redis.Redis]:
    """The workers' user, after writing a fleet's worth of tenants and a large result."""
    worker = redis.Redis.from_url(acl_server["relevo"])
    worker.sadd(TENANTS, *[f"tenant-{i}" for i in range(10_000)])
    worker.zadd(INDEX, {f"scope-{i}": i for i in range(10_000)})
    worker.hset(SPEND, mapping={"daily": "1"})
    worker.set(RESULT, "r" * (1 << 20))
    try:
        yield worker
    finally:
        worker.close()


@pytest.mark.parametrize("role", ["viewer", "producer"])
@pytest.mark.parametrize("command", AMPLIFIERS, ids=lambda c: str(c[0]))
def test_a_reader_may_not_send_a_command_that_costs_far_more_than_it_asks(
    acl_server: dict[str, str], seeded: redis.Redis, role: str, command: Command
) -> None:
    with redis.Redis.from_url(acl_server[role], socket_timeout=2) as reader:
        started = time.monotonic()
        with pytest.raises(NoPermissionError):
            reader.execute_command(*command)
        assert time.monotonic() - started < 1


def resp(*args: str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        data = arg.encode()
        out += b"$%d\r\n%s\r\n" % (len(data), data)
    return out


def test_a_reader_that_sends_more_than_it_reads_is_cut_off_before_writers_are_refused(
    acl_server: dict[str, str], seeded: redis.Redis
) -> None:
    # 300 GETs of a 1 MiB result: 300 MiB of replies, over maxmemory (256 MB), unread.
    url = urlsplit(acl_server["viewer"])
    reader = socket.create_connection(("127.0.0.1", int(url.port or 0)), timeout=5)
    try:
        reader.sendall(resp("AUTH", str(url.username), str(url.password)))
        assert reader.recv(16) == b"+OK\r\n"
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.sendall(resp("GET", RESULT) * 300)
        time.sleep(1.0)
        used = int(seeded.info("memory")["used_memory"])
        assert used < 160 * 1024 * 1024, f"{used >> 20} MB held for one reader"
        # A worker still writes.
        seeded.set("{relevo}:turn:other:result", "ok")
    finally:
        reader.close()


async def loaded(url: str) -> None:
    worker = AsyncRedis.from_url(url)
    try:
        await keep_scripts(worker, worker)
    finally:
        await worker.aclose()


def inspect_call(scopes: int, window: str) -> list[str | int]:
    keys = ["{relevo}:idx:cool", "{relevo}:idx:exh"]
    for _ in range(scopes):
        keys += ["{relevo}:br:x", window, "{relevo}:probe:x"]
    keys.append("{relevo}:idx:gone")
    return [BREAKER_SCRIPTS._shas["inspect"], len(keys), *keys, 0, *[5000] * scopes]


def test_the_viewers_breaker_script_costs_the_same_whatever_its_keys_hold(
    acl_server: dict[str, str], seeded: redis.Redis
) -> None:
    asyncio.run(loaded(acl_server["relevo"]))
    big = "{relevo}:win:big"
    for start in range(0, 20_000, 5_000):
        seeded.hset(big, mapping={f"c{i}": 1 for i in range(start, start + 5_000)})
    with redis.Redis.from_url(acl_server["viewer"], socket_timeout=60) as viewer:
        started = time.monotonic()
        # One 20,000-field hash named as the window of 300 scopes: read whole, 300 times.
        viewer.execute_command("EVALSHA", *inspect_call(300, big))
        took = time.monotonic() - started
        assert took < 1.0, f"one viewer's script held the server {took:.1f} s"
        with pytest.raises(ResponseError, match="at most 10000 scopes"):
            viewer.execute_command("EVALSHA", *inspect_call(10_001, "{relevo}:win:x"))


@pytest.mark.parametrize("key", ["{relevo}:turns:payloads", "{relevo}:turns:sent"])
def test_a_producer_may_not_expire_every_services_sent_records(
    acl_server: dict[str, str], seeded: redis.Redis, key: str
) -> None:
    # The records a sweeper re-sends lost turns from: one EXPIRE 0 would drop them all.
    seeded.hset("{relevo}:turns:payloads", "someone-elses-turn", "{}")
    seeded.zadd("{relevo}:turns:sent", {"someone-elses-turn": 1})
    with redis.Redis.from_url(acl_server["producer"]) as producer, pytest.raises(NoPermissionError):
        producer.expire(key, 0)
    assert seeded.exists(key)


# A fair-queue key that is often absent (nothing queued, nobody parked, no wake token),
# made another type by a command the producer needs on another key: every enqueue or
# every dispatch round would fail on it (WRONGTYPE) until someone deletes it.
RETYPED: list[Command] = [
    ("HINCRBY", "{relevo}:fair:deadlines", "x", 1),
    ("HINCRBY", "{relevo}:fair:parked", "x", 1),
    ("ZADD", "{relevo}:fair:wake", 1, "x"),
    ("LPUSH", "{relevo}:fair:clock", "x"),
    ("INCR", "{relevo}:fair:vtime"),
    ("HSETNX", "{relevo}:fair:ready", "x", "1"),
    ("ZADD", "{relevo}:fair:parked", 9_000_000_000_000_000, "some-other-tenant"),
]


@pytest.mark.parametrize("command", RETYPED, ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_producer_may_not_make_a_fair_queue_key_one_every_round_fails_on(
    acl_server: dict[str, str], seeded: redis.Redis, command: Command
) -> None:
    seeded.delete(str(command[1]))
    with redis.Redis.from_url(acl_server["producer"]) as producer, pytest.raises(NoPermissionError):
        producer.execute_command(*command)
    assert not seeded.exists(str(command[1]))


@pytest.mark.parametrize("damage", [-1000, 1000])
def test_a_tenant_whose_queued_count_a_producer_damaged_is_still_served(
    acl_server: dict[str, str], seeded: redis.Redis, damage: int
) -> None:
    asyncio.run(loaded(acl_server["relevo"]))
    victim = f"victim{damage}"
    with redis.Redis.from_url(acl_server["producer"]) as producer:
        # Allowed: the enqueue script needs it. The victim is idle, so in no fair list.
        producer.hincrby("{relevo}:fair:queued", victim, damage)
        queued = enqueue_sync(
            producer,
            "relevo",
            tenant=victim,
            turn_id=f"turn-of-{victim}",
            deadline_ms=60_000,
            input_tokens=10,
            message="{}",
        )
    assert queued is True

    async def dispatched() -> list[str]:
        worker = AsyncRedis.from_url(acl_server["relevo"])
        try:
            done = await FairQueue(worker).dispatch(most=10, depth=100)
            return [tenant for tenant, _ in done.moved]
        finally:
            await worker.aclose()

    assert victim in asyncio.run(dispatched()), "the victim's turn was not dispatched"
