"""`relevo demo`: the whole fleet on one machine, with no Redis server and no API keys."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
from rich.console import Console

from tests.netkit import free_port
from worker.demo.plan import (
    EXAMPLE_REDIS_URL,
    EXAMPLE_SIM_URL,
    PHASES,
    THRIFTY_DAILY_MICROS,
    THRIFTY_TENANT,
    demo_settings,
    render_config,
)
from worker.demo.run import open_log_file
from worker.demo.tables import summary_view
from worker.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
PRIMARY_SCOPE = "model:anthropic/claude-sim@anthropic_sim"
RUN_TIMEOUT_S = 120


def _clean_env() -> dict[str, str]:
    """The environment of a fresh machine: no relevo settings, no keys, no Redis URL."""
    drop = ("RELEVO_", "REDIS", "CELERY", "OPENAI", "ANTHROPIC", "GEMINI", "GOOGLE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT)
    env["COLUMNS"] = "200"
    return env


def _demo(*args: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `relevo demo` in `cwd`, its log file there too (not in the machine's /tmp)."""
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", "demo", *args],
        cwd=cwd,
        env=dict(env) | {"TMPDIR": str(cwd)},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], float]:
    """One embedded run (JSON summary), from a directory without examples/, and its wall time."""
    started = time.monotonic()
    proc = _demo("--json", cwd=tmp_path_factory.mktemp("demo"), env=_clean_env())
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary, elapsed


def _phase(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return next(p for p in summary["phases"] if p["key"] == key)


@pytest.mark.slow
def test_embedded_demo_completes_every_turn_within_a_minute(
    embedded: tuple[dict[str, Any], float],
) -> None:
    summary, elapsed = embedded
    total = summary["total"]
    assert summary["mode"] == "embedded"
    assert elapsed < 60
    assert total["turns"] >= 200
    assert total["lost"] == 0
    assert summary["errors"] == []
    assert total["status"]["ok"] > total["turns"] // 2
    assert set(total["status"]) <= {"ok", "degraded"}
    assert [p["key"] for p in summary["phases"]] == [p.key for p in PHASES]


@pytest.mark.slow
def test_healthy_phase_is_answered_by_the_primary(embedded: tuple[dict[str, Any], float]) -> None:
    healthy = _phase(embedded[0], "healthy")
    assert healthy["steps"] == {"0": healthy["status"]["ok"]}
    assert healthy["fallback_rate"] == 0
    assert healthy["calls"]["gpt-sim"]["calls"] == 0


@pytest.mark.slow
def test_outage_opens_the_breaker_and_moves_turns_to_the_backup(
    embedded: tuple[dict[str, Any], float],
) -> None:
    summary = embedded[0]
    outage = _phase(summary, "outage")
    answered = outage["status"]["ok"]
    assert answered > 0
    # Every answered turn came from a backup (degraded turns have no step).
    assert "0" not in outage["steps"]
    assert sum(outage["steps"].values()) == answered
    # The breaker, not the chain, keeps the primary from being called on every turn.
    primary_calls = outage["calls"]["claude-sim"]
    assert primary_calls["calls"] == primary_calls["error"]
    assert 0 < primary_calls["calls"] <= outage["turns"] // 4
    assert (
        outage["skips"].get("vendor_breaker_open", 0) + outage["skips"].get("breaker_open", 0)
        >= outage["turns"] // 2
    )
    opened = [c for c in summary["breaker_changes"] if c["scope"] == PRIMARY_SCOPE]
    assert opened
    assert (opened[0]["old"], opened[0]["new"]) == ("closed", "open")


@pytest.mark.slow
def test_primary_breaker_closes_again_after_the_outage(
    embedded: tuple[dict[str, Any], float],
) -> None:
    summary = embedded[0]
    recovery = _phase(summary, "recovery")
    assert recovery["steps"].get("0", 0) > 0
    assert recovery["calls"]["claude-sim"]["error"] == 0
    changes = [c for c in summary["breaker_changes"] if c["scope"] == PRIMARY_SCOPE]
    assert changes[-1]["new"] == "closed"


@pytest.mark.slow
def test_rate_limit_burst_waits_or_cools_down_and_reaches_the_last_model(
    embedded: tuple[dict[str, Any], float],
) -> None:
    burst = _phase(embedded[0], "rate_limit")
    assert burst["calls"]["claude-sim"]["error"] > 0
    assert burst["retries"] > 0  # a Retry-After within the cap: the turn waited
    assert burst["skips"].get("cooldown", 0) > 0  # other turns skipped the cooling pair
    assert burst["calls"]["gpt-sim"]["error"] == 1
    assert burst["steps"].get("2", 0) >= 1  # over the cap: straight to gemini-sim
    assert burst["calls"]["gemini-sim"]["calls"] >= 1


@pytest.mark.slow
def test_only_the_tenant_with_a_tiny_budget_degrades(
    embedded: tuple[dict[str, Any], float],
) -> None:
    summary = embedded[0]
    reasons = set(summary["total"]["degraded"])
    # On a loaded machine a turn can reach its deadline while attempts in flight still hold the
    # last of the budget: that is the same refusal, told apart only by whether the money is
    # spent yet.
    assert "tenant_budget_exhausted" in reasons
    assert reasons <= {"tenant_budget_exhausted", "tenant_budget_held"}
    tenants = summary["tenants"]
    thrifty = tenants[THRIFTY_TENANT]
    assert thrifty["status"].get("ok", 0) > 0  # it had some budget at first
    assert thrifty["status"]["degraded"] == summary["total"]["status"]["degraded"]
    assert thrifty["daily_limit_micros"] == THRIFTY_DAILY_MICROS
    assert 0 < thrifty["spent_micros"] <= THRIFTY_DAILY_MICROS
    for name, tenant in tenants.items():
        if name != THRIFTY_TENANT:
            assert tenant["status"] == {"ok": tenant["turns"]}


@pytest.mark.slow
def test_the_turn_with_an_image_is_answered_by_a_model_that_takes_images(
    embedded: tuple[dict[str, Any], float],
) -> None:
    image = embedded[0]["image_turn"]
    assert image is not None
    assert image["status"] == "ok"
    assert image["effective_model"] in {f"{v}/{m}" for v, m in _SLUGS}
    assert image["attempts"][-1] == f"{image['effective_model']}: ok"
    console = Console(record=True, width=80)
    console.print(*summary_view(embedded[0]))
    assert "The turn with an image" in console.export_text()


_SLUGS = (("anthropic", "claude-sim"), ("openai", "gpt-sim"), ("google", "gemini-sim"))


@pytest.mark.slow
def test_summary_tables_show_phases_calls_and_reasons(
    embedded: tuple[dict[str, Any], float],
) -> None:
    console = Console(record=True, width=220)
    console.print(*summary_view(embedded[0]))
    text = console.export_text()
    for expected in (
        "what each phase got",
        "claude-sim calls",
        "gemini-sim calls",
        "tenant_budget_exhausted",
        "breaker_open",
        "per effective model",
        "breaker changes seen",
        PRIMARY_SCOPE,
    ):
        assert expected in text


def test_every_run_logs_to_a_new_file_and_leaves_older_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    older = tmp_path / "relevo-demo.log"  # where every run used to log
    older.write_text("an earlier run\n", encoding="utf-8")
    paths = []
    for _ in range(3):  # one process, the same second: the name alone would repeat
        path, stream = open_log_file()
        with stream:
            stream.write("this run\n")
        paths.append(path)
    assert len(set(paths)) == 3
    assert all(p.parent == tmp_path and p.name.startswith("relevo-demo-") for p in paths)
    assert all(p.read_text(encoding="utf-8") == "this run\n" for p in paths)
    assert older.read_text(encoding="utf-8") == "an earlier run\n"


def test_example_config_is_the_embedded_config_on_fixed_ports() -> None:
    example = load_settings(ROOT / "examples" / "demo.toml")
    assert example == demo_settings(EXAMPLE_SIM_URL, EXAMPLE_REDIS_URL)
    assert {p.base_url.removesuffix("/v1") for p in example.providers.values()} == {EXAMPLE_SIM_URL}
    assert example.redis.namespace == "relevo-demo"


def test_demo_with_unreachable_redis_says_so_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "demo.toml"
    dead = f"redis://127.0.0.1:{free_port()}/0"
    sim = f"http://127.0.0.1:{free_port()}"
    config.write_text(render_config(sim_url=sim, redis_url=dead), encoding="utf-8")
    proc = _demo("--redis", dead, "--config", str(config), cwd=tmp_path, env=_clean_env())
    assert proc.returncode == 2
    assert f"cannot reach Redis at {dead}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"relevo demo: logs: {tmp_path}/relevo-demo-" in proc.stderr


@pytest.fixture
def worker_for(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A demo configuration on its own namespace and queue, and a `relevo worker` running it."""
    text = render_config(sim_url=f"http://127.0.0.1:{free_port()}", redis_url=redis_url)
    config = tmp_path / "demo.toml"
    config.write_text(text.replace('"relevo-demo"', f'"{namespace}"'), encoding="utf-8")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "worker",
            "--config",
            str(config),
            "--metrics-port",
            "0",
        ],
        cwd=tmp_path,
        env=_clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield config
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        client = redis.Redis.from_url(redis_url)
        for pattern in (f"{{{namespace}}}:*", f"{namespace}:*"):
            for key in client.scan_iter(match=pattern, count=500):
                client.delete(key)
        client.close()


@pytest.mark.slow
def test_demo_against_real_redis_uses_a_separate_worker(
    worker_for: Path, redis_url: str, tmp_path: Path
) -> None:
    proc = _demo(
        "--redis", redis_url, "--config", str(worker_for), "--json", cwd=tmp_path, env=_clean_env()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["mode"] == "redis"
    assert summary["total"]["lost"] == 0
    outage = _phase(summary, "outage")
    assert outage["calls"]["claude-sim"]["calls"] <= outage["turns"] // 4
    assert summary["total"]["degraded"].get("tenant_budget_exhausted", 0) > 0
