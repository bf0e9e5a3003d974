"""The fleet's metrics: each node's turn metrics, and the fleet's state from Redis, once.

`serve_metrics` runs in `relevo worker` (the parent): it gives the worker
processes a fresh `PROMETHEUS_MULTIPROC_DIR` and serves their merged metrics on
one port. `serve_fleet_metrics` runs in `relevo exporter`, one per fleet: at each
scrape it reads breakers, budgets, the kill switch, the held turns and the queue's
depth from Redis (`FleetCollector`). One reader, not every node: a fleet of 50
nodes scraped every 15 s would otherwise read each tenant's budget 200 times a
minute, and the rules would see 50 copies of one fact. Redis slow or down costs a
scrape its fleet gauges (logged), never a node's turn metrics.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from redis.asyncio import Redis

import breakers
import budgets
from worker.errors import STORE_DOWN
from worker.fleet.fairqueue import FairQueue, TenantLoad
from worker.fleet.operations import budget_reports
from worker.fleet.rabbitmq import queue_depth
from worker.guard.stores import breaker_store, budget_ledger
from worker.observability.metrics import (
    BREAKER_STATE,
    HELD_TURNS,
    KILL_SWITCH,
    QUEUE_DEPTH,
    TENANT_BUDGET_HELD_MICROS,
    TENANT_BUDGET_REMAINING_MICROS,
    TENANT_BUDGET_USED_RATIO,
    TENANT_IN_FLIGHT,
    TENANT_QUEUED,
    TENANT_RECLAIMED_CHARGES,
    TENANT_RECLAIMED_MICROS,
    TENANT_SPEND_MICROS,
)
from worker.settings import Settings

__all__ = ["BREAKER_LEVELS", "FleetCollector", "serve_fleet_metrics", "serve_metrics"]

log = structlog.get_logger("relevo.metrics")

BREAKER_LEVELS = {
    breakers.BreakerState.CLOSED: 0,
    breakers.BreakerState.HALF_OPEN: 1,
    breakers.BreakerState.OPEN: 2,
}
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_SCRAPE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class _Fleet:
    scopes: list[breakers.ScopeReport]
    kill_switch: bool
    budgets: list[budgets.BudgetReport]
    held: int
    queued: int | None
    loads: list[TenantLoad]


class FleetCollector:
    """Breaker states, tenant budgets, the kill switch, held turns, the queue's depth and
    the tenants' turns queued and in flight, read from Redis at each scrape."""

    def __init__(self, settings: Settings, *, timeout_s: float = _SCRAPE_TIMEOUT_S) -> None:
        self.settings = settings
        self.timeout_s = timeout_s

    def collect(self) -> Iterator[Metric]:
        # Called from the HTTP server's thread, where no event loop runs.
        try:
            fleet = asyncio.run(self._read())
        except STORE_DOWN as exc:
            log.warning("metrics.fleet_unreadable", error=type(exc).__name__)
            return
        breaker = GaugeMetricFamily(
            BREAKER_STATE, "Breaker state: 0 closed, 1 half-open, 2 open", labels=["scope"]
        )
        for scope in fleet.scopes:
            breaker.add_metric([scope.scope], BREAKER_LEVELS[scope.state])
        yield breaker
        yield GaugeMetricFamily(
            KILL_SWITCH, "1 while the kill switch is on", value=fleet.kill_switch
        )
        yield GaugeMetricFamily(
            HELD_TURNS, "Turns held while the kill switch was on, not yet replayed", fleet.held
        )
        queue = GaugeMetricFamily(
            QUEUE_DEPTH, "Turns waiting in the broker's queue", labels=["queue"]
        )
        if fleet.queued is not None:
            queue.add_metric([self.settings.worker.queue], fleet.queued)
            yield queue
        yield from _budget_families(fleet.budgets)
        queued = GaugeMetricFamily(
            TENANT_QUEUED, "Turns waiting in the fair queue", labels=["tenant"]
        )
        running = GaugeMetricFamily(
            TENANT_IN_FLIGHT, "Turns dispatched and not yet concluded (leases)", labels=["tenant"]
        )
        for load in fleet.loads:
            queued.add_metric([load.tenant], load.queued)
            running.add_metric([load.tenant], load.in_flight)
        yield from (queued, running)

    async def _read(self) -> _Fleet:
        where = self.settings.redis
        timeout_s = max(where.timeout_s, 1.0)
        client = where.connect_shared(timeout_s=timeout_s)
        # The broker's queue is at `url`, where the shared state may not be.
        broker = where.connect(timeout_s=timeout_s)
        try:
            async with asyncio.timeout(self.timeout_s):
                store = breaker_store(self.settings, client, know_scopes=True)
                report = await breakers.Operators(store).report()
                killed = await breakers.KillSwitch(client, namespace=where.namespace).status()
                reports = await budget_reports(budget_ledger(self.settings, client))
                held = await breakers.HeldTurns(client, namespace=where.namespace).count()
                queued = await _queue_depth(self.settings, broker)
                loads = await FairQueue(broker, namespace=where.namespace).load()
        finally:
            await client.aclose()
            await broker.aclose()
        return _Fleet(report.scopes, killed is not None, reports, held, queued, loads)


async def _queue_depth(settings: Settings, broker: Redis) -> int | None:
    """Turns waiting in the broker's queue: the Redis list's length, or RabbitMQ's count
    (None: RabbitMQ did not answer, and the gauge is left out)."""
    queue = settings.worker.queue
    if settings.broker.url is None:
        return int(await broker.llen(queue))
    return await queue_depth(settings.broker.url, queue)


def _budget_families(reports: list[budgets.BudgetReport]) -> Iterator[Metric]:
    labels = ["tenant", "period"]
    spend = GaugeMetricFamily(
        TENANT_SPEND_MICROS, "Spent this UTC day or month, micro-dollars", labels=labels
    )
    remaining = GaugeMetricFamily(
        TENANT_BUDGET_REMAINING_MICROS,
        "Budget left this UTC day or month (after holds), micro-dollars",
        labels=labels,
    )
    used = GaugeMetricFamily(
        TENANT_BUDGET_USED_RATIO,
        "Share of the period's budget spent or held (0 to 1+); absent for a zero budget",
        labels=labels,
    )
    held = GaugeMetricFamily(
        TENANT_BUDGET_HELD_MICROS,
        "Expected cost of the tenant's attempts in flight, micro-dollars",
        labels=["tenant"],
    )
    reclaimed = GaugeMetricFamily(
        TENANT_RECLAIMED_CHARGES,
        "Holds of attempts that never reported back, charged this UTC day or month",
        labels=labels,
    )
    reclaimed_micros = GaugeMetricFamily(
        TENANT_RECLAIMED_MICROS,
        "What those reclaimed holds were charged, micro-dollars (part of the spend)",
        labels=labels,
    )
    for report in reports:
        held.add_metric([report.tenant], report.reserved_micros)
        for period, numbers in (("day", report.day), ("month", report.month)):
            key = [report.tenant, period]
            spend.add_metric(key, numbers.spent_micros)
            remaining.add_metric(key, numbers.remaining_micros)
            reclaimed.add_metric(key, numbers.reclaimed_charges)
            reclaimed_micros.add_metric(key, numbers.reclaimed_micros)
            if numbers.limit_micros > 0:
                taken = numbers.spent_micros + numbers.reserved_micros
                used.add_metric(key, taken / numbers.limit_micros)
    yield from (spend, remaining, used, held, reclaimed, reclaimed_micros)


@contextmanager
def serve_metrics(settings: Settings, port: int) -> Iterator[dict[str, str]]:
    """Serve the node's metrics on `port` while the block runs.

    Yields the environment the worker processes need (the multiprocess directory).
    With `port` 0, or a port that cannot be bound, nothing is served and the
    environment is empty: a node without its metrics endpoint still runs turns
    (and Prometheus sees the target down).
    """
    if port == 0:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="relevo-metrics-") as path:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        with _served(settings, port, registry) as served:
            yield {MULTIPROC_ENV: path} if served else {}


@contextmanager
def serve_fleet_metrics(settings: Settings, port: int) -> Iterator[bool]:
    """Serve the fleet's state from Redis (`FleetCollector`) on `port` while the block
    runs; yields whether the port could be bound."""
    registry = CollectorRegistry()
    registry.register(FleetCollector(settings))
    with _served(settings, port, registry) as served:
        yield served


@contextmanager
def _served(settings: Settings, port: int, registry: CollectorRegistry) -> Iterator[bool]:
    addr = settings.observability.metrics_addr
    try:
        server, thread = start_http_server(port, addr, registry)
    except OSError as exc:
        log.error("metrics.not_served", addr=addr, port=port, error=exc.strerror or str(exc))
        yield False
        return
    try:
        yield True
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
