"""The Celery app's broker transport (kombu's Redis transport, one client per pool) and
its result backend (Celery's, reading each turn's result from the turn store)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import states
from celery.result import AsyncResult
from kombu import Producer, Queue
from redis import asyncio as aioredis

from tests.chainkit import worker_config
from worker.fleet.app import TASK_NAME, RunTurn, make_app
from worker.fleet.turnstore import TurnStore
from worker.settings import RedisSettings, Settings
from worker.types import Status, TurnResult


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


def test_each_app_runs_the_importable_task_on_its_own_runner_and_backend(
    redis_url: str,
) -> None:
    """Two apps in one process (the embedded demo, tests): each app's `relevo.run_turn` is
    a `RunTurn` bound to that app, with that app's runner. Celery keeps a task's app on
    its class: one class for both would hand the first app's turns to the second's."""
    runners = [object(), object()]
    apps = [
        make_app(
            Settings.model_construct(redis=RedisSettings(url=redis_url, namespace=f"app-{i}")),
            runner=lambda made=made: made,
        )
        for i, made in enumerate(runners)
    ]
    tasks = [app.tasks[TASK_NAME] for app in apps]
    assert all(isinstance(task, RunTurn) for task in tasks)
    assert [task.app for task in tasks] == apps
    assert [task.runner() for task in tasks] == runners
    assert [task.backend._turn_keys.namespace for task in tasks] == ["app-0", "app-1"]
    for app in apps:
        app.close()


def _answered(turn_id: str) -> TurnResult:
    return TurnResult(turn_id=turn_id, tenant_id="acme", status=Status.OK, primary_model="m")


def _save(redis_url: str, namespace: str, result: TurnResult) -> TurnResult:
    async def save() -> TurnResult:
        client = aioredis.Redis.from_url(redis_url)
        try:
            return await TurnStore(client, namespace=namespace, ttl_s=60).save(result)
        finally:
            await client.aclose()

    return asyncio.run(save())


@pytest.fixture
def results(redis_url: str, namespace: str) -> Iterator[tuple[Any, redis.Redis]]:
    """The app's result backend on `namespace`, and a plain client to look at the keys."""
    settings = Settings.model_construct(redis=RedisSettings(url=redis_url, namespace=namespace))
    app = make_app(settings)
    with redis.Redis.from_url(redis_url) as client:
        yield app.backend, client
    app.close()


def test_a_result_is_read_from_the_turn_store_and_never_stored_twice(
    results: tuple[Any, redis.Redis], redis_url: str, namespace: str
) -> None:
    backend, client = results
    turn_id = f"{namespace}-turn"
    assert backend.get_task_meta(turn_id)["status"] == states.PENDING
    _save(redis_url, namespace, _answered(turn_id))
    meta = backend.get_task_meta(turn_id)
    assert (meta["status"], meta["task_id"]) == (states.SUCCESS, turn_id)
    assert meta["result"] == _answered(turn_id).model_dump(mode="json")
    # A success that reaches the backend (a message asking for its result) writes nothing.
    backend.store_result(turn_id, {"status": "ok", "other": 1}, states.SUCCESS)
    assert client.keys(f"*{turn_id}*") == [f"{{{namespace}}}:turn:{turn_id}:result".encode()]
    # Nor does a failure after it, and Celery's forget leaves the turn's result.
    backend.store_result(turn_id, ValueError("late"), states.FAILURE)
    backend.forget(turn_id)
    assert backend.get_task_meta(turn_id, cache=False)["status"] == states.SUCCESS


def test_a_task_that_raised_is_stored_by_celery_until_the_turn_answers(
    results: tuple[Any, redis.Redis], redis_url: str, namespace: str
) -> None:
    backend, client = results
    turn_id = f"{namespace}-raised"
    backend.store_result(turn_id, ValueError("the loop timed out"), states.FAILURE)
    assert client.exists(f"celery-task-meta-{turn_id}")
    meta = backend.get_task_meta(turn_id, cache=False)
    assert meta["status"] == states.FAILURE
    assert isinstance(meta["result"], ValueError)
    _save(redis_url, namespace, _answered(turn_id))  # a redelivery answered it
    assert backend.get_task_meta(turn_id, cache=False)["status"] == states.SUCCESS
    backend.forget(turn_id)
    assert not client.exists(f"celery-task-meta-{turn_id}")


def test_a_waiting_asyncresult_wakes_on_the_turn_stores_save(
    results: tuple[Any, redis.Redis], redis_url: str, namespace: str
) -> None:
    backend, _ = results
    turn_id = f"{namespace}-waited"
    # Celery's Redis backend does not poll while it waits: only the save's publish wakes it.
    saver = threading.Timer(0.3, _save, (redis_url, namespace, _answered(turn_id)))
    saver.start()
    started = time.monotonic()
    try:
        waiting = AsyncResult(turn_id, backend=backend, app=backend.app)
        raw = waiting.get(timeout=5, disable_sync_subtasks=False)
    finally:
        saver.join()
    assert raw["turn_id"] == turn_id
    assert 0.25 < time.monotonic() - started < 4


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
