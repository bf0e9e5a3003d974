"""A fleet upgraded while it runs: a worker of the previous release (0.1.0, from its wheel in
tests/releases) and a worker of this checkout share one Redis namespace and one queue
through 500 turns, half sent by a producer of each release, while the primary's breaker
trips again and again and budgets charge and refuse.

Required: no turn is lost; every turn is read alike by the readers of both releases (the
turn store's, `Producer.turn(id).result()`, and Celery's result backend, `TurnHandle.get()`);
every charge is made once (the ledger's spend is the stored costs, and the provider saw
exactly the calls the results report); both releases ran turns, the other producer's too.
The previous release runs as its real code: each of its processes says where it loaded
`worker`, `breakers` and `budgets` from (tests/releasekit.py). The fleet runs once for
the module; each test checks one requirement of that run.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import budgets
from tests import releasekit
from tests.chainkit import worker_config
from worker.fleet import Producer, TurnHandle, enqueue_turn, make_app
from worker.fleet.turnstore import TurnKeys
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import AttemptOutcome, Status, TurnResult

# The module's one run happens in its first test: starting four processes on a busy
# two-core machine can take a minute.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
TURNS = 500
THREADS = 16
# A turn's deadline, queue included. They all end within about 10 s here; a busy machine
# slows them down, and a turn still queued at its deadline fails (`queue_deadline`).
DEADLINE_S = 60
DRAIN_S = DEADLINE_S + 20.0  # for every turn to end
GENEROUS = ("mix-a", "mix-b")
CAPPED = "mix-capped"  # a small fallback cap: its fallbacks are refused once it is spent
TIGHT = "mix-tight"  # a small daily budget: most of its turns are refused
TENANTS = (*GENEROUS, CAPPED, TIGHT)
BUDGET_REASONS = {
    "tenant_budget_exhausted",
    "tenant_budget_held",
    "fallback_cap_reached",
    "fallback_cap_held",
}
# Both releases read this one file: it holds only keys 0.1.0 knows.
SECTIONS = """
[retry]
base_delay_s = 0.01

[worker]
queue = "{namespace}"
processes = 1
threads = {threads}

[breakers]
window_s = 5
min_calls_in_window = 4
break_s = 0.3
max_break_s = 1
probe_ttl_s = 2

[budgets]
held_wait_s = 0.5

[observability]
log_json = true
log_level = "info"
metrics_port = 0
"""


Read = tuple[dict[str, Any] | None, str | None]  # a result as JSON, or why it was not read


@dataclass
class Run:
    """What the mixed fleet did, and what each reader read."""

    previous: Path  # the previous release, unpacked
    nodes: dict[str, releasekit.Worker]  # "previous", "current"
    old_sent: set[str]  # turns the 0.1.0 producer sent
    ids: list[str]  # every turn, in the order sent
    imports: list[dict[str, Any]]  # what each 0.1.0 client process said it imported
    current_store: dict[str, TurnResult | BaseException]
    reads: dict[str, dict[str, Read]]  # the other readers': reader -> turn id -> read
    ledger: dict[str, budgets.BudgetReport]
    calls: dict[str, int]  # the simulator's calls per model
    ran_by: dict[str, str] = field(default_factory=dict)  # turn id -> release

    @property
    def results(self) -> dict[str, TurnResult]:
        return {i: r for i, r in self.current_store.items() if isinstance(r, TurnResult)}

    def producer(self, turn_id: str) -> str:
        return "0.1.0 producer" if turn_id in self.old_sent else "current producer"


def payload(turn_id: str, tenant: str) -> dict[str, Any]:
    """A small turn, as JSON both releases take."""
    return {
        "turn_id": turn_id,
        "tenant_id": tenant,
        "messages": [{"role": "user", "content": f"Where is order {turn_id}?"}],
        "max_tokens": 16,
        "deadline_s": DEADLINE_S,
    }


def wait_consuming(nodes: dict[str, releasekit.Worker], redis_url: str, namespace: str) -> None:
    """Until each worker process has written its heartbeat (it does as it starts consuming)."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 120
    try:
        while client.zcard(TurnKeys(namespace).workers) < len(nodes):
            for node in nodes.values():
                if node.proc.poll() is not None:
                    tail = [x for x in node.log.read_text().splitlines() if not x.startswith("#")]
                    pytest.fail(f"the {node.name} worker exited:\n" + "\n".join(tail[-30:]))
            assert time.monotonic() < deadline, "the workers wrote no heartbeat within 120 s"
            time.sleep(0.1)
    finally:
        client.close()


async def read_store(
    settings: Settings, ids: Sequence[str]
) -> dict[str, TurnResult | BaseException]:
    """Each turn's result through this release's turn store reader, waiting for it."""
    async with Producer.from_settings(settings) as producer:
        got = await asyncio.gather(
            *(producer.turn(i).result(timeout_s=DRAIN_S) for i in ids), return_exceptions=True
        )
    return dict(zip(ids, got, strict=True))


def read_celery(settings: Settings, ids: Sequence[str]) -> dict[str, Read]:
    """Each turn's result through this release's Celery result backend (`TurnHandle`)."""
    app = make_app(settings)
    read: dict[str, Read] = {}
    try:
        for turn_id in ids:
            try:
                result = TurnHandle(turn_id, app.AsyncResult(turn_id)).get(timeout_s=5)
            except Exception as exc:
                read[turn_id] = None, f"{type(exc).__name__}: {exc}"
            else:
                read[turn_id] = result.model_dump(mode="json"), None
    finally:
        app.close()
    return read


async def set_budgets(redis_url: str, namespace: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        ledger = budgets.Ledger(client, namespace=namespace)
        for tenant in GENEROUS:
            await ledger.set_limits(tenant, 50_000_000, 500_000_000)
        await ledger.set_limits(CAPPED, 50_000_000, 500_000_000, fallback_cap_micros=2_000)
        await ledger.set_limits(TIGHT, 5_000, 50_000)
    finally:
        await client.aclose()


async def books(redis_url: str, namespace: str) -> dict[str, budgets.BudgetReport]:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        ledger = budgets.Ledger(client, namespace=namespace)
        return {tenant: await ledger.report(tenant) for tenant in TENANTS}
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def run(sim: Simulator, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The mixed fleet's 500 turns, read by every reader once they have all ended."""
    previous = releasekit.unpack(tmp_path_factory.mktemp("relevo-previous"))
    # Its code runs on this environment's dependencies: they must be ones it takes.
    unmet = releasekit.unmet_requirements(previous)
    assert not unmet, f"this environment does not meet {releasekit.PREVIOUS}'s needs: {unmet}"
    here = tmp_path_factory.mktemp("mixed-fleet")
    namespace = f"relevo-test-{uuid.uuid4().hex[:12]}"
    config = here / "chain.toml"
    sections = SECTIONS.format(namespace=namespace, threads=THREADS)
    config.write_text(
        worker_config(
            sim=sim.url,
            redis_url=redis_url,
            namespace=namespace,
            sections=sections,
            deadline_s=DEADLINE_S,
        )
    )
    settings = load_settings(config, require_secrets=False)
    sim.reset()
    # The primary fails three calls in five: its breaker opens, probes, closes, opens again.
    sim.set_faults("alpha", Fault(status=503, rate=0.6))
    asyncio.run(set_budgets(redis_url, namespace))
    suffix = uuid.uuid4().hex[:8]
    turns = [
        payload(f"{'old' if i % 2 == 0 else 'new'}{i:03d}-{suffix}", TENANTS[i % len(TENANTS)])
        for i in range(TURNS)
    ]
    ids = [t["turn_id"] for t in turns]
    nodes = {
        name: releasekit.Worker.start(name, config, code, here, threads=THREADS)
        for name, code in (("previous", previous), ("current", None))
    }
    producer = releasekit.start_client("enqueue", config, previous, here)
    reader = releasekit.start_client("read", config, previous, here)
    try:
        wait_consuming(nodes, redis_url, namespace)
        # Both producers at once: the previous release's in its own process, this one's here.
        app = make_app(settings)
        with ThreadPoolExecutor(1) as pool:
            producing = pool.submit(
                releasekit.finish_client, producer, [json.dumps(t) for t in turns[0::2]]
            )
            for turn in turns[1::2]:
                enqueue_turn(turn, app=app, limits=settings.limits)
            old_producer, enqueued = producing.result()
        app.close()
        old_sent = {e["turn_id"] for e in enqueued if "sent_at" in e}
        assert old_sent == set(ids[0::2]), [e for e in enqueued if "error" in e][:3]
        current_store = asyncio.run(read_store(settings, ids))  # waits for every turn
        for node in nodes.values():  # every turn has ended: they shut down while we read
            node.shut_down()
        current_celery = read_celery(settings, ids)
        old_reader, old_reads = releasekit.finish_client(reader, ids)
    finally:
        for client in (producer, reader):
            if client.poll() is None:
                client.kill()
                client.communicate()
        for node in nodes.values():
            node.stop()
    return Run(
        previous=previous,
        nodes=nodes,
        old_sent=old_sent,
        ids=ids,
        imports=[old_producer, old_reader],
        current_store=current_store,
        reads={
            "current celery": current_celery,
            "0.1.0 store": {r["turn_id"]: (r["store"], r["store_error"]) for r in old_reads},
            "0.1.0 celery": {r["turn_id"]: (r["celery"], r["celery_error"]) for r in old_reads},
        },
        ledger=asyncio.run(books(redis_url, namespace)),
        calls={model: sim.calls(model) for model in ("alpha", "beta")},
        ran_by={turn_id: node.name for node in nodes.values() for turn_id in node.completed()},
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def test_the_previous_release_runs_its_own_code_and_this_release_the_checkout(run: Run) -> None:
    for said in run.imports:  # the 0.1.0 producer and reader
        assert all(Path(f).is_relative_to(run.previous) for f in said["modules"].values()), said
        assert Path(said["distribution"]) == run.previous, said
    old, new = run.nodes["previous"].code_from(), run.nodes["current"].code_from()
    assert releasekit.ours(old, run.previous), "the previous worker loaded none of its code"
    assert not releasekit.ours(old, ROOT), releasekit.ours(old, ROOT)[:5]
    assert releasekit.ours(new, ROOT), "the current worker loaded none of the checkout"
    assert not releasekit.ours(new, run.previous), releasekit.ours(new, run.previous)[:5]


def test_no_turn_is_lost_and_each_ends_answered_or_refused_by_a_budget(run: Run) -> None:
    lost = Counter(
        (
            run.producer(i),
            f"run by {run.ran_by.get(i, 'no')} worker",
            _one_line(repr(r).replace(i, "<id>")),
        )
        for i, r in run.current_store.items()
        if not isinstance(r, TurnResult)
    )
    assert not lost, f"turns with no result (producer, worker, read): {dict(lost)}"
    unexpected = Counter(
        (r.status.value, r.reason, f"run by {run.ran_by.get(i)}", run.producer(i))
        for i, r in run.results.items()
        if not (
            r.status is Status.OK or (r.status is Status.DEGRADED and r.reason in BUDGET_REASONS)
        )
    )
    assert not unexpected, f"turns neither answered nor refused by a budget: {dict(unexpected)}"


def test_readers_of_both_releases_read_every_turn_alike(run: Run) -> None:
    """Each reader's result has the fields and values this release's turn store reader
    reads (fields only this release knows are not compared)."""
    failures: Counter[tuple[str, str, str]] = Counter()
    examples: dict[tuple[str, str, str], str] = {}
    for turn_id, result in run.results.items():
        current = result.model_dump(mode="json")
        for reader, reads in run.reads.items():
            dump, error = reads.get(turn_id, (None, "not read"))
            wrong = error or "; ".join(
                f"{k}: {dump[k]!r} != {current.get(k, '<absent>')!r}"
                for k in dump or {}
                if k not in current or dump[k] != current[k]
            )
            if wrong:
                key = (reader, f"run by the {run.ran_by.get(turn_id)} worker", result.status)
                failures[key] += 1
                examples.setdefault(key, f"{turn_id}: {_one_line(wrong)}")
    assert not failures, "turns a reader could not read alike:\n" + "\n".join(
        f"  {reader}, {where}, {status}: {n} (e.g. {examples[reader, where, status]})"
        for (reader, where, status), n in failures.items()
    )


def test_each_turn_runs_once_and_each_charge_is_made_once(run: Run) -> None:
    runs = Counter(i for node in run.nodes.values() for i in node.completed())
    assert set(runs) == set(run.ids)
    assert {i: n for i, n in runs.items() if n > 1} == {}
    for tenant in TENANTS:
        stored = sum(r.cost_micros for r in run.results.values() if r.tenant_id == tenant)
        report = run.ledger[tenant]
        assert (tenant, report.day.spent_micros, report.reserved_micros) == (tenant, stored, 0)
        assert stored > 0
    called = Counter(
        a.provider_model
        for r in run.results.values()
        for a in r.attempts
        if a.outcome is not AttemptOutcome.SKIPPED
    )
    # Every call the provider saw is an attempt a result reports: none was made twice.
    assert set(called) <= set(run.calls)
    assert {model: called[model] for model in run.calls} == run.calls


def test_both_releases_ran_turns_of_both_producers_past_open_breakers_and_budgets(
    run: Run,
) -> None:
    results = run.results
    for release in run.nodes:
        mine = [i for i, who in run.ran_by.items() if who == release]
        assert len(mine) >= TURNS // 10, (release, len(mine))
        assert Counter(run.producer(i) for i in mine).keys() == {
            "0.1.0 producer",
            "current producer",
        }, release
        skipped = [
            i
            for i in mine
            if i in results and any("breaker" in (a.error_class or "") for a in results[i].attempts)
        ]
        assert skipped, f"the {release} worker never found the primary's breaker open"
    assert {r.step for r in results.values() if r.status is Status.OK} == {0, 1}
    refused = Counter(r.reason for r in results.values() if r.reason in BUDGET_REASONS)
    assert refused.keys() >= {"tenant_budget_exhausted", "fallback_cap_reached"}, refused


def test_a_strict_budget_is_never_overspent_by_either_release(run: Run) -> None:
    """The small-budget tenant has no overdraft: both releases' reservations together keep
    its spend within the limit, while each release answers some of its turns and refuses
    others."""
    report = run.ledger[TIGHT]
    assert report.day.spent_micros <= report.day.limit_micros, report
    ended = Counter(
        (run.ran_by.get(r.turn_id), r.status) for r in run.results.values() if r.tenant_id == TIGHT
    )
    for release in ("previous", "current"):
        assert ended[release, Status.OK] > 0, ended
        assert ended[release, Status.DEGRADED] > 0, ended
