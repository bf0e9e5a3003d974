"""Who reaches the metrics: loopback unless configured, a bearer token when set (never
logged), and the exporter reading Redis as the read-only viewer (deploy/)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio
import yaml
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

import breakers
import budgets
from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
from budgets.scripts import SCRIPTS as BUDGET_SCRIPTS
from tests.chainkit import KEY, settings, worker_config
from tests.conftest import skip_unless_ci
from tests.netkit import free_port
from tests.test_deploy import DEPLOY, PASSWORDS, password_env, started_redis, wait_answering
from worker.errors import ConfigError
from worker.fleet.exporter import FLEET_PARTS, FleetCollector, serve_metrics
from worker.observability.metrics_http import TOKEN_ENV, load_token
from worker.settings import ObservabilitySettings
from worker.simulator import Simulator

RELEVO = [sys.executable, "-m", "worker.cli"]


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)


def _outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # a documentation address: never reached
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def _reaches(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_metrics_listen_on_loopback_unless_configured(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert ObservabilitySettings().metrics_addr == "127.0.0.1"
    outward = _outward_address()
    port = free_port()
    with serve_metrics(settings(sim.url), port) as env:
        assert env
        assert _reaches("127.0.0.1", port)
        if outward is not None:
            assert not _reaches(outward, port), f"the metrics answer on {outward}"
    if outward is None:
        skip_unless_ci("no address but loopback here to try the default against")


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    value = secrets.token_urlsafe(32)
    monkeypatch.setenv(TOKEN_ENV, value)
    return value


def test_a_metrics_token_is_asked_of_every_scrape_and_never_logged(
    sim: Simulator, token: str
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with capture_logs() as events, serve_metrics(settings(sim.url), port):
        refused = [
            httpx.get(f"{url}/metrics", headers=headers, timeout=5)
            for headers in (
                {},
                {"Authorization": f"Bearer {token[:-1]}"},
                {"Authorization": f"Basic {token}"},
                {"Authorization": token},
            )
        ]
        granted = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
        health = httpx.get(f"{url}/healthz", timeout=5)
    assert [r.status_code for r in refused] == [401] * 4
    assert all(r.headers["www-authenticate"].startswith("Bearer") for r in refused)
    assert not [r for r in refused if "relevo_" in r.text or token in r.text]
    assert granted.status_code == 200
    assert granted.headers["content-type"].startswith("text/plain")
    assert health.status_code == 200
    assert health.text.startswith("ok")  # the node has just started: its processes may beat
    assert token not in repr(events)


@pytest.mark.parametrize("bad", ["short", "has a blank inside it 0123456789", "x" * 300])
def test_a_token_of_the_wrong_shape_is_refused_without_echoing_it(
    bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, bad)
    with pytest.raises(ConfigError) as from_env:
        load_token(None)
    secret = tmp_path / "token"
    secret.write_text(bad + "\n")
    with pytest.raises(ConfigError) as from_file:
        load_token(secret)
    for error in (from_env.value, from_file.value):
        assert bad not in str(error)
    assert TOKEN_ENV in str(from_env.value)
    assert str(secret) in str(from_file.value)


def test_relevo_exporter_asks_its_token_file_and_never_prints_it(
    sim: Simulator, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    secret = secrets.token_urlsafe(32)
    token_file = tmp_path / "metrics-token"
    token_file.write_text(secret + "\n")
    sections = f'[observability]\nmetrics_token_file = "{token_file}"\n'
    path = tmp_path / "chain.toml"
    path.write_text(
        worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace, sections=sections)
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    log = tmp_path / "exporter.log"
    with log.open("wb") as err:
        exporter = subprocess.Popen(
            [*RELEVO, "exporter", "--config", str(path), "--port", str(port)],
            env={**env, "RELEVO_TEST_KEY": KEY},
            stdout=err,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        until = time.monotonic() + 20
        while not _reaches("127.0.0.1", port):
            assert exporter.poll() is None, log.read_text()
            assert time.monotonic() < until, "the exporter never answered"
            time.sleep(0.2)
        without = httpx.get(f"{url}/metrics", timeout=10)
        granted = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {secret}"})
    finally:
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(timeout=20) == 0
    assert without.status_code == 401
    assert granted.status_code == 200
    assert "relevo_kill_switch 0.0" in granted.text
    assert secret not in log.read_text()


# -- the exporter as the deploy runs it: the viewer's ACL user ----------------------------


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private redis-server as the deploy starts it (start.sh, the rendered ACL file)."""
    folder = tmp_path_factory.mktemp("acl")
    acl = folder / "users.acl"
    proc, port = started_redis(folder, "--aclfile", str(acl), env=password_env(acl))
    urls = {user: f"redis://{user}:{pw}@127.0.0.1:{port}/0" for user, pw in PASSWORDS.items()}
    try:
        wait_answering(proc, urls["operator"])
        yield urls
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_exporter_reads_every_part_as_the_viewer(
    sim: Simulator, acl_server: dict[str, str]
) -> None:
    """As the deploy runs it: every fleet-wide part and the tenants' snapshot are read
    with the viewer's credentials (the workers load the scripts; the viewer runs two)."""

    async def arrange() -> None:
        worker = redis.asyncio.Redis.from_url(acl_server["relevo"])
        try:
            await BREAKER_SCRIPTS.load(worker)
            await BUDGET_SCRIPTS.load(worker)
            await budgets.Ledger(worker).set_limits("acme", 1_000_000, 10_000_000)
            await breakers.KillSwitch(worker).on("ops", "drill")
            await breakers.HeldTurns(worker).hold("t1", "{}")
            await worker.lpush("relevo", "waiting")
        finally:
            await worker.aclose()

    async def tidy() -> None:
        worker = redis.asyncio.Redis.from_url(acl_server["relevo"])
        try:
            keys = [k async for k in worker.scan_iter(match="{relevo*")]
            await worker.delete("relevo", *keys)
        finally:
            await worker.aclose()

    asyncio.run(arrange())
    try:
        config = settings(
            sim.url, redis={"url": acl_server["viewer"], "namespace": "relevo"}, worker={}
        )
        collector = FleetCollector(config)
        with capture_logs() as events:
            assert collector.tenants.refresh() is not None
            body = collector.render().decode()
    finally:
        asyncio.run(tidy())
    series: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    read = {p: series[("relevo_exporter_read_ok", frozenset({("part", p)}))] for p in FLEET_PARTS}
    assert read == dict.fromkeys(FLEET_PARTS, 1), [e for e in events if "unreadable" in e["event"]]
    assert series[("relevo_kill_switch", frozenset())] == 1
    assert series[("relevo_held_turns", frozenset())] == 1
    assert series[("relevo_queue_depth", frozenset({("queue", "relevo")}))] == 1
    assert ("relevo_tenant_spend_micros", frozenset({("tenant", "acme"), ("period", "day")})) in (
        series
    )


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"])


def test_the_deploy_runs_the_exporter_as_the_viewer_and_sets_the_metrics_address() -> None:
    services = _compose()
    exporter_url = services["exporter"]["environment"]["RELEVO_REDIS__URL"]
    assert exporter_url.startswith("redis://viewer:${REDIS_VIEWER_PASSWORD")
    assert "REDIS_VIEWER_PASSWORD" in services["redis"]["environment"]
    sentinel = yaml.safe_load((DEPLOY / "docker-compose.sentinel.yml").read_text())
    assert "REDIS_VIEWER_PASSWORD" in sentinel["x-data-node"]["environment"]
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes/exporter.yaml").read_text()))
    (container,) = docs[0]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["RELEVO_REDIS__URL"]["value"].startswith("redis://viewer:$(REDIS_VIEWER_PASSWORD)")
    assert env["REDIS_VIEWER_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "viewer-password"
    redis_docs = yaml.safe_load_all((DEPLOY / "kubernetes/redis.yaml").read_text())
    redis_env = [
        e["name"]
        for doc in redis_docs
        if doc and doc.get("kind") == "StatefulSet"
        for c in doc["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    ]
    assert "REDIS_VIEWER_PASSWORD" in redis_env
    # The default is loopback: the deploy's Prometheus is in another container.
    chain = tomllib.loads((DEPLOY / "chain.toml").read_text())
    assert chain["observability"]["metrics_addr"] == "0.0.0.0"
