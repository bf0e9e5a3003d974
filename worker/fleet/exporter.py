"""The fleet's metrics: each node's turn metrics, and the fleet's state from Redis, once.

`serve_metrics` runs in `relevo worker` (the parent): it gives the worker
processes a fresh `PROMETHEUS_MULTIPROC_DIR` and serves their merged metrics on
one port. `serve_fleet_metrics` runs in `relevo exporter`, one per fleet
(`FleetCollector`). One reader, not every node: a fleet of 50 nodes scraped every 15 s
would otherwise read each tenant's budget 200 times a minute, and the rules would see
50 copies of one fact.

At each scrape the exporter reads the fleet-wide facts (breakers, the kill switch, the
held turns, the queue's depth), each part on its own with `_PART_TIMEOUT_S`: a slow or
refused part costs that part's series (and `relevo_exporter_read_ok{part}` says 0),
never another's. The tenants' series come from a snapshot read in the background
(`worker.fleet.tenant_snapshot`), served with its age: a scrape never waits on them.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from redis.asyncio import Redis

import breakers
from rediskit import FAILED
from worker.fleet.liveness import ALIVE_VARIABLE, Liveness
from worker.fleet.rabbitmq import queue_depth
from worker.fleet.tenant_snapshot import TenantSnapshots
from worker.guard.stores import breaker_store
from worker.observability.metrics import (
    BREAKER_STATE,
    EXPORTER_READ_OK,
    HELD_TURNS,
    KILL_SWITCH,
    QUEUE_DEPTH,
    TENANT_SNAPSHOT_AGE_SECONDS,
)
from worker.observability.metrics_http import load_token, serve_body
from worker.settings import Settings

__all__ = [
    "BREAKER_LEVELS",
    "FLEET_PARTS",
    "FleetCollector",
    "serve_fleet_metrics",
    "serve_metrics",
]

log = structlog.get_logger("relevo.metrics")
T = TypeVar("T")

BREAKER_LEVELS = {
    breakers.BreakerState.CLOSED: 0,
    breakers.BreakerState.HALF_OPEN: 1,
    breakers.BreakerState.OPEN: 2,
}
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Each fleet-wide part's own bound: the whole scrape stays under a second.
_PART_TIMEOUT_S = 0.8
# What `relevo_exporter_read_ok{part}` names: the scrape's own reads, and the snapshot's.
FLEET_PARTS = ("breakers", "kill_switch", "held_turns", "queue_depth", "tenants")


class FleetCollector:
    """Breaker states, the kill switch, held turns and the queue's depth, read from Redis
    at each scrape (each part bounded on its own); the tenants' budgets and fair-queue
    load from `tenants`' latest snapshot, with its age."""

    def __init__(
        self,
        settings: Settings,
        tenants: TenantSnapshots | None = None,
        *,
        timeout_s: float = _PART_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        self.tenants = tenants if tenants is not None else TenantSnapshots(settings)
        self.timeout_s = timeout_s

    def collect(self) -> Iterator[Metric]:
        # Called from the HTTP server's thread, where no event loop runs.
        scopes, killed, held, queued = asyncio.run(self._read())
        read_ok = GaugeMetricFamily(
            EXPORTER_READ_OK,
            "1 if this part of the fleet's state was read for this scrape (tenants: by the "
            "latest snapshot round), else 0",
            labels=["part"],
        )
        got = (scopes, killed, held, queued)
        for part, value in zip(FLEET_PARTS, got, strict=False):
            read_ok.add_metric([part], int(value is not None))
        read_ok.add_metric(["tenants"], int(not self.tenants.last_failed))
        yield read_ok
        if scopes is not None:
            breaker = GaugeMetricFamily(
                BREAKER_STATE, "Breaker state: 0 closed, 1 half-open, 2 open", labels=["scope"]
            )
            for scope in scopes:
                breaker.add_metric([scope.scope], BREAKER_LEVELS[scope.state])
            yield breaker
        if killed is not None:
            yield GaugeMetricFamily(KILL_SWITCH, "1 while the kill switch is on", value=killed)
        if held is not None:
            yield GaugeMetricFamily(
                HELD_TURNS, "Turns held while the kill switch was on, not yet replayed", held
            )
        if queued is not None:
            queue = GaugeMetricFamily(
                QUEUE_DEPTH, "Turns waiting in the broker's queue", labels=["queue"]
            )
            queue.add_metric([self.settings.worker.queue], queued)
            yield queue
        yield GaugeMetricFamily(
            TENANT_SNAPSHOT_AGE_SECONDS,
            "Seconds since the tenants' series were read (since the exporter started, "
            "before the first reading)",
            value=self.tenants.age_s(),
        )

    def render(self) -> bytes:
        """A scrape's body: the fleet-wide series read now, then the tenants' snapshot as
        it was rendered when read (a scrape formats none of its series)."""
        registry = CollectorRegistry()
        registry.register(self)
        return generate_latest(registry) + self.tenants.rendered()

    async def _read(
        self,
    ) -> tuple[list[breakers.ScopeReport] | None, bool | None, int | None, int | None]:
        where = self.settings.redis
        timeout_s = max(where.timeout_s, 1.0)
        client = where.connect_shared(timeout_s=timeout_s)
        # The broker's queue is at `url`, where the shared state may not be.
        broker = where.connect(timeout_s=timeout_s)
        try:
            return await asyncio.gather(
                self._part("breakers", self._scopes(client)),
                self._part("kill_switch", self._killed(client)),
                self._part(
                    "held_turns", breakers.HeldTurns(client, namespace=where.namespace).count()
                ),
                self._part("queue_depth", _queue_depth(self.settings, broker, self.timeout_s)),
            )
        finally:
            await client.aclose()
            await broker.aclose()

    async def _part(self, part: str, read: Awaitable[T]) -> T | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await read
        except FAILED as exc:  # slow, gone or refusing us
            log.warning("metrics.fleet_unreadable", part=part, error=type(exc).__name__)
            return None
        except Exception as exc:  # a damaged record in one part must not hide the others
            log.error("metrics.fleet_part_failed", part=part, error=type(exc).__name__)
            return None

    async def _scopes(self, client: Redis) -> list[breakers.ScopeReport]:
        store = breaker_store(self.settings, client, know_scopes=True)
        return (await breakers.Operators(store).report()).scopes

    async def _killed(self, client: Redis) -> bool:
        state = await breakers.KillSwitch(client, namespace=self.settings.redis.namespace).status()
        return state is not None


async def _queue_depth(settings: Settings, broker: Redis, timeout_s: float) -> int | None:
    """Turns waiting in the broker's queue: the Redis list's length, or RabbitMQ's count
    (None: RabbitMQ did not answer, and the gauge is left out)."""
    queue = settings.worker.queue
    if settings.broker.url is None:
        return int(await broker.llen(queue))
    return await queue_depth(settings.broker.url, queue, timeout_s=timeout_s)


@contextmanager
def serve_metrics(settings: Settings, port: int, processes: int = 1) -> Iterator[dict[str, str]]:
    """Serve the node's metrics on `port` while the block runs, and its `processes`
    worker processes' liveness on `/healthz` (`worker.fleet.liveness`).

    Yields the environment the worker processes need (the multiprocess directory, which
    also holds their liveness files).
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
        stale_s = settings.observability.liveness_stale_s
        alive = Liveness(Path(path), processes, stale_s)
        scrape = lambda: generate_latest(registry)  # noqa: E731
        with _served(settings, port, scrape, alive.verdict) as served:
            yield {MULTIPROC_ENV: path, ALIVE_VARIABLE: path} if served else {}


@contextmanager
def serve_fleet_metrics(settings: Settings, port: int) -> Iterator[bool]:
    """Serve the fleet's state from Redis (`FleetCollector`) on `port` while the block
    runs, the tenants' snapshot refreshed in the background; yields whether the port
    could be bound."""
    tenants = TenantSnapshots(settings)
    with _served(settings, port, FleetCollector(settings, tenants).render) as served:
        if served:
            tenants.start()
        try:
            yield served
        finally:
            tenants.close()


@contextmanager
def _served(
    settings: Settings,
    port: int,
    body: Callable[[], bytes],
    health: Callable[[], tuple[bool, str]] = lambda: (True, "ok"),
) -> Iterator[bool]:
    addr = settings.observability.metrics_addr
    token = load_token(settings.observability.metrics_token_file)
    try:
        server = serve_body(addr, port, body, token, health)
    except OSError as exc:
        log.error("metrics.not_served", addr=addr, port=port, error=exc.strerror or str(exc))
        yield False
        return
    log.info("metrics.served", addr=addr, port=port, token=token is not None)
    try:
        yield True
    finally:
        server.close()
