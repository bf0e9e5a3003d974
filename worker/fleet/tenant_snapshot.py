"""The tenants' series of `relevo exporter`: a snapshot read in the background, a page at a time.

Reading 10,000 tenants' budgets takes seconds, longer than a scrape may: so a thread of
the exporter reads them every `exporter_snapshot_every_s`, `_PAGE` tenants per round
trip (SSCAN of the tenants set, then one pipeline of their report scripts), and a scrape
only serves the last snapshot, with its age. A tenant whose report fails is counted and
left out; a page or a round that fails keeps the previous snapshot (logged).

Only the `exporter_max_tenants` tenants nearest their budget (then the biggest spenders)
get budget series, and only as many with the most turns queued or running get fair-queue
series: what a scrape carries is bounded whatever the number of tenants, and the ones
left out are counted (`relevo_tenant_series_left_out`).
"""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

import budgets
from rediskit import FAILED
from worker.fleet.fairqueue import FairQueue, TenantLoad
from worker.guard.stores import budget_ledger
from worker.observability.metrics import (
    TENANT_BUDGET_HELD_MICROS,
    TENANT_BUDGET_REMAINING_MICROS,
    TENANT_BUDGET_USED_RATIO,
    TENANT_IN_FLIGHT,
    TENANT_QUEUED,
    TENANT_RECLAIMED_CHARGES,
    TENANT_RECLAIMED_MICROS,
    TENANT_SERIES_LEFT_OUT,
    TENANT_SNAPSHOT_DURATION_SECONDS,
    TENANT_SNAPSHOT_TENANTS,
    TENANT_SPEND_MICROS,
)
from worker.settings import Settings

__all__ = ["TenantSnapshot", "TenantSnapshots", "budget_rank", "render"]

log = structlog.get_logger("relevo.metrics")
T = TypeVar("T")

# Tenants per round trip: each page is one SSCAN and one pipeline of that many scripts,
# short enough that the workers' own commands slip in between.
_PAGE = 200
_PAGE_TIMEOUT_S = 10.0
# And a pause after each: the scrapes this process serves meanwhile get the interpreter.
_PAGE_PAUSE_S = 0.02


@dataclass(frozen=True, slots=True)
class TenantSnapshot:
    """One reading of every tenant: the ones given series, and counts of the rest."""

    taken_at: float  # time.monotonic() when the reading ended
    duration_s: float
    tenants: int  # tenants in the budgets' set, read this time
    unreadable: int  # of them, those whose report failed
    budgets: list[budgets.BudgetReport]
    loads: list[TenantLoad]
    budgets_left_out: int
    loads_left_out: int
    text: bytes = b""  # its series in Prometheus' text format, rendered once


def budget_rank(report: budgets.BudgetReport) -> tuple[float, int]:
    """How near its budget a tenant is (the largest share used of a period with a limit,
    -1 with none), then what it spent this month: the larger, the sooner it gets series."""
    used = [
        (p.spent_micros + p.reserved_micros) / p.limit_micros
        for p in (report.day, report.month)
        if p.limit_micros > 0
    ]
    return (max(used, default=-1.0), report.month.spent_micros)


class TenantSnapshots:
    """The latest `TenantSnapshot`, refreshed by a thread of its own once `start`ed."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.every_s = settings.observability.exporter_snapshot_every_s
        self.most = settings.observability.exporter_max_tenants
        self.started_at = time.monotonic()
        self.latest: TenantSnapshot | None = None
        self.last_failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def age_s(self) -> float:
        """Seconds since the latest snapshot was taken (since the start, before the first)."""
        latest = self.latest
        return time.monotonic() - (self.started_at if latest is None else latest.taken_at)

    def rendered(self) -> bytes:
        """The latest snapshot's series, as rendered when it was read (none before the first)."""
        latest = self.latest
        return b"" if latest is None else latest.text

    def start(self) -> None:
        """Read now and then every `every_s`, in a daemon thread, until `close`."""
        self._thread = threading.Thread(target=self._run, name="tenant-snapshot", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_PAGE_TIMEOUT_S)

    def refresh(self) -> TenantSnapshot | None:
        """Read every tenant once, now; keep and return the snapshot (None: Redis failed,
        and the previous snapshot stays)."""
        try:
            snapshot = asyncio.run(self.read())
        except _Stopping:
            return None
        except FAILED as exc:  # slow, gone or refusing us
            self.last_failed = True
            log.warning("metrics.tenants_unreadable", error=type(exc).__name__)
            return None
        self.latest, self.last_failed = snapshot, False
        return snapshot

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.refresh()
            except Exception as exc:  # the thread must outlive one bad round
                self.last_failed = True
                log.error("metrics.tenants_failed", error=type(exc).__name__)
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - began)))

    async def read(self) -> TenantSnapshot:
        """Every tenant's budget, a page at a time, and the fair queue's load."""
        began = time.monotonic()
        where = self.settings.redis
        timeout_s = max(where.timeout_s, 1.0)
        client = where.connect_shared(timeout_s=timeout_s)
        broker = where.connect(timeout_s=timeout_s)
        try:
            ledger = budget_ledger(self.settings, client)
            nearest = _Top[budgets.BudgetReport](self.most)
            seen: set[str] = set()
            unreadable = 0
            cursor = 0
            while True:
                async with asyncio.timeout(_PAGE_TIMEOUT_S):
                    cursor, page = await client.sscan(ledger.keys.tenants(), cursor, count=_PAGE)
                    fresh = [t for t in dict.fromkeys(map(_member, page)) if t not in seen]
                    seen.update(fresh)
                    named = [t for t in fresh if _is_tenant(t)]
                    unreadable += len(fresh) - len(named)
                    found = await ledger.reports(named) if named else []
                for report in found:
                    if isinstance(report, budgets.BudgetReport):
                        nearest.add(budget_rank(report), report)
                    else:
                        unreadable += 1
                if int(cursor) == 0:
                    break
                if self._stop.is_set():
                    raise _Stopping  # the exporter ends: no need to read the rest
                await asyncio.sleep(_PAGE_PAUSE_S)
            async with asyncio.timeout(_PAGE_TIMEOUT_S):
                try:
                    loads = await FairQueue(broker, namespace=where.namespace).load()
                except ValueError as exc:  # a damaged share: the budgets are still worth serving
                    log.warning("metrics.tenant_loads_unreadable", error=type(exc).__name__)
                    loads = []
        finally:
            await client.aclose()
            await broker.aclose()
        if unreadable:
            log.warning("metrics.tenant_reports_unreadable", tenants=unreadable)
        busiest = sorted(loads, key=lambda x: (-(x.queued + x.in_flight), x.tenant))[: self.most]
        chosen = sorted(nearest.items(), key=lambda r: r.tenant)
        ended = time.monotonic()
        snapshot = TenantSnapshot(
            taken_at=ended,
            duration_s=ended - began,
            tenants=len(seen),
            unreadable=unreadable,
            budgets=chosen,
            loads=sorted(busiest, key=lambda x: x.tenant),
            budgets_left_out=len(seen) - unreadable - len(chosen),
            loads_left_out=len(loads) - len(busiest),
        )
        return replace(snapshot, text=render(snapshot))


def _is_tenant(name: str) -> bool:
    # A member that is no tenant id (written by hand, or damaged) would make its key
    # unbuildable and fail its whole page: it is counted unreadable instead.
    try:
        budgets.check_tenant(name)
    except budgets.InvalidNameError:
        return False
    return True


class _Stopping(Exception):
    """`close` was called during a reading."""


class _Top(Generic[T]):
    """The `most` items of the largest rank seen, in memory bounded by `most`."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._heap: list[tuple[tuple[float, int], int, T]] = []
        self._n = 0

    def add(self, rank: tuple[float, int], item: T) -> None:
        if self.most == 0:
            return
        # The counter breaks ties, so items are never compared.
        entry = (rank, -self._n, item)
        self._n += 1
        if len(self._heap) < self.most:
            heapq.heappush(self._heap, entry)
        elif entry[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, entry)

    def items(self) -> list[T]:
        return [item for _, _, item in self._heap]


def render(snapshot: TenantSnapshot) -> bytes:
    """`snapshot`'s series in Prometheus' text format."""

    class Families:
        def collect(self) -> Iterator[Metric]:
            return _snapshot_families(snapshot)

    registry = CollectorRegistry()
    registry.register(Families())
    return generate_latest(registry)


def _snapshot_families(snapshot: TenantSnapshot) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        TENANT_SNAPSHOT_DURATION_SECONDS,
        "How long the latest reading of every tenant took",
        value=snapshot.duration_s,
    )
    yield GaugeMetricFamily(
        TENANT_SNAPSHOT_TENANTS,
        "Tenants with limits or spend in the latest reading",
        value=snapshot.tenants,
    )
    left_out = GaugeMetricFamily(
        TENANT_SERIES_LEFT_OUT,
        "Tenants without series of their own in a family (over exporter_max_tenants), "
        "or whose report failed (unreadable)",
        labels=["kind"],
    )
    left_out.add_metric(["budget"], snapshot.budgets_left_out)
    left_out.add_metric(["load"], snapshot.loads_left_out)
    left_out.add_metric(["unreadable"], snapshot.unreadable)
    yield left_out
    yield from _budget_families(snapshot.budgets)
    queued = GaugeMetricFamily(TENANT_QUEUED, "Turns waiting in the fair queue", labels=["tenant"])
    running = GaugeMetricFamily(
        TENANT_IN_FLIGHT, "Turns dispatched and not yet concluded (leases)", labels=["tenant"]
    )
    for load in snapshot.loads:
        queued.add_metric([load.tenant], load.queued)
        running.add_metric([load.tenant], load.in_flight)
    yield from (queued, running)


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


def _member(raw: object) -> str:
    """A member of the tenants set as text; bytes that are not UTF-8 (written by hand or
    by another tool) become text no tenant id matches, so the member is counted unreadable."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
