"""A Redis emptied under a fleet (FLUSHALL on a private redis-server): a producer waiting on
a turn the store no longer knows is told it was lost, not left to time out; the worker's
reset log line and the console say what kinds of state were lost."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.chainkit import worker_config
from tests.consolekit import http_console, log_in
from tests.test_celery_fleet import request
from tests.test_console import OPERATOR, TOKENS
from tests.workerkit import celery_worker_process, stop, wait_for_heartbeats
from worker.fleet import Producer, UnknownTurn
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.settings import load_settings
from worker.simulator import Simulator

pytestmark = pytest.mark.slow

SECTIONS = """
[worker]
queue = "{namespace}"
restore_interval_s = 1

[fairness]
default_turns_per_minute = 1
"""


@pytest.fixture
def url(private_redis: tuple[str, subprocess.Popen[bytes]]) -> str:
    return private_redis[0]


@pytest.fixture
def config(sim: Simulator, url: str, namespace: str, tmp_path: Path) -> Path:
    path = tmp_path / "chain.toml"
    sections = SECTIONS.format(namespace=namespace)
    text = worker_config(sim=sim.url, redis_url=url, namespace=namespace, sections=sections)
    path.write_text(text.replace("[redis]\n", "[redis]\nrejoin_check_s = 0.5\n", 1))
    return path


@pytest.fixture
def worker_log(config: Path, url: str, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """One worker process on the private Redis; its log."""
    log = tmp_path / "worker.log"
    queue = load_settings(config, require_secrets=False).worker.queue
    with log.open("wb") as out:
        name = f"w-{namespace}@%h"
        proc = celery_worker_process(config, queue=queue, name=name, threads=4, output=out)
    try:
        wait_for_heartbeats(url, namespace, [proc], log=log)
        yield log
    finally:
        stop([proc])


def test_a_producer_waiting_on_a_turn_an_emptied_store_forgot_is_told_it_was_lost(
    config: Path, url: str, worker_log: Path
) -> None:
    app = make_app(load_settings(config, require_secrets=False))
    first = enqueue_turn(request(0), app=app)
    assert first.get(timeout_s=30).status.value == "ok"
    # Its tenant may send one turn a minute: this one waits in the fair queue.
    queued = enqueue_turn(request(1, deadline_s=60), app=app)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(queued.get, 45)
        time.sleep(2)
        assert not waiting.done()
        with redis.Redis.from_url(url) as client:
            client.flushall()
        started = time.monotonic()
        with pytest.raises(UnknownTurn) as raised:
            waiting.result(timeout=50)
    assert raised.value.lost
    assert "lost" in str(raised.value)
    assert time.monotonic() - started < 15

    # The async producer is told the same.
    async def waits() -> UnknownTurn:
        async with Producer.from_settings(load_settings(config, require_secrets=False)) as producer:
            # The store emptied above holds no bucket: the first turn goes, the second waits.
            await producer.enqueue(request(2, deadline_s=60))
            handle = await producer.enqueue(request(3, deadline_s=60))
            waiting = asyncio.ensure_future(handle.result(timeout_s=45))
            await asyncio.sleep(2)
            assert not waiting.done()
            await producer.redis.flushall()
            with pytest.raises(UnknownTurn) as lost:
                await waiting
            return lost.value

    assert asyncio.run(waits()).lost
    # Celery's result consumer lets go of the private Redis while it still runs.
    del first, queued
    gc.collect()
    app.close()
    # The worker's reset line names the kinds of state lost, turns queued among them.
    until = time.monotonic() + 20
    while "breakers.store_reset" not in worker_log.read_text():
        assert time.monotonic() < until, worker_log.read_text()[-2000:]
        time.sleep(0.2)
    line = next(x for x in worker_log.read_text().splitlines() if "breakers.store_reset" in x)
    assert "turns queued" in line
    assert "budgets" in line


async def test_the_console_says_what_an_emptied_store_lost(
    config: Path, url: str, worker_log: Path
) -> None:
    with redis.Redis.from_url(url) as client:
        client.flushall()
    async with http_console(config, url, TOKENS) as http:
        await log_in(http, OPERATOR)
        until = time.monotonic() + 20
        while True:
            page = (await http.get("/?fragment=1")).text
            if 'id="store-reset"' in page:
                break
            assert time.monotonic() < until, "the console never said the store was reset"
            await asyncio.sleep(0.3)
    assert "turns queued" in page
    assert "the kill switch" in page
