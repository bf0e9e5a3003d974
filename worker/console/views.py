"""What each page shows, read from Redis with the viewer's client.

Every read goes through the same operator functions as the `relevo` commands
(`breakers.Operators`, `KillSwitch`, `HeldTurns`, the budget ledger, `Handoffs`,
`TurnStore`); the fallback rate and the degraded turns are counted over the fleet's
recent turns (`TurnStore.recent`) in the alert's window; the tenants' turns queued and in flight
are the fair queue's (`FairQueue.load`). What this release cannot read (a result, a
heartbeat, an audit entry or a hand-off a newer release wrote, or a damaged one) is
counted or marked unreadable on its page, never a reason for the page to fail.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

import breakers
import budgets
from worker.console.recent import RecentFilter, ScopeError, errors_by_scope
from worker.console.stored import Recent, Streamed, read_chunks, read_recent, read_result
from worker.fleet.audit import AuditEntry, AuditTrail
from worker.fleet.fairqueue import FairQueue, TenantLoad
from worker.fleet.heartbeat import Heartbeat, Node, nodes, read_heartbeats
from worker.fleet.operations import OperatorFleet, budget_reports
from worker.fleet.rabbitmq import queue_depth
from worker.fleet.streams import StreamReader
from worker.fleet.turnstore import TurnKeys
from worker.settings import (
    BrokerSettings,
    BudgetSettings,
    FairnessSettings,
    ObservabilitySettings,
    WorkerSettings,
)
from worker.types import Status, TurnResult

__all__ = [
    "SORTS",
    "FallbackRate",
    "FleetView",
    "TenantRow",
    "Tenants",
    "TurnView",
    "fleet_view",
    "recent_view",
    "tenant_loads",
    "tenant_rows",
    "turn_view",
]

_HANDOFFS_READ = 500
# Open breakers first: the ones an operator came for.
_STATE_ORDER = {
    breakers.BreakerState.OPEN: 0,
    breakers.BreakerState.HALF_OPEN: 1,
    breakers.BreakerState.CLOSED: 2,
}


@dataclass(frozen=True)
class FallbackRate:
    """Share of the window's turns answered by a fallback (step >= 1)."""

    turns: int
    fallbacks: int
    threshold: float
    window_s: float
    min_turns: int

    @property
    def rate(self) -> float | None:
        return self.fallbacks / self.turns if self.turns else None

    @property
    def alerting(self) -> bool:
        rate = self.rate
        return rate is not None and self.turns >= self.min_turns and rate > self.threshold


# How long the fleet page says the store lost its data.
_RESET_SHOWN_MS = 86_400_000


@dataclass(frozen=True)
class FleetView:
    """The fleet page: breakers, cooldowns, marks, kill switch, fallback rate, audit trail."""

    report: breakers.FleetReport
    kill_switch: breakers.KillSwitchState | None
    held_turns: int
    fallback: FallbackRate
    audit: list[AuditEntry]
    unreadable: list[str] = field(default_factory=list)  # stored results not parsed
    workers: list[Heartbeat] = field(default_factory=list)
    workers_unreadable: list[str] = field(default_factory=list)  # processes, heartbeat unread
    queued: int | None = None  # None: the console's Redis user may not read the queue
    queue: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # the window's turns, by kind
    errors: dict[str, list[ScopeError]] = field(default_factory=dict)
    # When the store was last found to have lost its data, and the kinds of state lost.
    reset: tuple[int, str] | None = None

    @property
    def scopes(self) -> list[breakers.ScopeReport]:
        """The breakers, open first, then half-open, then closed; by name within each."""
        return sorted(self.report.scopes, key=lambda s: (_STATE_ORDER[s.state], s.scope))

    @property
    def nodes(self) -> list[Node]:
        """The worker processes by host."""
        return nodes(self.workers, self.report.now_ms)


def _observability(fleet: OperatorFleet) -> ObservabilitySettings:
    if fleet.settings is not None:
        return fleet.settings.observability
    return fleet.config.section("observability", ObservabilitySettings)


def _keys(fleet: OperatorFleet) -> TurnKeys:
    return TurnKeys(fleet.config.redis.namespace)


def _worker(fleet: OperatorFleet) -> WorkerSettings:
    if fleet.settings is not None:
        return fleet.settings.worker
    return fleet.config.section("worker", WorkerSettings)


async def _queued(fleet: OperatorFleet, client: Redis, queue: str) -> int | None:
    broker = fleet.config.section("broker", BrokerSettings)
    if broker.url is not None:
        return await queue_depth(broker.url, queue)
    # A viewer user made before the queue was readable to it: the page says so.
    try:
        return int(await client.llen(queue))
    except NoPermissionError:
        return None


def _counts(recent: Recent) -> dict[str, int]:
    kinds = {
        "degraded": RecentFilter(status=Status.DEGRADED),
        "failed": RecentFilter(status=Status.FAILED),
        "rejected": RecentFilter(status=Status.REJECTED),
        "fell_back": RecentFilter(fell_back=True),
    }
    counts = {name: sum(1 for r in recent.results if f.keeps(r)) for name, f in kinds.items()}
    return {"all": len(recent.results), **counts}


async def fleet_view(fleet: OperatorFleet, client: Redis) -> FleetView:
    """Everything on the fleet page, read concurrently."""
    namespace = fleet.config.redis.namespace
    watch = _observability(fleet)
    queue = _worker(fleet).queue
    # Two groups: asyncio.gather keeps the types of at most six.
    (report, state, held, recent, audit), (beats, queued, reset) = await asyncio.gather(
        asyncio.gather(
            breakers.Operators(fleet.store(client)).report(),
            breakers.KillSwitch(client, namespace=namespace).status(),
            breakers.HeldTurns(client, namespace=namespace).count(),
            # Every turn still recorded (the newest ~1,000): a breaker's errors may be
            # older than the fallback window; the rate and counts keep to the window.
            read_recent(client, _keys(fleet), _worker(fleet).result_ttl_s),
            AuditTrail(client, namespace=namespace).latest(),
        ),
        asyncio.gather(
            read_heartbeats(client, _keys(fleet)),
            _queued(fleet, client, queue),
            fleet.store(client).reset(),
        ),
    )
    kept, recent = recent, recent.since(int((time.time() - watch.fallback_window_s) * 1000))
    finished = [r for r in recent.results if r.step is not None]
    rate = FallbackRate(
        turns=len(finished),
        fallbacks=sum(1 for r in finished if r.step),
        threshold=watch.fallback_alert_threshold,
        window_s=watch.fallback_window_s,
        min_turns=watch.fallback_min_turns,
    )
    return FleetView(
        report,
        state,
        held,
        rate,
        audit,
        recent.unreadable,
        beats.beats,
        beats.unreadable,
        queued,
        queue,
        _counts(recent),
        errors_by_scope(fleet, kept),
        # A day on, the reset is history: the alert and the logs keep it.
        reset if reset is not None and time.time() * 1000 - reset[0] < _RESET_SHOWN_MS else None,
    )


async def recent_view(
    fleet: OperatorFleet, client: Redis, wanted: RecentFilter
) -> tuple[list[TurnResult], Recent]:
    """The window's turns `wanted` keeps (newest first), and the window as read."""
    recent = await read_recent(client, _keys(fleet), _observability(fleet).fallback_window_s)
    return wanted.apply(recent), recent


@dataclass(frozen=True)
class TenantRow:
    """One tenant on the tenants page; amounts in micro-dollars."""

    report: budgets.BudgetReport
    degraded_turns: int  # among the fleet's recent turns, in the fallback window
    handoffs: int | None  # among the newest hand-offs; None: not for this role to read

    @property
    def tenant(self) -> str:
        return self.report.tenant

    @property
    def used(self) -> float:
        """The larger share of the day's or the month's limit spent or held."""
        shares = [
            (p.spent_micros + p.reserved_micros) / p.limit_micros
            for p in (self.report.day, self.report.month)
            if p.limit_micros
        ]
        return max(shares, default=0.0)

    @property
    def blocked(self) -> bool:
        """The day's or the month's limit is spent or held: new turns degrade."""
        return self.used >= 1.0


# Sort keys a page may ask for; anything else is refused before it is used.
SORTS = {
    "tenant": lambda r: r.tenant,
    "used": lambda r: r.used,
    "spent_today": lambda r: r.report.day.spent_micros,
    "held": lambda r: r.report.reserved_micros,
    "free_today": lambda r: r.report.day.remaining_micros,
    "spent_month": lambda r: r.report.month.spent_micros,
    "fallback_today": lambda r: r.report.day.fallback_spent_micros,
    "degraded": lambda r: r.degraded_turns,
    "handoffs": lambda r: r.handoffs or 0,
}


@dataclass(frozen=True)
class Tenants:
    """The tenants page's rows, and what it could not read of the turns and hand-offs it
    counts: the ids of the window's unreadable results, how many hand-offs were unreadable."""

    rows: list[TenantRow]
    unreadable_results: list[str] = field(default_factory=list)
    unreadable_handoffs: int = 0


async def _handoffs(fleet: OperatorFleet, client: Redis | None) -> list[budgets.Handoff]:
    if client is None:
        return []
    return await budgets.Handoffs(client, namespace=fleet.config.redis.namespace).list(
        _HANDOFFS_READ
    )


async def tenant_rows(
    fleet: OperatorFleet,
    client: Redis,
    *,
    search: str = "",
    sort: str = "used",
    desc: bool = True,
    handoffs_from: Redis | None = None,
) -> Tenants:
    """Every tenant with limits or spend whose id contains `search`, sorted by `sort`.

    Hand-offs hold whole turns (prompts): they are counted through `handoffs_from`, the
    operator's client, and not at all (None in each row) for a viewer."""
    watch = _observability(fleet)
    reports, recent, handoffs = await asyncio.gather(
        budget_reports(fleet.ledger(client)),
        read_recent(client, _keys(fleet), watch.fallback_window_s),
        _handoffs(fleet, handoffs_from),
    )
    degraded = Counter(r.tenant_id for r in recent.results if r.status is Status.DEGRADED)
    handed = Counter(h.tenant for h in handoffs if h.problem is None)
    needle = search.casefold()
    rows = [
        TenantRow(r, degraded[r.tenant], None if handoffs_from is None else handed[r.tenant])
        for r in reports
        if needle in r.tenant.casefold()
    ]
    unread = sum(1 for h in handoffs if h.problem is not None)
    return Tenants(sorted(rows, key=SORTS[sort], reverse=desc), recent.unreadable, unread)


async def tenant_loads(
    fleet: OperatorFleet, client: Redis, *, search: str = ""
) -> list[TenantLoad]:
    """The tenants with turns queued or running in the fair queue, or a share of their own,
    whose id contains `search`; the most queued first."""
    config = fleet.config
    fair = FairQueue(
        client,
        namespace=config.redis.namespace,
        queue=config.section("worker", WorkerSettings).queue,
        default=config.section("fairness", FairnessSettings).default_share(),
    )
    needle = search.casefold()
    loads = [x for x in await fair.load() if needle in x.tenant.casefold()]
    return sorted(loads, key=lambda x: (-x.queued, -x.in_flight, x.tenant))


@dataclass(frozen=True)
class TenantView:
    """One tenant's budget, with its spend by each metadata key attributed (those the
    configuration names, then any other the periods hold); None when it has no budget."""

    tenant: str
    report: budgets.BudgetReport | None
    keys: list[str]


async def tenant_view(fleet: OperatorFleet, client: Redis, tenant: str) -> TenantView:
    """`tenant`'s report with its spend attribution (`relevo budgets report --by`)."""
    try:
        report = await fleet.ledger(client).report(tenant, attributed=True)
    except budgets.UnknownTenantError:
        return TenantView(tenant, None, [])
    named = fleet.config.section("budgets", BudgetSettings).attribute_by
    found = sorted({*report.day.attribution, *report.month.attribution} - set(named))
    return TenantView(tenant, report, [*named, *found])


# What one turn's page renders at most: a stored result, a stream or a list of attempts
# anyone who may write Redis made huge must not make a huge page (or a huge read).
RESULT_BYTES_READ = 4 * 2**20
ATTEMPTS_SHOWN = 100
STREAM_CHARS_SHOWN = 256 * 2**10
STREAM_ENTRIES_READ = 10_000


@dataclass(frozen=True)
class TurnView:
    """One turn: its result (None while unknown or unfinished) and what it streamed, each
    within the page's caps; `cut` says what was left out."""

    turn_id: str
    result: TurnResult | None
    streamed: Streamed
    running: bool  # claimed by a worker and not finished
    bars: list[dict[str, float]] = field(default_factory=list)
    unreadable: str | None = None  # a result is stored, and why this release cannot read it
    too_large: int | None = None  # a result is stored, this many bytes: over the cap, not read
    attempts_cut: int = 0  # attempts after the first ATTEMPTS_SHOWN, not shown
    stream_chars: int = 0  # the streamed text's length, when it was cut


async def turn_view(fleet: OperatorFleet, client: Redis, turn_id: str) -> TurnView:
    """The turn's stored result, its streamed text (if kept) and its attempts as bars."""
    keys = _keys(fleet)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keys.claim(turn_id))
    pipe.xrange(keys.chunks(turn_id), count=STREAM_ENTRIES_READ)
    pipe.strlen(keys.result(turn_id))
    claimed, chunks, size = await pipe.execute()
    streamed = read_chunks(StreamReader(client, keys.chunks(turn_id)), chunks)
    whole = len(streamed.text)
    if whole > STREAM_CHARS_SHOWN:
        streamed = Streamed(streamed.text[:STREAM_CHARS_SHOWN], streamed.unreadable)
    cut_stream = whole if whole > STREAM_CHARS_SHOWN else 0
    if int(size) > RESULT_BYTES_READ:
        return TurnView(
            turn_id, None, streamed, False, too_large=int(size), stream_chars=cut_stream
        )
    stored = await read_result(client, keys, turn_id)
    result = stored.result
    running = bool(claimed) and result is None and not stored.unreadable
    cut = 0
    if result is not None and len(result.attempts) > ATTEMPTS_SHOWN:
        cut = len(result.attempts) - ATTEMPTS_SHOWN
        result = result.model_copy(update={"attempts": result.attempts[:ATTEMPTS_SHOWN]})
    return TurnView(
        turn_id,
        result,
        streamed,
        running,
        _bars(result),
        stored.unreadable,
        attempts_cut=cut,
        stream_chars=cut_stream,
    )


def _bars(result: TurnResult | None) -> list[dict[str, float]]:
    """Each attempt's start, first byte and end as percentages of the turn's span."""
    if result is None or not result.attempts:
        return []
    span = max([result.latency_ms, *(a.ended_ms for a in result.attempts), 1])
    bars = []
    for a in result.attempts:
        start = max(0, a.ended_ms - a.latency_ms)
        bar = {"left": 100 * start / span, "width": max(0.5, 100 * a.latency_ms / span)}
        if a.first_byte_ms is not None:
            bar["first_byte"] = 100 * min(a.first_byte_ms, a.latency_ms) / max(a.latency_ms, 1)
        bars.append(bar)
    return bars
