"""The gauges an incident needs: a node's link to Redis, its backlog and re-sends, its
version; the fleet's held turns and queue depth, served once by `relevo exporter`."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import httpx
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

import breakers
from tests.chainkit import KEY, settings, turn, worker_config
from tests.netkit import free_port
from worker.fleet.exporter import FleetCollector, serve_metrics
from worker.fleet.heartbeat import read_heartbeats
from worker.fleet.loop import LoopThread
from worker.fleet.runner import TurnRunner
from worker.fleet.sweeper import Sweeper
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.observability.metrics import (
    BACKLOG_DROPPED_TOTAL,
    BACKLOG_WRITES,
    BUILD_INFO,
    HELD_TURNS,
    LOCAL_BREAKERS,
    QUEUE_DEPTH,
    TURNS_RESENT_TOTAL,
    VERSION,
    TurnMetrics,
)
from worker.simulator import Fault, Simulator
from worker.types import TurnRequest

RELEVO = [sys.executable, "-m", "worker.cli"]


def _value(metrics: TurnMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_process_state_sets_local_breakers_backlog_and_counts_each_drop_once() -> None:
    metrics = TurnMetrics()
    metrics.process_state(local=True, backlog=3, dropped=2)
    metrics.process_state(local=True, backlog=5, dropped=2)
    assert _value(metrics, LOCAL_BREAKERS) == 1
    assert _value(metrics, BACKLOG_WRITES) == 5
    assert _value(metrics, BACKLOG_DROPPED_TOTAL) == 2
    metrics.process_state(local=False, backlog=0, dropped=7)
    assert _value(metrics, LOCAL_BREAKERS) == 0
    assert _value(metrics, BACKLOG_WRITES) == 0
    assert _value(metrics, BACKLOG_DROPPED_TOTAL) == 7


def test_build_info_names_the_installed_version() -> None:
    assert _value(TurnMetrics(), BUILD_INFO, version=metadata.version("relevo")) == 1


def test_a_runner_that_cannot_reach_redis_says_so_in_its_gauges(sim: Simulator) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    os.environ.setdefault("RELEVO_TEST_KEY", KEY)
    runner = TurnRunner(settings(sim.url, redis={"url": dead}), loop=LoopThread())
    try:
        # Not asserted before the turn: the process's first heartbeat may already have
        # found Redis away (it beats from the start, not on traffic).
        result = runner.answer(turn().model_dump(mode="json"))
        assert result["status"] == "ok"
        assert _value(runner.metrics, LOCAL_BREAKERS) == 1
        # The result (and the spend) wait for Redis in the backlog.
        backlog = _value(runner.metrics, BACKLOG_WRITES)
        assert backlog is not None
        assert backlog >= 1
    finally:
        runner.close()


async def test_the_sweeper_counts_the_turns_it_sends_again(redis_url: str, namespace: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    metrics = TurnMetrics()
    sent: list[TurnRequest] = []
    try:
        keys = TurnKeys(namespace)
        lost = turn()
        long_ago_ms = (time.time() - 60) * 1000
        await client.zadd(keys.sent, {lost.turn_id: long_ago_ms})
        await client.hset(keys.payloads, lost.turn_id, lost.model_dump_json())
        sweeper = Sweeper(
            TurnStore(client, namespace=namespace),
            sent.append,
            holder="test",
            interval_s=1,
            older_than_s=10,
            on_resent=metrics.resent,
        )
        assert await sweeper.sweep_once() == 1
    finally:
        await client.aclose()
    assert [t.turn_id for t in sent] == [lost.turn_id]
    assert _value(metrics, TURNS_RESENT_TOTAL) == 1


def test_fleet_collector_reads_held_turns_and_the_queue_depth(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    config = settings(
        sim.url, redis={"url": redis_url, "namespace": namespace}, worker={"queue": namespace}
    )

    async def arrange() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            held = breakers.HeldTurns(client, namespace=namespace)
            await held.hold("t1", "{}")
            await held.hold("t2", "{}")
            await client.lpush(namespace, "m1", "m2", "m3")
        finally:
            await client.aclose()

    asyncio.run(arrange())
    gauges = {
        (s.name, tuple(s.labels.items())): s.value
        for family in FleetCollector(config).collect()
        for s in family.samples
    }
    assert gauges[(HELD_TURNS, ())] == 2
    assert gauges[(QUEUE_DEPTH, (("queue", namespace),))] == 3


def test_a_node_serves_its_own_metrics_and_never_reads_the_fleet(sim: Simulator) -> None:
    # Redis is down: a node that still read the fleet at each scrape would log it.
    dead = f"redis://127.0.0.1:{free_port()}/0"
    config = settings(sim.url, redis={"url": dead}, observability={"metrics_addr": "127.0.0.1"})
    port = free_port()
    with capture_logs() as events, serve_metrics(config, port) as env:
        assert env
        names = {name for name, _ in _scrape(port)}
    assert not names & {"relevo_breaker_state", "relevo_kill_switch", HELD_TURNS}
    assert not [e for e in events if e["event"] == "metrics.fleet_unreadable"]


def test_relevo_exporter_serves_the_fleet_state_and_stops_on_sigterm(
    sim: Simulator, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / "chain.toml"
    sections = '[observability]\nmetrics_addr = "127.0.0.1"\n'
    path.write_text(
        worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace, sections=sections)
    )
    port = free_port()
    with (tmp_path / "exporter.log").open("wb") as log:
        exporter = subprocess.Popen(
            [*RELEVO, "exporter", "--config", str(path), "--port", str(port)],
            env={**os.environ, "RELEVO_TEST_KEY": KEY},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        until = time.monotonic() + 20
        while True:
            try:
                series = _scrape(port)
                break
            except httpx.TransportError:
                assert exporter.poll() is None, (tmp_path / "exporter.log").read_text()
                assert time.monotonic() < until, "the exporter never answered"
                time.sleep(0.2)
    finally:
        exporter.send_signal(signal.SIGTERM)
        code = exporter.wait(timeout=20)
    assert code == 0
    assert series[("relevo_kill_switch", frozenset())] == 0
    assert series[(QUEUE_DEPTH, frozenset({("queue", namespace)}))] == 0
    assert series[(HELD_TURNS, frozenset())] == 0
    assert ("relevo_breaker_state", frozenset({("scope", "vendor:openai")})) in series


def test_a_taken_port_ends_the_exporter_with_exit_11(tmp_path: Path) -> None:
    """Exit 11, not 6: 6 says Redis did not answer, and an operator would look there."""
    path = tmp_path / "chain.toml"
    sections = '[observability]\nmetrics_addr = "127.0.0.1"\n'
    dead = f"redis://127.0.0.1:{free_port()}/0"
    path.write_text(
        worker_config(sim="http://127.0.0.1:1", redis_url=dead, namespace="x", sections=sections)
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [*RELEVO, "exporter", "--config", str(path), "--port", str(port)],
            env={**os.environ, "RELEVO_TEST_KEY": KEY},
            capture_output=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 11
    assert b"metrics.not_served" in done.stderr
    assert f"relevo: exporter: port {port} could not be bound".encode() in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_runner_beats_with_its_version_and_the_turns_it_runs(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    os.environ.setdefault("RELEVO_TEST_KEY", KEY)
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    runner = TurnRunner(config, loop=LoopThread())
    keys = TurnKeys(namespace)
    try:
        sim.set_faults("alpha", Fault(latency_s=1.0, times=1))
        turn_future = asyncio.run_coroutine_threadsafe(runner.result_of(turn()), runner.loop.loop)
        time.sleep(0.5)  # the turn waits on the slow model
        runner.loop.run(runner.process.announce(), timeout_s=5)
        during = runner.loop.run(read_heartbeats(runner.store.redis, keys), timeout_s=5).beats
        turn_future.result(timeout=10)
        runner.loop.run(runner.process.announce(), timeout_s=5)
        after = runner.loop.run(read_heartbeats(runner.store.redis, keys), timeout_s=5).beats
    finally:
        runner.close()
    (beat_during,) = during
    assert beat_during.process == runner.holder
    assert beat_during.version == VERSION
    assert beat_during.in_flight == 1
    assert not beat_during.local_breakers
    assert beat_during.alive(int(time.time() * 1000))
    assert [b.in_flight for b in after] == [0]
