"""The sweeper: a turn the broker lost is re-sent; an answered or running one is not.

The loss is made the way kombu makes it: the message is popped off the queue and
recorded nowhere (a worker killed between BRPOP and its unacked record).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from tests.conftest import WorkerToml
from tests.test_celery_fleet import request, start_worker
from worker.fleet.app import make_app
from worker.fleet.enqueue import TurnHandle, enqueue_turn
from worker.fleet.fairqueue import FairQueue
from worker.fleet.turnstore import TurnKeys
from worker.settings import load_settings
from worker.simulator import Simulator
from worker.types import Status, TurnResult

__all__ = ["start_worker"]  # the fixture, shared with the fleet tests

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_sim")]

SECTIONS = """
[retry]
base_delay_s = 0.01

[worker]
queue = "{namespace}"
visibility_timeout_s = 6
restore_interval_s = 1
sweep_interval_s = 0.5
"""
# A record is due after the visibility timeout plus the restore interval.
DUE_S = 7


@pytest.fixture
def config(worker_toml: WorkerToml) -> Path:
    return worker_toml(SECTIONS, deadline_s=5)


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as client:
        yield client


def lost_turn(config: Path, broker: redis.Redis, namespace: str) -> TurnHandle:
    """A turn enqueued with no worker running, dispatched from the fair queue, whose message
    then vanishes from the broker's queue."""
    settings = load_settings(config, require_secrets=False)
    app = make_app(settings)
    handle = enqueue_turn(request(tenant_id="acme"), app=app)
    asyncio.run(dispatch_once(settings.redis.url, namespace))
    message = broker.rpop(namespace)
    assert message is not None
    assert handle.turn_id.encode() in message
    assert broker.llen(namespace) == 0
    return handle


async def dispatch_once(url: str, namespace: str) -> None:
    client = Redis.from_url(url)
    try:
        await FairQueue(client, namespace=namespace, queue=namespace).dispatch(most=10, depth=10)
    finally:
        await client.aclose()


def recorded(broker: redis.Redis, keys: TurnKeys, turn_id: str) -> bool:
    in_zset = broker.zscore(keys.sent, turn_id) is not None
    assert in_zset == bool(broker.hexists(keys.payloads, turn_id))
    return in_zset


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    until = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < until, what
        time.sleep(0.2)


def test_a_turn_the_broker_lost_is_resent_and_answered(
    config: Path,
    sim: Simulator,
    broker: redis.Redis,
    namespace: str,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    keys = TurnKeys(namespace)
    handle = lost_turn(config, broker, namespace)
    assert recorded(broker, keys, handle.turn_id)
    start_worker("sweeper")
    # The sweeper keeps the records' expiry (a producer may not EXPIRE them).
    wait_until(lambda: broker.ttl(keys.sent) > 0 < broker.ttl(keys.payloads), 20, "no expiry")
    result = handle.get(timeout_s=DUE_S + 30)
    assert result.status is Status.OK
    assert result.turn_id == handle.turn_id
    wait_until(lambda: not recorded(broker, keys, handle.turn_id), 5, "the record stayed")
    assert sim.calls("alpha") == 1


def test_a_turn_with_a_stored_result_is_not_resent(
    config: Path,
    sim: Simulator,
    broker: redis.Redis,
    namespace: str,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    keys = TurnKeys(namespace)
    handle = lost_turn(config, broker, namespace)
    saved = TurnResult(
        turn_id=handle.turn_id, tenant_id="acme", status=Status.OK, primary_model="alpha"
    )
    broker.set(keys.result(handle.turn_id), saved.model_dump_json(), ex=600)
    start_worker("sweeper")
    # The sweeper ran: it dropped the record, and sent nothing.
    wait_until(lambda: not recorded(broker, keys, handle.turn_id), DUE_S + 30, "never swept")
    time.sleep(1)
    assert broker.llen(namespace) == 0
    assert sim.calls("alpha") == 0


def test_a_claimed_turn_is_not_resent_until_its_claim_lapses(
    config: Path,
    sim: Simulator,
    broker: redis.Redis,
    namespace: str,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    keys = TurnKeys(namespace)
    handle = lost_turn(config, broker, namespace)
    # Another worker is running it (its claim), for as long as this test waits.
    broker.set(keys.claim(handle.turn_id), "elsewhere:1", px=60_000)
    start_worker("sweeper")
    time.sleep(DUE_S + 5)  # several sweeps past the record's due time
    assert recorded(broker, keys, handle.turn_id)
    assert broker.llen(namespace) == 0
    assert sim.calls("alpha") == 0
    # The claim lapses without a result (that worker died): now the turn is re-sent.
    broker.delete(keys.claim(handle.turn_id))
    assert handle.get(timeout_s=30).status is Status.OK
    wait_until(lambda: not recorded(broker, keys, handle.turn_id), 5, "the record stayed")
