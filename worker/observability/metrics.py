"""Prometheus metrics of turns and attempts, recorded once per turn by the runner.

Each worker process records into its own `TurnMetrics`. Under `relevo worker`
the processes run in prometheus-client's multiprocess mode
(`PROMETHEUS_MULTIPROC_DIR`), and the parent serves them all on one port. The
fleet's state in Redis (breakers, budgets, kill switch, held turns, queue depth) is
read by the fleet's one `relevo exporter` (`worker.fleet.exporter`), not by every node,
and only the exporter's series carry a tenant label. The names below are a contract
with `deploy/` (alert rules, dashboard): change them there too.
"""

from __future__ import annotations

import importlib.metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from worker.errors import ModelNotFound
from worker.observability.alert import FallbackWatch
from worker.settings import ObservabilitySettings
from worker.types import AttemptOutcome, TurnResult

__all__ = [
    "ATTEMPTS_TOTAL",
    "ATTEMPT_DURATION_SECONDS",
    "BACKLOG_DROPPED_TOTAL",
    "BACKLOG_WRITES",
    "BREAKER_STATE",
    "BUILD_INFO",
    "CHARGES_OVER_WORST_CASE_TOTAL",
    "EXPORTER_READ_OK",
    "FAIR_WAIT_SECONDS",
    "FALLBACK_RATIO",
    "HEDGES_TOTAL",
    "HEDGE_WASTED_MICROS_TOTAL",
    "HELD_TURNS",
    "KILL_SWITCH",
    "LOCAL_BREAKERS",
    "METRIC_NAMES",
    "MODEL_NOT_FOUND_TOTAL",
    "QUEUE_DEPTH",
    "SERIES_NAMES",
    "SET_ASIDE_TOTAL",
    "STORE_RESETS_TOTAL",
    "TENANT_BUDGET_HELD_MICROS",
    "TENANT_BUDGET_REMAINING_MICROS",
    "TENANT_BUDGET_USED_RATIO",
    "TENANT_IN_FLIGHT",
    "TENANT_QUEUED",
    "TENANT_RECLAIMED_CHARGES",
    "TENANT_RECLAIMED_MICROS",
    "TENANT_SERIES_LEFT_OUT",
    "TENANT_SNAPSHOT_AGE_SECONDS",
    "TENANT_SNAPSHOT_DURATION_SECONDS",
    "TENANT_SNAPSHOT_TENANTS",
    "TENANT_SPEND_MICROS",
    "TURNS_RESENT_TOTAL",
    "TURNS_TOTAL",
    "TURN_DURATION_SECONDS",
    "UNREADABLE_TOTAL",
    "VERSION",
    "TurnMetrics",
    "is_exported",
]

TURNS_TOTAL = "relevo_turns_total"
ATTEMPTS_TOTAL = "relevo_attempts_total"
TURN_DURATION_SECONDS = "relevo_turn_duration_seconds"
ATTEMPT_DURATION_SECONDS = "relevo_attempt_duration_seconds"
BREAKER_STATE = "relevo_breaker_state"
TENANT_SPEND_MICROS = "relevo_tenant_spend_micros"
TENANT_BUDGET_REMAINING_MICROS = "relevo_tenant_budget_remaining_micros"
TENANT_BUDGET_USED_RATIO = "relevo_tenant_budget_used_ratio"
TENANT_BUDGET_HELD_MICROS = "relevo_tenant_budget_held_micros"
TENANT_RECLAIMED_CHARGES = "relevo_tenant_reclaimed_charges"
TENANT_RECLAIMED_MICROS = "relevo_tenant_reclaimed_micros"
FALLBACK_RATIO = "relevo_fallback_ratio"
KILL_SWITCH = "relevo_kill_switch"
STORE_RESETS_TOTAL = "relevo_store_resets_total"
MODEL_NOT_FOUND_TOTAL = "relevo_model_not_found_total"
HEDGES_TOTAL = "relevo_hedges_total"
HEDGE_WASTED_MICROS_TOTAL = "relevo_hedge_wasted_micros_total"
LOCAL_BREAKERS = "relevo_local_breakers"
BACKLOG_WRITES = "relevo_backlog_writes"
BACKLOG_DROPPED_TOTAL = "relevo_backlog_dropped_total"
TURNS_RESENT_TOTAL = "relevo_turns_resent_total"
UNREADABLE_TOTAL = "relevo_unreadable_items_total"
SET_ASIDE_TOTAL = "relevo_set_aside_total"
CHARGES_OVER_WORST_CASE_TOTAL = "relevo_charges_over_worst_case_total"
BUILD_INFO = "relevo_build_info"
# Read from Redis by the fleet's one exporter (`relevo exporter`), not by every node.
HELD_TURNS = "relevo_held_turns"
QUEUE_DEPTH = "relevo_queue_depth"
TENANT_QUEUED = "relevo_tenant_queued_turns"
TENANT_IN_FLIGHT = "relevo_tenant_in_flight_turns"
EXPORTER_READ_OK = "relevo_exporter_read_ok"
TENANT_SNAPSHOT_AGE_SECONDS = "relevo_tenant_snapshot_age_seconds"
TENANT_SNAPSHOT_DURATION_SECONDS = "relevo_tenant_snapshot_duration_seconds"
TENANT_SNAPSHOT_TENANTS = "relevo_tenant_snapshot_tenants"
TENANT_SERIES_LEFT_OUT = "relevo_tenant_series_left_out"
# A worker's series carry no tenant label: per-tenant series come from the exporter only,
# bounded by `exporter_max_tenants` (a node's would grow with every tenant it ever served).
FAIR_WAIT_SECONDS = "relevo_fair_queue_wait_seconds"

# Every metric name and its labels, as PromQL sees them.
METRIC_NAMES: dict[str, tuple[str, ...]] = {
    # `chain`: the configured chain the turn ran on (a bounded set of names).
    TURNS_TOTAL: ("status", "effective_model", "step", "chain"),
    ATTEMPTS_TOTAL: ("model", "provider", "outcome", "error_class"),
    TURN_DURATION_SECONDS: ("status",),
    ATTEMPT_DURATION_SECONDS: ("model", "provider", "outcome"),
    BREAKER_STATE: ("scope",),
    TENANT_SPEND_MICROS: ("tenant", "period"),
    TENANT_BUDGET_REMAINING_MICROS: ("tenant", "period"),
    TENANT_BUDGET_USED_RATIO: ("tenant", "period"),
    TENANT_BUDGET_HELD_MICROS: ("tenant",),
    TENANT_RECLAIMED_CHARGES: ("tenant", "period"),
    TENANT_RECLAIMED_MICROS: ("tenant", "period"),
    # `pid` too under several processes: one series per live process.
    FALLBACK_RATIO: (),
    KILL_SWITCH: (),
    STORE_RESETS_TOTAL: (),
    MODEL_NOT_FOUND_TOTAL: ("model", "provider", "provider_model"),
    # Hedged races decided: "won" (the hedge sent content first) or "lost".
    HEDGES_TOTAL: ("outcome",),
    HEDGE_WASTED_MICROS_TOTAL: (),
    # One series per node (the most, or the sum, over its live processes).
    LOCAL_BREAKERS: (),
    BACKLOG_WRITES: (),
    BACKLOG_DROPPED_TOTAL: (),
    TURNS_RESENT_TOTAL: (),
    # What a worker could not read ("turn", "request", "result"): a newer release's, or
    # damaged. Under way during an upgrade, it says the order of the roll is wrong.
    UNREADABLE_TOTAL: ("what", "cause"),
    # What a dispatcher or worker could not use and went on without: an outbox entry no
    # broker takes ("undecodable", "too_large", "refused"), a turn sent under other fleet
    # settings ("broker", "fairness", "namespace").
    SET_ASIDE_TOTAL: ("what", "reason"),
    # Calls the provider billed past their reserved worst case: a bound that failed.
    CHARGES_OVER_WORST_CASE_TOTAL: ("model", "provider"),
    BUILD_INFO: ("version",),
    HELD_TURNS: (),
    QUEUE_DEPTH: ("queue",),
    # The fair queue (the exporter's snapshot), and each turn's wait in it (the workers').
    TENANT_QUEUED: ("tenant",),
    TENANT_IN_FLIGHT: ("tenant",),
    FAIR_WAIT_SECONDS: (),
    # The exporter's own state: which parts it read, and its tenant snapshot.
    EXPORTER_READ_OK: ("part",),
    TENANT_SNAPSHOT_AGE_SECONDS: (),
    TENANT_SNAPSHOT_DURATION_SECONDS: (),
    TENANT_SNAPSHOT_TENANTS: (),
    TENANT_SERIES_LEFT_OUT: ("kind",),
}
_HISTOGRAMS = (TURN_DURATION_SECONDS, ATTEMPT_DURATION_SECONDS, FAIR_WAIT_SECONDS)
# The series names a query may use: histograms add _bucket, _sum and _count.
SERIES_NAMES = frozenset(METRIC_NAMES) | {
    f"{name}{suffix}" for name in _HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
}

# Turns wait on LLMs: seconds to minutes. Attempts include first-byte timeouts.
_TURN_BUCKETS_S = (0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
# A turn's wait in the fair queue: a dispatch round (ms) when the fleet has room.
_WAIT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
_ATTEMPT_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


def is_exported(series: str) -> bool:
    """Whether `series` (e.g. `relevo_turn_duration_seconds_bucket`) is one this code exports."""
    return series in SERIES_NAMES


def _version() -> str:
    try:
        return importlib.metadata.version("relevo")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


# The installed release: `relevo_build_info` and the workers' heartbeats say it.
VERSION = _version()


def _counter_base(name: str) -> str:
    # prometheus-client adds `_total` to a counter's name itself.
    return name.removesuffix("_total")


class TurnMetrics:
    """The per-process turn metrics and fallback-rate alert; `record` once per turn run."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        watch: FallbackWatch | None = None,
    ) -> None:
        # A registry of its own: two runners in one test process do not collide.
        self.registry = registry if registry is not None else CollectorRegistry()
        self.watch = watch or FallbackWatch()
        r = self.registry
        self.turns = Counter(
            _counter_base(TURNS_TOTAL), "Turns run", METRIC_NAMES[TURNS_TOTAL], registry=r
        )
        self.attempts = Counter(
            _counter_base(ATTEMPTS_TOTAL),
            "Tries and skips of a model on a provider",
            METRIC_NAMES[ATTEMPTS_TOTAL],
            registry=r,
        )
        self.turn_seconds = Histogram(
            TURN_DURATION_SECONDS,
            "Turn latency, end to end",
            METRIC_NAMES[TURN_DURATION_SECONDS],
            buckets=_TURN_BUCKETS_S,
            registry=r,
        )
        self.attempt_seconds = Histogram(
            ATTEMPT_DURATION_SECONDS,
            "Latency of one call to a model (skips excluded)",
            METRIC_NAMES[ATTEMPT_DURATION_SECONDS],
            buckets=_ATTEMPT_BUCKETS_S,
            registry=r,
        )
        self.fallback_ratio = Gauge(
            FALLBACK_RATIO,
            "Share of this process's turns with step >= 1 over the sliding window",
            registry=r,
            multiprocess_mode="liveall",
        )
        self.models_not_found = Counter(
            _counter_base(MODEL_NOT_FOUND_TOTAL),
            "Calls a provider answered with: this model does not exist (a person must act)",
            METRIC_NAMES[MODEL_NOT_FOUND_TOTAL],
            registry=r,
        )
        self.hedges = Counter(
            _counter_base(HEDGES_TOTAL),
            "Hedged races decided, by whether the hedge won",
            METRIC_NAMES[HEDGES_TOTAL],
            registry=r,
        )
        self.hedge_wasted = Counter(
            _counter_base(HEDGE_WASTED_MICROS_TOTAL),
            "Micro-dollars charged for the losing calls of hedged races",
            registry=r,
        )
        self.wait_seconds = Histogram(
            FAIR_WAIT_SECONDS,
            "Time a turn waited in the fair queue, from enqueue to dispatch (every tenant)",
            METRIC_NAMES[FAIR_WAIT_SECONDS],
            buckets=_WAIT_BUCKETS_S,
            registry=r,
        )
        self.store_resets = Counter(
            _counter_base(STORE_RESETS_TOTAL),
            "Times this process found the shared store had lost its data",
            registry=r,
        )
        self.local_breakers = Gauge(
            LOCAL_BREAKERS,
            "1 while a process answers from its own breakers: it cannot reach Redis",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.backlog_writes = Gauge(
            BACKLOG_WRITES,
            "Results, spend and held turns waiting for Redis to answer again",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.backlog_dropped = Counter(
            _counter_base(BACKLOG_DROPPED_TOTAL),
            "Writes refused because the backlog was full: results or spend lost",
            registry=r,
        )
        self.turns_resent = Counter(
            _counter_base(TURNS_RESENT_TOTAL),
            "Turns the broker lost, sent again by the sweeper",
            registry=r,
        )
        self.unreadable_items = Counter(
            _counter_base(UNREADABLE_TOTAL),
            "Stored or queued items this process could not read, by cause (newer, damaged)",
            METRIC_NAMES[UNREADABLE_TOTAL],
            registry=r,
        )
        self.set_aside_items = Counter(
            _counter_base(SET_ASIDE_TOTAL),
            "Items a dispatcher or worker set aside and went on without, by reason",
            METRIC_NAMES[SET_ASIDE_TOTAL],
            registry=r,
        )
        self.over_worst_case = Counter(
            _counter_base(CHARGES_OVER_WORST_CASE_TOTAL),
            "Calls charged more than their reserved worst case (charged in full)",
            METRIC_NAMES[CHARGES_OVER_WORST_CASE_TOTAL],
            registry=r,
        )
        build = Gauge(
            BUILD_INFO,
            "1, labelled with the version this node runs",
            METRIC_NAMES[BUILD_INFO],
            registry=r,
            multiprocess_mode="livemax",
        )
        build.labels(VERSION).set(1)
        self._dropped_seen = 0

    @classmethod
    def from_settings(cls, settings: ObservabilitySettings) -> TurnMetrics:
        watch = FallbackWatch(
            threshold=settings.fallback_alert_threshold,
            window_s=settings.fallback_window_s,
            min_turns=settings.fallback_min_turns,
        )
        return cls(watch=watch)

    def store_reset(self) -> None:
        """Count a store that came back empty (`breakers.ResilientBreakers.on_reset`)."""
        self.store_resets.inc()

    def process_state(self, *, local: bool, backlog: int, dropped: int) -> None:
        """This process's link to Redis: local breakers in use, writes waiting, writes
        dropped so far (the backlog's own count, which only grows)."""
        self.local_breakers.set(int(local))
        self.backlog_writes.set(backlog)
        if dropped > self._dropped_seen:
            self.backlog_dropped.inc(dropped - self._dropped_seen)
            self._dropped_seen = dropped

    def resent(self, turns: int) -> None:
        """Count turns the sweeper sent again."""
        self.turns_resent.inc(turns)

    def unreadable(self, what: str, *, newer: bool) -> None:
        """Count an item this process could not read (`worker.fleet.errors.Unreadable`)."""
        self.unreadable_items.labels(what, "newer" if newer else "damaged").inc()

    def set_aside(self, what: str, reason: str) -> None:
        """Count an item set aside (an outbox entry, a turn of a mismatched fleet)."""
        self.set_aside_items.labels(what, reason).inc()

    def charged_over_worst_case(self, model: str, provider: str) -> None:
        """Count a call charged more than its worst case (`RedisGuard.on_over_worst_case`)."""
        self.over_worst_case.labels(model, provider).inc()

    def waited(self, seconds: float) -> None:
        """A turn left the fair queue after `seconds`."""
        self.wait_seconds.observe(seconds)

    def record(self, result: TurnResult) -> None:
        """Count a finished turn and each of its attempts; update the fallback rate."""
        step = "" if result.step is None else str(result.step)
        status = result.status.value
        chain = result.chain or "default"
        self.turns.labels(status, result.effective_model or "", step, chain).inc()
        self.turn_seconds.labels(status).observe(result.latency_ms / 1000)
        for attempt in result.attempts:
            outcome = attempt.outcome.value
            self.attempts.labels(
                attempt.model, attempt.provider, outcome, attempt.error_class or ""
            ).inc()
            if attempt.error_class == ModelNotFound.code:
                self.models_not_found.labels(
                    attempt.model, attempt.provider, attempt.provider_model
                ).inc()
            if attempt.outcome is AttemptOutcome.HEDGE_LOST:
                self.hedges.labels("won" if attempt.error_class == "hedged" else "lost").inc()
                self.hedge_wasted.inc(attempt.charged_micros or 0)
            if attempt.outcome is not AttemptOutcome.SKIPPED:
                self.attempt_seconds.labels(attempt.model, attempt.provider, outcome).observe(
                    attempt.latency_ms / 1000
                )
        # Every turn counts, as in the fleet-wide rate Prometheus computes from `turns`.
        fell_back = result.step is not None and result.step >= 1
        self.fallback_ratio.set(self.watch.record(fell_back))
