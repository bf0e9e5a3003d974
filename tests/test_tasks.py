"""The Celery app's broker transport (kombu's Redis transport, one client per pool) and
its result backend (Celery's, without the read before a success)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from celery import states
from kombu import Producer, Queue

from tests.chainkit import worker_config
from worker.fleet.app import make_app
from worker.settings import RedisSettings, Settings


@pytest.mark.parametrize(
    ("url", "ours"),
    [
        ("redis://127.0.0.1:6379/0", True),
        ("rediss://127.0.0.1:6380/0?ssl_cert_reqs=required", True),
        ("sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380", True),
        ("unix:///run/redis.sock", False),
    ],
)
def test_redis_urls_get_the_reusing_transport(url: str, ours: bool) -> None:
    master = "relevo" if url.startswith("sentinel") else None
    redis_settings = RedisSettings(url=url, sentinel_master=master)
    app = make_app(Settings.model_construct(redis=redis_settings))
    assert (app.conf.broker_transport is not None) is ours
    assert (app.backend_cls is not None) is ours


def test_a_success_is_written_without_a_read_and_a_failure_does_not_replace_it(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = make_app(Settings.model_construct(redis=RedisSettings(url=redis_url))).backend
    turn_id = f"{namespace}-turn"
    reads: list[str] = []
    read = backend.get
    monkeypatch.setattr(backend, "get", lambda key: reads.append(key) or read(key))
    try:
        backend.store_result(turn_id, {"status": "ok", "n": 1}, states.SUCCESS)
        backend.store_result(turn_id, {"status": "ok", "n": 1}, states.SUCCESS)
        assert reads == []
        backend.store_result(turn_id, ValueError("late"), states.FAILURE)
        assert reads  # Celery's own check, for anything but a success
        assert backend.get_task_meta(turn_id)["result"] == {"status": "ok", "n": 1}
    finally:
        backend.forget(turn_id)


def test_acks_and_unacked_records_reuse_one_client_until_the_pool_changes(
    redis_url: str, namespace: str
) -> None:
    app = make_app(Settings.model_construct(redis=RedisSettings(url=redis_url)))
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        assert first.connection_pool is channel.pool
        # The consumer's own (asynchronous) client stays kombu's.
        assert channel.client is not first
        key = f"{namespace}:probe"
        with channel.conn_or_acquire() as client:
            client.set(key, "1", ex=10)
        assert first.get(key) == b"1"
        channel._disconnect_pools()  # what a reconnect does
        again = channel._create_client()
        assert again is not first
        assert again.connection_pool is channel.pool
        assert again.delete(key) == 1


def test_closing_again_after_a_lost_connection_keeps_the_process_alive(
    redis_url: str, namespace: str
) -> None:
    # Celery's consumer after a lost connection: `collect()` fails to close the channel but
    # detaches the transport, then `close()` closes the channel again, which puts back its
    # deliveries. kombu raised AttributeError there, and the worker process died.
    app = make_app(Settings.model_construct(redis=RedisSettings(url=redis_url)))
    unacked = f"{namespace}:unacked"
    app.conf.broker_transport_options |= {
        "unacked_key": unacked,
        "unacked_index_key": f"{unacked}_index",
    }
    queue = f"{namespace}:queue"
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        Queue(queue, channel=channel).declare()
        Producer(channel).publish({"n": 1}, routing_key=queue)
        assert channel.basic_get(queue) is not None  # delivered, not acked
        connection._do_close_transport()
        connection.close()
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.hlen(unacked) == 1  # back after the visibility timeout
    finally:
        client.delete(unacked, f"{unacked}_index", queue)
        client.close()


def test_a_producer_imports_the_app_without_keys_and_a_worker_without_them_stops(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    config = tmp_path / "chain.toml"
    config.write_text(
        worker_config(sim="http://127.0.0.1:9", redis_url=redis_url, namespace=namespace)
    )
    env = {k: v for k, v in os.environ.items() if k != "RELEVO_TEST_KEY"}
    env["RELEVO_CONFIG"] = str(config)
    producer = subprocess.run(
        [sys.executable, "-c", "import worker.fleet.app"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert producer.returncode == 0, producer.stderr
    worker = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "worker.fleet.app", "worker", "-P", "solo"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode != 0
    assert "RELEVO_TEST_KEY" in worker.stderr
