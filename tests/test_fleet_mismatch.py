"""Producers and workers that disagree on the fleet's settings strand no turn, and say so.

Real `celery worker` processes on the Redis broker; a producer with fair dispatch on
while the workers have it off, and a producer on RabbitMQ (the machine's, only
connected to: with fair dispatch on its turns go to the fair queue in Redis) while the
workers are on Redis. Every turn is answered, and the workers warn at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from tests.chainkit import write_worker_config
from tests.conftest import skip_unless_ci
from tests.rabbitkit import machine_url
from tests.test_rabbitmq import Fleet, request
from worker.fleet import Producer
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.settings import BrokerSettings, FairnessSettings, Settings, load_settings
from worker.simulator import Simulator
from worker.types import Status

pytestmark = pytest.mark.usefixtures("fresh_sim")


FIFO_WORKERS = """
[fairness]
enabled = false
"""


def _config(path: Path, sim: Simulator, redis_url: str, namespace: str, sections: str) -> Path:
    return write_worker_config(
        path,
        sim=sim.url,
        redis_url=redis_url,
        namespace=namespace,
        sections=sections,
        deadline_s=30,
    )


def _fair(settings: Settings) -> Settings:
    return settings.model_copy(update={"fairness": FairnessSettings(enabled=True)})


def test_workers_with_fair_dispatch_off_drain_what_a_fair_producer_queued(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    config = _config(tmp_path / "c.toml", sim, redis_url, namespace, FIFO_WORKERS)
    workers = Fleet(config, tmp_path / "workers.log")
    producer_settings = _fair(workers.settings)
    app = make_app(producer_settings)
    try:
        handles = [enqueue_turn(request(f"t{i % 2}", deadline_s=30), app=app) for i in range(4)]
        workers.start("fifo", threads=4)
        results = [h.get(timeout_s=60) for h in handles]

        async def compare() -> list[str]:
            async with Producer.from_settings(producer_settings) as producer:
                return await producer.compare_fleet()

        # The workers' heartbeats say fair dispatch is off: the producer is told at once.
        differ = asyncio.run(compare())
    finally:
        app.close()
        workers.stop()
    assert {r.status for r in results} == {Status.OK}
    assert differ == ["fairness"]
    log = workers.log.read_text()
    assert "fleet.settings_differ" in log
    assert '"differ": ["fairness"]' in log


def test_a_rabbitmq_producers_fair_turns_run_on_redis_broker_workers(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    """The turns reach the Redis broker's queue in the RabbitMQ outbox's format: the
    workers read that format too, and warn that the producer's broker is not theirs."""
    amqp = machine_url()
    if amqp is None:
        skip_unless_ci("no RabbitMQ listening on 127.0.0.1:5672")
    assert amqp is not None
    config = _config(tmp_path / "c.toml", sim, redis_url, namespace, "")
    workers = Fleet(config, tmp_path / "workers.log")
    settings = load_settings(config, require_secrets=False)
    app = make_app(settings.model_copy(update={"broker": BrokerSettings(url=amqp)}))
    try:
        handles = [enqueue_turn(request(f"t{i % 2}", deadline_s=30), app=app) for i in range(4)]
        workers.start("redis", threads=4)
        results = [h.get(timeout_s=60) for h in handles]
    finally:
        app.close()
        workers.stop()
    assert {r.status for r in results} == {Status.OK}
    log = workers.log.read_text()
    assert "KeyError" not in log
    assert '"differ": ["broker"]' in log


def test_a_message_in_no_format_on_the_redis_brokers_queue_is_dropped_and_the_rest_run(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    """Something that is no broker message, in the fleet's queue ahead of turns: the
    worker logs it and goes on."""
    config = _config(tmp_path / "c.toml", sim, redis_url, namespace, FIFO_WORKERS)
    workers = Fleet(config, tmp_path / "workers.log")
    app = make_app(workers.settings)
    client = redis.Redis.from_url(redis_url)
    try:
        client.lpush(namespace, b'{"not": "a message"}', b"not even JSON")
        handles = [enqueue_turn(request(deadline_s=30), app=app) for _ in range(3)]
        workers.start("redis", threads=4)
        results = [h.get(timeout_s=60) for h in handles]
        alive = all(p.poll() is None for p in workers.procs)
        left = client.llen(namespace)
    finally:
        client.close()
        app.close()
        workers.stop()
    assert alive
    assert {r.status for r in results} == {Status.OK}
    assert left == 0


async def test_a_producer_with_no_live_worker_in_its_namespace_is_told_at_start(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    config = _config(tmp_path / "c.toml", sim, redis_url, namespace, "")
    settings = load_settings(config, require_secrets=False)
    async with Producer.from_settings(settings) as producer:
        assert await producer.compare_fleet() == ["namespace"]
