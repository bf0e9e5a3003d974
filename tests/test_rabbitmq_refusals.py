"""What RabbitMQ refuses never stops the fleet: an outbox entry no broker takes is set aside
and the turns behind it go on; a turn over the broker's size limit is an `InputError`; a
turn held past the broker's consumer timeout costs the node a channel, not its life.

On a private RabbitMQ node (`tests.rabbitkit.PrivateRabbit`) whose limits are set low:
`max_message_size` 1 MiB, `consumer_timeout` 3 s, checked every half second.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu.connection import Connection
from redis.asyncio import Redis

from tests import chainkit
from tests.conftest import skip_unless_ci
from tests.rabbitkit import PrivateRabbit, private_rabbit_missing
from tests.test_rabbitmq import Fleet, fifo, rabbit_config, request, wait_results
from worker.errors import InputError
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn, send_turn
from worker.fleet.fairqueue import FairKeys
from worker.fleet.rabbitmq import RabbitQueue, dead_letters_key, outbox_key
from worker.fleet.sweeper import Sweeper
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.settings import BrokerSettings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim")


LIMIT = 1024 * 1024
# Over the broker's limit, within relevo's own (16 MiB, 256 KiB a message).
BIG = [Message(role="user", content="x" * 200_000) for _ in range(8)]


@pytest.fixture(scope="module")
def rabbit() -> Iterator[PrivateRabbit]:
    missing = private_rabbit_missing()
    if missing is not None:
        skip_unless_ci(missing)
    with PrivateRabbit() as node:
        # Channels read these as they open: every channel a test opens has them.
        for key, value in (
            ("max_message_size", LIMIT),
            ("consumer_timeout", 3000),
            ("channel_tick_interval", 500),
        ):
            node.ctl("eval", f"application:set_env(rabbit, {key}, {value}).")
        yield node


@pytest.fixture
def config(
    rabbit: PrivateRabbit, redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> Path:
    return rabbit_config(
        tmp_path / "c.toml",
        sim=sim.url,
        redis_url=redis_url,
        broker=rabbit.url,
        namespace=namespace,
        deadline_s=30,
    )


def test_an_outbox_entry_no_broker_takes_is_set_aside_and_the_turns_behind_it_go_on(
    config: Path, redis_url: str, tmp_path: Path, namespace: str
) -> None:
    """In the outbox, oldest first: a turn over the broker's limit, an entry that is no
    message, and a Redis transport message (a producer still on the Redis broker); then
    turns of two tenants. The big turn ends `failed` (undeliverable), the entry that is no
    message is kept aside, every other turn is answered."""
    settings = load_settings(config, require_secrets=False)
    app = make_app(settings)
    on_redis = make_app(settings.model_copy(update={"broker": BrokerSettings()}))
    fleet = Fleet(config, tmp_path / "workers.log")
    try:
        big = enqueue_turn(request("acme", deadline_s=30, messages=BIG), app=app)
        asyncio.run(_push(redis_url, outbox_key(namespace), b'{"not": "a message"}'))
        # An envelope whose priority no AMQP frame carries, naming a turn of its own.
        poison = {
            "body": "e30=",
            "properties": {"priority": "high", "application_headers": {"id": "poison-1"}},
            "exchange": namespace,
            "routing_key": namespace,
        }
        asyncio.run(_push(redis_url, outbox_key(namespace), json.dumps(poison).encode()))
        from_redis = enqueue_turn(request("beta", deadline_s=30), app=on_redis)
        small = [enqueue_turn(request(f"t{i % 2}", deadline_s=30), app=app) for i in range(4)]
        fleet.start("a")
        results = {h.turn_id: h.get(timeout_s=60) for h in [big, from_redis, *small]}
        assert all(p.poll() is None for p in fleet.procs), fleet.log.read_text()[-2000:]
    finally:
        app.close()
        on_redis.close()
        fleet.stop()
    failed = results.pop(big.turn_id)
    assert (failed.status, failed.reason) == (Status.FAILED, "undeliverable")
    assert "max size" in (failed.error or ""), failed.error
    assert {r.status for r in results.values()} == {Status.OK}
    poisoned = asyncio.run(_result(config, "poison-1"))
    assert poisoned is not None
    assert (poisoned.status, poisoned.reason) == (Status.FAILED, "undeliverable")
    dead = asyncio.run(_list(redis_url, dead_letters_key(namespace)))
    assert len(dead) == 3
    assert any(big.turn_id.encode() in entry for entry in dead)
    assert b'{"not": "a message"}' in dead
    log = fleet.log.read_text()
    assert log.count("dispatch.set_aside") == 3
    assert "broker_unreachable" not in log


def test_with_fair_dispatch_off_a_turn_the_broker_refuses_is_an_input_error(
    config: Path, rabbit: PrivateRabbit, namespace: str
) -> None:
    """Published straight to RabbitMQ: over `[broker] max_message_bytes`, an `InputError`
    before anything is recorded; over the broker's own limit (the setting above it), an
    `InputError` from its refusal, and the next turn goes out on the same app."""
    settings = fifo(config)
    limited = settings.model_copy(
        update={"broker": settings.broker.model_copy(update={"max_message_bytes": LIMIT})}
    )
    turn = request(messages=BIG)
    app = make_app(limited)
    try:
        with pytest.raises(InputError, match=r"over the broker's limit of 1048576 bytes"):
            send_turn(app, turn)
    finally:
        app.close()
    assert asyncio.run(_sent(settings.redis.url, namespace, turn.turn_id)) is None
    app = make_app(settings)
    try:
        with pytest.raises(InputError, match="refused the turn as too large"):
            send_turn(app, turn)
        send_turn(app, request())  # a channel the broker closed does not stay closed
    finally:
        app.close()
    with Connection(rabbit.url) as connection:
        _, ready, _ = connection.channel().queue_declare(namespace, passive=True)
    assert ready == 1


def test_non_ascii_text_goes_to_the_broker_as_utf8_not_escapes(
    config: Path, rabbit: PrivateRabbit, namespace: str
) -> None:
    text = "中文的请求" * 20_000  # 100,000 characters, 300,000 bytes in UTF-8
    app = make_app(fifo(config))
    try:
        send_turn(app, request(messages=[Message(role="user", content=text)]))
    finally:
        app.close()
    with Connection(rabbit.url) as connection:
        message = connection.channel().basic_get(namespace, no_ack=True)
    assert message is not None
    body = message.body.encode() if isinstance(message.body, str) else message.body
    assert 300_000 < len(body) < 310_000
    assert json.loads(body)[0][0]["messages"][0]["content"] == text


def test_a_turn_held_past_the_consumer_timeout_does_not_take_the_node_down(
    config: Path, rabbit: PrivateRabbit, sim: Simulator, tmp_path: Path
) -> None:
    """A 10 s turn against a 3 s consumer timeout: the broker closes the worker's channel
    (RabbitMQ 3.10 ignores the consumer's own timeout); the node stays up, opens it
    again, answers the long turn once and the turns after it."""
    sim.set_faults("alpha", Fault(tokens=10, token_interval_s=1.0, times=1))
    settings = load_settings(config, require_secrets=False)
    fleet = Fleet(config, tmp_path / "workers.log")
    app = make_app(settings)
    try:
        fleet.start("a", threads=4)
        long = send_turn(app, request(stream=True, deadline_s=30), ignore_result=True)
        time.sleep(6)  # past the consumer timeout, the long turn still running
        short = [send_turn(app, request(), ignore_result=True) for _ in range(3)]
        ids = [long.id, *(s.id for s in short)]
        results = wait_results(settings, ids, timeout_s=60)
        alive = all(p.poll() is None for p in fleet.procs)
    finally:
        app.close()
        fleet.stop()
    log = fleet.log.read_text()
    assert alive, log[-3000:]
    # A RabbitMQ before 3.11.15 ignores the timeout the consumer asks for: the worker
    # says so at start.
    version = RabbitQueue(rabbit.url, "any").version_sync()
    assert version is not None
    assert ("broker.consumer_timeout_not_set" in log) == (version < (3, 11, 15))
    assert "acknowledgement timed out" in log or "PreconditionFailed" in log, log[-3000:]
    assert {r.status for r in results.values()} == {Status.OK}, results
    assert len(results) == 4
    assert sim.calls() == 4  # the long turn delivered again, run once


async def _result(config: Path, turn_id: str) -> TurnResult | None:
    settings = load_settings(config, require_secrets=False)
    client = settings.redis.connect(timeout_s=5.0)
    try:
        return await TurnStore(client, namespace=settings.redis.namespace).result(turn_id)
    finally:
        await client.aclose()


async def _push(url: str, key: str, raw: bytes) -> None:
    client = Redis.from_url(url)
    try:
        await client.lpush(key, raw)
    finally:
        await client.aclose()


async def _list(url: str, key: str) -> list[bytes]:
    client = Redis.from_url(url)
    try:
        return [bytes(e) for e in await client.lrange(key, 0, -1)]
    finally:
        await client.aclose()


async def _sent(url: str, namespace: str, turn_id: str) -> float | None:
    client = Redis.from_url(url)
    try:
        return await client.zscore(TurnKeys(namespace).sent, turn_id)
    finally:
        await client.aclose()


async def test_the_sweeper_answers_a_turn_the_broker_refuses_and_sends_the_rest(
    redis_url: str, sim: Simulator, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lost turns, the older one over `[broker] max_message_bytes` (Redis as the
    broker here): it ends `failed` (undeliverable), the other is sent again."""
    monkeypatch.setenv("RELEVO_TEST_KEY", chainkit.KEY)
    fleet_settings = chainkit.settings(
        sim.url,
        redis={"url": redis_url, "namespace": namespace},
        broker={"max_message_bytes": 64 * 1024},
        worker={"queue": namespace},
    )
    app = make_app(fleet_settings)
    client = Redis.from_url(redis_url)
    store = TurnStore(client, namespace=namespace)
    big = request(messages=[Message(role="user", content="x" * 100_000)])
    lost = request()
    try:
        long_ago_ms = (time.time() - 60) * 1000
        for at, turn in enumerate((big, lost)):
            await client.zadd(store.keys.sent, {turn.turn_id: long_ago_ms + at})
            await client.hset(store.keys.payloads, turn.turn_id, turn.model_dump_json())
        sweeper = Sweeper(
            store,
            lambda turn: send_turn(app, turn, ignore_result=True),
            holder="test",
            interval_s=1,
            older_than_s=10,
        )
        assert await sweeper.sweep_once() == 1
        refused = await store.result(big.turn_id)
        queued = await client.hexists(FairKeys(namespace).index(), lost.turn_id)
    finally:
        await client.aclose()
        app.close()
    assert refused is not None
    assert (refused.status, refused.reason) == (Status.FAILED, "undeliverable")
    assert "max_message_bytes" in (refused.error or "")
    assert queued  # sent again: in its tenant's fair queue
