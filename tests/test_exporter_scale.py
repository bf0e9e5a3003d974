"""`relevo exporter` over 10,000 tenants: every scrape carries the fleet-wide series, the
tenants' series come from a bounded snapshot with its age, and a scrape stays small.
(Timings: bench/exporter_scale.py.)"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

import budgets
from tests.chainkit import KEY, settings
from tests.netkit import free_port
from tests.tenantskit import NEAR, add_tenants, forget_namespace
from worker.fleet.exporter import FLEET_PARTS, FleetCollector, serve_fleet_metrics
from worker.observability.metrics import (
    BREAKER_STATE,
    EXPORTER_READ_OK,
    HELD_TURNS,
    KILL_SWITCH,
    QUEUE_DEPTH,
    TENANT_BUDGET_USED_RATIO,
    TENANT_SERIES_LEFT_OUT,
    TENANT_SNAPSHOT_AGE_SECONDS,
    TENANT_SNAPSHOT_TENANTS,
    TENANT_SPEND_MICROS,
)
from worker.simulator import Simulator

TENANTS = 10_000
MOST = 500
FLEET_WIDE = (BREAKER_STATE, KILL_SWITCH, HELD_TURNS, QUEUE_DEPTH, EXPORTER_READ_OK)

Series = dict[str, list[tuple[dict[str, str], float]]]


def _scrape(port: int) -> tuple[Series, int]:
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    series: Series = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            series.setdefault(s.name, []).append((s.labels, s.value))
    return series, len(body.encode())


@pytest.fixture
def crowded(redis_url: str, namespace: str) -> Iterator[str]:
    """A namespace of 10,000 tenants with limits, forgotten afterwards."""
    try:
        asyncio.run(add_tenants(redis_url, namespace, TENANTS))
        yield namespace
    finally:
        asyncio.run(forget_namespace(redis_url, namespace))


@pytest.mark.slow
def test_every_scrape_over_10000_tenants_has_the_fleet_wide_series(
    sim: Simulator, redis_url: str, crowded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    config = settings(
        sim.url,
        redis={"url": redis_url, "namespace": crowded},
        worker={"queue": crowded},
        observability={"metrics_addr": "127.0.0.1", "exporter_max_tenants": MOST},
    )
    port = free_port()
    scrapes: list[tuple[Series, int]] = []
    with serve_fleet_metrics(config, port) as served:
        assert served
        deadline = time.monotonic() + 120
        while True:
            scrapes.append(_scrape(port))
            if TENANT_SNAPSHOT_TENANTS in scrapes[-1][0]:
                break
            assert time.monotonic() < deadline, "no tenant snapshot in 120 s"
            time.sleep(0.5)
    # Before the snapshot and after it, whatever the tenants: the fleet-wide series.
    for series, _ in scrapes:
        assert not [name for name in FLEET_WIDE if name not in series]
        assert series[KILL_SWITCH] == [({}, 0.0)]
        assert {labels["part"] for labels, _ in series[EXPORTER_READ_OK]} == set(FLEET_PARTS)
        assert TENANT_SNAPSHOT_AGE_SECONDS in series
    last, size = scrapes[-1]
    assert all(value == 1 for _, value in last[EXPORTER_READ_OK])
    assert last[TENANT_SNAPSHOT_TENANTS] == [({}, TENANTS)]
    assert last[TENANT_SNAPSHOT_AGE_SECONDS][0][1] < 60
    # Bounded: MOST tenants with series of their own; the rest counted.
    spenders = {labels["tenant"] for labels, _ in last[TENANT_SPEND_MICROS]}
    assert len(spenders) == MOST
    left_out = {labels["kind"]: value for labels, value in last[TENANT_SERIES_LEFT_OUT]}
    assert left_out == {"budget": TENANTS - MOST, "load": 0, "unreadable": 0}
    # The one tenant near its budget is among them: the alert can fire.
    near = [v for labels, v in last[TENANT_BUDGET_USED_RATIO] if labels["tenant"] == NEAR]
    assert near
    assert max(near) == pytest.approx(0.95)
    assert size < 2_000_000


def test_a_stalled_redis_costs_a_scrape_its_fleet_parts_never_the_snapshot(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis stops answering: the scrape ends after the parts' own bound, says
    which parts it could not read, and still serves the tenants' snapshot with its age."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    url, server = private_redis
    asyncio.run(add_tenants(url, "stall", 50))
    config = settings(sim.url, redis={"url": url, "namespace": "stall"}, worker={"queue": "q"})
    collector = FleetCollector(config)
    assert collector.tenants.refresh() is not None
    server.send_signal(signal.SIGSTOP)  # it accepts connections and answers nothing
    try:
        began = time.monotonic()
        body = collector.render().decode()
        took = time.monotonic() - began
    finally:
        server.send_signal(signal.SIGCONT)
    series = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert took < 5, f"the scrape waited {took:.1f} s for a stalled Redis"
    read = {p: series[(EXPORTER_READ_OK, (("part", p),))] for p in FLEET_PARTS}
    assert read == {**dict.fromkeys(FLEET_PARTS, 0), "tenants": 1}
    assert series[(TENANT_SNAPSHOT_TENANTS, ())] == 50
    assert (TENANT_SNAPSHOT_AGE_SECONDS, ()) in series
    near = series[(TENANT_BUDGET_USED_RATIO, (("period", "day"), ("tenant", NEAR)))]
    assert near == pytest.approx(0.95)


def test_a_member_of_the_tenants_set_that_is_no_tenant_is_counted_not_fatal(
    sim: Simulator, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names no tenant id may be (written by hand, or damaged) are counted unreadable;
    every real tenant still gets its series."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    try:
        asyncio.run(add_tenants(redis_url, namespace, 20))
        junk = ["a/../b", "has space", "x" * 200, "\u202e"]

        async def spoil() -> None:
            client = redis.asyncio.Redis.from_url(redis_url)
            try:
                await client.sadd(budgets.Ledger(client, namespace=namespace).keys.tenants(), *junk)
            finally:
                await client.aclose()

        asyncio.run(spoil())
        config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
        snapshot = FleetCollector(config).tenants.refresh()
    finally:
        asyncio.run(forget_namespace(redis_url, namespace))
    assert snapshot is not None
    assert (snapshot.tenants, snapshot.unreadable) == (20 + len(junk), len(junk))
    assert len(snapshot.budgets) == 20
    assert b'tenant="tenant-near"' in snapshot.text


def test_a_part_redis_refuses_costs_that_part_only(
    sim: Simulator, acl_redis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis user that may run no Lua (the breakers' report is a script): the scrape
    says so for that part and serves the kill switch, held turns and queue depth."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    url = f"redis://noscripts:secret@127.0.0.1:{acl_redis}/0"
    config = settings(sim.url, redis={"url": url, "namespace": "refused"}, worker={"queue": "q"})
    collector = FleetCollector(config)
    with capture_logs() as events:
        collector.tenants.refresh()
        body = collector.render().decode()
    names = {s.name: s for family in text_string_to_metric_families(body) for s in family.samples}
    read = {
        s.labels["part"]: s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == EXPORTER_READ_OK
    }
    assert read["breakers"] == 0
    assert (read["kill_switch"], read["held_turns"], read["queue_depth"]) == (1, 1, 1)
    assert names[KILL_SWITCH].value == 0
    refused = [e for e in events if e.get("part") == "breakers"]
    assert [e["error"] for e in refused] == ["StoreForbiddenError"]
