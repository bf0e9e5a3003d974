"""Logs, metrics and the fallback-rate alert: per turn, per process, and through `relevo worker`."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio
import structlog
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

import breakers
import budgets
from tests.chainkit import ID_OF, KEY, MODEL_OF, ORDER, run, settings, turn, worker_config
from tests.netkit import free_port
from worker.fleet.exporter import FleetCollector, serve_metrics
from worker.observability.alert import FallbackWatch
from worker.observability.logs import configure_logging
from worker.observability.metrics import (
    ATTEMPTS_TOTAL,
    FALLBACK_RATIO,
    METRIC_NAMES,
    TURNS_TOTAL,
    TurnMetrics,
    is_exported,
)
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


RELEVO = [sys.executable, "-m", "worker.cli"]


# -- logs ---------------------------------------------------------------------------------


async def test_turn_completed_names_each_jump_and_its_status(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=529))
    with capture_logs() as events:
        result = await run(settings(sim.url), turn())
    assert result.step == 1
    attempts = [e for e in events if e["event"] == "turn.attempt"]
    (done,) = [e for e in events if e["event"] == "turn.completed"]
    assert len(attempts) == len(result.attempts) == 2
    assert done["turn_id"] == result.turn_id
    assert done["tenant_id"] == "acme"
    assert done["status"] == "ok"
    assert done["primary_model"] == "openai/alpha"
    assert done["effective_model"] == "anthropic/beta"
    assert done["effective_provider"] == "an"
    assert done["step"] == 1
    assert done["jumps"] == [
        {"model": "openai/alpha", "provider": "oa", "status": 529, "error_class": "overloaded"}
    ]
    assert done["attempt_latency_ms"] == [a.latency_ms for a in result.attempts]
    assert done["latency_ms"] == result.latency_ms
    # OpenTelemetry GenAI names beside ours.
    assert done["gen_ai.request.model"] == "alpha"
    assert done["gen_ai.response.model"] == "beta"
    assert done["gen_ai.provider.name"] == "anthropic"  # the API, by the conventions' name
    assert done["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert done["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    failed, answered = attempts
    assert failed["http_status"] == 529
    assert failed["error.type"] == "overloaded"
    assert failed["gen_ai.request.model"] == "alpha"
    assert "gen_ai.response.model" not in failed
    assert answered["gen_ai.response.model"] == "beta"
    assert answered["gen_ai.usage.output_tokens"] == result.usage.output_tokens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("kind", "api"), [("openai", "openai"), ("anthropic", "anthropic"), ("gemini", "gcp.gemini")]
)
async def test_the_response_model_is_the_one_the_provider_names(
    sim: Simulator, kind: str, api: str, stream: bool
) -> None:
    model = MODEL_OF[kind]
    sim.set_faults(ID_OF[model], Fault(answer_model=f"{ID_OF[model]}-20261201"))
    with capture_logs() as events:
        result = await run(settings(sim.url, ORDER[kind]), turn(stream=stream))
    assert result.effective_model == model
    (done,) = [e for e in events if e["event"] == "turn.completed"]
    assert done["gen_ai.request.model"] == ID_OF[model]
    assert done["gen_ai.response.model"] == f"{ID_OF[model]}-20261201"
    assert done["gen_ai.provider.name"] == api


async def test_logs_are_json_lines_without_prompts(sim: Simulator) -> None:
    out = io.StringIO()
    configure_logging(level="info", json=True, stream=out)
    secret_prompt = "the launch code is 31337"
    await run(settings(sim.url), turn(secret_prompt))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    # One info line per healthy turn; the answering attempt's own line is at debug.
    assert [e["event"] for e in events] == ["turn.completed"]
    assert all("timestamp" in e and e["level"] == "info" for e in events)
    assert secret_prompt not in out.getvalue()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_the_libraries_logs_join_the_one_stream_with_their_names(level: str) -> None:
    out = io.StringIO()
    configure_logging(level=level, json=True, stream=out, secrets=[KEY])
    structlog.get_logger("relevo.chain").info("turn.completed")
    celery = logging.getLogger("celery.worker.strategy")
    celery.info("Task received")
    celery.warning("Connection to broker lost, key %s", KEY)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    names = [(e["logger"], e["level"], e["event"]) for e in events]
    expected = [("relevo.chain", "info", "turn.completed")]
    if level == "debug":  # Celery's per-task info lines only when asked for
        expected.append(("celery.worker.strategy", "info", "Task received"))
    expected.append(
        ("celery.worker.strategy", "warning", "Connection to broker lost, key [redacted]")
    )
    assert names == expected
    assert all("timestamp" in e for e in events)
    configure_logging(level=level, json=True, stream=out)  # again: still one line each
    before = len(out.getvalue().splitlines())
    celery.warning("once")
    assert len(out.getvalue().splitlines()) == before + 1


# -- the sliding-window alert ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _alerts(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events if e["event"].startswith("fallback_rate.")]


def test_one_warning_per_crossing_and_one_recovery() -> None:
    watch = FallbackWatch(threshold=0.10, window_s=300, min_turns=10, clock=Clock())
    with capture_logs() as events:
        for _ in range(20):
            watch.record(fell_back=False)
        for _ in range(10):  # 10 of 30 is above 10 %: one warning, not ten
            watch.record(fell_back=True)
        for _ in range(100):  # 10 of 130 is under again: one recovery
            watch.record(fell_back=False)
    assert _alerts(events) == ["fallback_rate.above_threshold", "fallback_rate.recovered"]
    warning = next(e for e in events if e["event"] == "fallback_rate.above_threshold")
    assert warning["log_level"] == "warning"
    assert warning["threshold"] == 0.10
    assert warning["rate"] > 0.10


def test_a_second_crossing_warns_again() -> None:
    watch = FallbackWatch(threshold=0.5, window_s=60, min_turns=2, clock=Clock())
    with capture_logs() as events:
        for fell_back in (True, True, False, False, False, True, True, True, True):
            watch.record(fell_back)
    assert _alerts(events) == [
        "fallback_rate.above_threshold",
        "fallback_rate.recovered",
        "fallback_rate.above_threshold",
    ]


def test_too_few_turns_never_alert() -> None:
    watch = FallbackWatch(threshold=0.10, window_s=300, min_turns=20, clock=Clock())
    with capture_logs() as events:
        assert watch.record(fell_back=True) == 1.0
        assert watch.record(fell_back=False) == 0.5
    assert _alerts(events) == []


def test_old_turns_leave_the_window() -> None:
    clock = Clock()
    watch = FallbackWatch(threshold=0.10, window_s=300, min_turns=5, clock=clock)
    with capture_logs() as events:
        for _ in range(10):
            watch.record(fell_back=True)
        clock.now += 301
        assert watch.rate() == 0.0
        for _ in range(10):
            watch.record(fell_back=False)
    assert _alerts(events) == ["fallback_rate.above_threshold", "fallback_rate.recovered"]


# -- metrics in one process ----------------------------------------------------------------


def _sample(metrics: TurnMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_turn_metrics_count_turns_attempts_and_latency(sim: Simulator) -> None:
    metrics = TurnMetrics(watch=FallbackWatch(min_turns=1))
    config = settings(sim.url)
    metrics.record(await run(config, turn()))
    sim.set_faults("alpha", Fault(status=529))
    metrics.record(await run(config, turn()))

    turns = {"status": "ok", "effective_model": "anthropic/beta", "step": "1", "chain": "default"}
    assert _sample(metrics, TURNS_TOTAL, **turns) == 1
    assert _sample(metrics, TURNS_TOTAL, **{**turns, "effective_model": "openai/alpha"}) == 0
    assert (
        _sample(metrics, TURNS_TOTAL, **{**turns, "effective_model": "openai/alpha", "step": "0"})
        == 1
    )
    error = {"model": "openai/alpha", "provider": "oa", "outcome": "error"}
    assert _sample(metrics, ATTEMPTS_TOTAL, **error, error_class="overloaded") == 1
    assert _sample(metrics, "relevo_turn_duration_seconds_count", status="ok") == 2
    assert _sample(metrics, "relevo_attempt_duration_seconds_count", **error) == 1
    assert _sample(metrics, FALLBACK_RATIO) == 0.5


def test_a_turn_that_never_ran_counts_with_empty_labels() -> None:
    metrics = TurnMetrics()
    rejected = TurnResult(
        turn_id="t1", tenant_id="acme", status=Status.REJECTED, primary_model="openai/alpha"
    )
    metrics.record(rejected)
    assert (
        _sample(
            metrics, TURNS_TOTAL, status="rejected", effective_model="", step="", chain="default"
        )
        == 1
    )


def test_a_workers_series_carry_no_tenant_label() -> None:
    metrics = TurnMetrics()
    for tenant in ("acme", "globex"):
        metrics.waited(0.2)
        metrics.record(
            TurnResult(
                turn_id=f"t-{tenant}",
                tenant_id=tenant,
                status=Status.OK,
                latency_ms=5,
                primary_model="openai/alpha",
            )
        )
    labelled = {s.name for family in metrics.registry.collect() for s in family.samples if s.labels}
    assert labelled
    assert not [
        s.name
        for family in metrics.registry.collect()
        for s in family.samples
        if "tenant" in s.labels
    ]
    assert metrics.registry.get_sample_value("relevo_fair_queue_wait_seconds_count") == 2


def test_every_metric_name_is_a_series_we_export() -> None:
    assert all(name.startswith("relevo_") for name in METRIC_NAMES)
    assert is_exported("relevo_turn_duration_seconds_bucket")
    assert is_exported("relevo_turns_total")
    assert not is_exported("relevo_turns")
    for family in TurnMetrics().registry.collect():
        # prometheus-client names a counter's family without its `_total`.
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert name in METRIC_NAMES
        assert all(is_exported(s.name) for s in family.samples if not s.name.endswith("_created"))


# -- fleet state from Redis at scrape time ---------------------------------------------------


def _gauges(collector: FleetCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(collector.render().decode())
        for s in family.samples
    }


def test_fleet_collector_reads_breakers_budgets_and_kill_switch(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})

    async def arrange() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            store = breakers.FleetBreakers(client, namespace=namespace, scopes=["vendor:openai"])
            await breakers.Operators(store).force_open("vendor:openai", 60)
            ledger = budgets.Ledger(client, namespace=namespace)
            await ledger.set_limits("acme", daily_micros=1_000_000, monthly_micros=10_000_000)
            await ledger.reserve(
                "acme", "c1", provider="oa", micros=950_000, fallback=False, ttl_s=60
            )
            await ledger.settle("acme", "c1", 950_000, provider="oa")
            await ledger.reserve(
                "acme", "c2", provider="oa", micros=20_000, fallback=False, ttl_s=60
            )
            await breakers.KillSwitch(client, namespace=namespace).on("test", "drill")
        finally:
            await client.aclose()

    asyncio.run(arrange())
    collector = FleetCollector(config)
    assert collector.tenants.refresh() is not None
    gauges = _gauges(collector)
    assert gauges[("relevo_breaker_state", (("scope", "vendor:openai"),))] == 2
    assert gauges[("relevo_breaker_state", (("scope", "vendor:anthropic"),))] == 0
    day = (("period", "day"), ("tenant", "acme"))
    assert gauges[("relevo_tenant_spend_micros", day)] == 950_000
    assert gauges[("relevo_tenant_budget_held_micros", (("tenant", "acme"),))] == 20_000
    assert gauges[("relevo_tenant_budget_remaining_micros", day)] == 30_000
    assert gauges[("relevo_tenant_budget_used_ratio", day)] == pytest.approx(0.97)
    assert gauges[("relevo_tenant_reclaimed_charges", day)] == 0
    assert gauges[("relevo_kill_switch", ())] == 1


def test_fleet_collector_with_redis_down_says_which_parts_it_could_not_read(
    sim: Simulator,
) -> None:
    port = free_port()
    config = settings(sim.url, redis={"url": f"redis://127.0.0.1:{port}/0"})
    collector = FleetCollector(config, timeout_s=1)
    with capture_logs() as events:
        assert collector.tenants.refresh() is None
        gauges = _gauges(collector)
    parts = ("breakers", "kill_switch", "held_turns", "queue_depth", "tenants")
    assert {p: gauges[("relevo_exporter_read_ok", (("part", p),))] for p in parts} == dict.fromkeys(
        parts, 0
    )
    assert gauges[("relevo_tenant_snapshot_age_seconds", ())] >= 0
    assert ("relevo_kill_switch", ()) not in gauges
    unreadable = sorted(e.get("part", "tenants") for e in events if "unreadable" in e["event"])
    assert unreadable == sorted(parts)


def test_metrics_port_zero_serves_nothing(sim: Simulator) -> None:
    with serve_metrics(settings(sim.url), 0) as env:
        assert env == {}


def test_a_busy_metrics_port_is_logged_and_the_node_runs_without_it(sim: Simulator) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = settings(sim.url, observability={"metrics_addr": "127.0.0.1"})
        with capture_logs() as events, serve_metrics(config, port) as env:
            assert env == {}
    assert [e["event"] for e in events] == ["metrics.not_served"]


# -- through a real `relevo worker` ----------------------------------------------------------

SECTIONS = """
[retry]
retries_per_model = 0

[breakers]
consecutive_failures_threshold = 3
break_s = 60

[observability]
fallback_min_turns = 2
"""


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _request(tenant: str, i: int) -> TurnRequest:
    # A deadline a worker started on a busy machine still meets: these tests count, not time.
    return TurnRequest(
        tenant_id=tenant, messages=(Message(role="user", content=f"question {i}"),), deadline_s=30
    )


@pytest.mark.slow
def test_relevo_worker_serves_turn_metrics_and_the_fleet_state_adds_up(
    sim: Simulator, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    from worker.fleet.app import make_app
    from worker.fleet.enqueue import enqueue_turn

    path = tmp_path / "chain.toml"
    path.write_text(
        worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace, sections=SECTIONS)
    )
    config: Settings = load_settings(path)
    port = free_port()
    logs = tmp_path / "worker.log"
    with logs.open("wb") as err:
        node = subprocess.Popen(
            [
                *RELEVO,
                "worker",
                "--config",
                str(path),
                "--processes",
                "2",
                "--threads",
                "4",
                "--metrics-port",
                str(port),
            ],
            env={**os.environ, "RELEVO_TEST_KEY": KEY},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        app = make_app(config)
        healthy = [enqueue_turn(_request("obs", i), app=app) for i in range(6)]
        results = [h.get(timeout_s=30) for h in healthy]
        sim.set_faults("alpha", Fault(status=529))
        # One at a time: 3 overloaded answers open alpha's breakers, the 4th turn skips it.
        results += [enqueue_turn(_request("obs", i), app=app).get(timeout_s=30) for i in range(4)]
        # A turn's result is stored before its spend is settled: the gauge catches up.
        spent_by_results = sum(r.cost_micros for r in results)
        deadline = time.monotonic() + 10
        series = _scrape(port)
        node_series = dict(series)
        # The fleet's state is the exporter's, read from the same Redis; the spend gauge
        # may lag the results a moment.
        spent_key = (
            "relevo_tenant_spend_micros",
            frozenset({"tenant": "obs", "period": "day"}.items()),
        )
        collector = FleetCollector(config)
        while True:
            collector.tenants.refresh()
            fleet = {
                (s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(collector.render().decode())
                for s in family.samples
            }
            if fleet.get(spent_key) == spent_by_results or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        series |= fleet
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=30)

    assert [r.step for r in results] == [0] * 6 + [1] * 4
    # A node's series name no tenant, however many it serves: the exporter's do, bounded.
    assert not [name for name, labels in node_series if "tenant" in dict(labels)]
    waited = node_series[("relevo_fair_queue_wait_seconds_count", frozenset())]
    assert waited == len(results)

    def value(name: str, **labels: str) -> float:
        return series.get((name, frozenset(labels.items())), 0.0)

    ok = {"status": "ok"}
    assert value(TURNS_TOTAL, **ok, effective_model="openai/alpha", step="0", chain="default") == 6
    assert (
        value(TURNS_TOTAL, **ok, effective_model="anthropic/beta", step="1", chain="default") == 4
    )
    alpha = {"model": "openai/alpha", "provider": "oa"}
    assert value(ATTEMPTS_TOTAL, **alpha, outcome="ok", error_class="") == 6
    assert value(ATTEMPTS_TOTAL, **alpha, outcome="error", error_class="overloaded") == 3
    skipped = [
        v
        for (name, labels), v in series.items()
        if name == ATTEMPTS_TOTAL and ("outcome", "skipped") in labels
    ]
    assert sum(skipped) == 1
    assert value("relevo_turn_duration_seconds_count", status="ok") == 10
    assert value("relevo_attempt_duration_seconds_count", **alpha, outcome="error") == 3
    assert value("relevo_breaker_state", scope="model:openai/alpha@oa") == 2
    assert value("relevo_breaker_state", scope="vendor:anthropic") == 0
    spent = sum(r.cost_micros for r in results)
    assert spent > 0
    for period in ("day", "month"):
        assert value("relevo_tenant_spend_micros", tenant="obs", period=period) == spent
    daily = config.budgets.default_limits()
    assert daily is not None
    left = value("relevo_tenant_budget_remaining_micros", tenant="obs", period="day")
    assert left == daily.daily_micros - spent
    assert value("relevo_tenant_budget_used_ratio", tenant="obs", period="day") == pytest.approx(
        spent / daily.daily_micros
    )
    assert value("relevo_kill_switch") == 0
    rates = [v for (name, _), v in series.items() if name == FALLBACK_RATIO]
    assert rates
    assert all(0 <= r <= 1 for r in rates)
    assert max(rates) > 0.1
    # Each process that crossed 10 % said so once; none recovered.
    events = [json.loads(line) for line in logs.read_text().splitlines() if line.startswith("{")]
    crossings = [e for e in events if e.get("event") == "fallback_rate.above_threshold"]
    assert 1 <= len(crossings) <= 2
    assert not [e for e in events if e.get("event") == "fallback_rate.recovered"]
    assert KEY not in logs.read_text()


def _log_many(count: int) -> None:
    configure_logging(json=True, stream=sys.stderr)
    log = structlog.get_logger("relevo.test")
    for i in range(count):
        log.info("turn.completed", turn_id=f"t{i}", padding="x" * 200)


def test_processes_sharing_stderr_write_whole_json_lines() -> None:
    # A node's worker processes share one stderr pipe: each line must be one write.
    code = "from tests.test_observability import _log_many; _log_many(3000)"
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=write) for _ in range(3)]
    os.close(write)
    with os.fdopen(read) as merged:
        lines = merged.read().splitlines()
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    assert len(lines) == 9000
    assert all(json.loads(line)["event"] == "turn.completed" for line in lines)
