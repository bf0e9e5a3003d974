"""Budgets: a $0.03/day tenant against a real fleet, what it spends and what it is charged.

One rig for every scenario (bench/chaos.py's `Rig`): a private `redis-server`, `relevo
simulate` (the primary answers after `--latency-s`, 0.5 s, so turns are in flight
together) and two `relevo worker` nodes of 2 processes x 50 threads each, configured from
examples/simulated.toml with `turn_deadline_s = 20`, `[worker] visibility_timeout_s = 30`,
`sweep_interval_s = 5`, `[budgets] hold_ttl_s = 25` (a dead worker's turn is redelivered,
a turn the broker lost re-sent, and its holds reclaimed
within the run) and `evidence_refresh_s = 1`. Every turn is examples/turn.json with
`max_tokens = 256` and a fresh turn id: the simulator answers 8 tokens, so one attempt's
worst case is about 16 times its typical cost.

Before the first scenario the fleet's evidence is warmed: 60 turns of tenant `warm` (the
default budget, $1,000/day), then 40 more once `evidence_refresh_s` has passed, so that
every worker process has read the 99th percentile of its model's output tokens (the
evidence is per model and fleet-wide; it stays for every later run). Each run then gets a
fresh tenant (`acme-<run>`, limits set with `budgets.Ledger.set_limits`), so nothing it
spends was spent before. The size of one attempt's reservation is read from the first
hold that shows in Redis (the bench polls the tenant's held hash every 10 ms): the hold
stores the expected micros and the worst case exactly as `Chain._charge` computed them
(the input estimate padded by `input_margin_pct` at the dearest input price, plus the
evidence's 99th percentile of output tokens, or every `max_tokens` for the worst case).
The warm-up's second wave gives the worst case that the overdraft runs are configured
with; each run reports its own first hold.

1. at_once_strict, at_once_overdraft: 300 turns (`--quick` 150) enqueued as fast as
   `enqueue_turn` goes, on a $0.03/day tenant with overdraft 0, then with an overdraft of
   `--overdraft-worst-cases` (2) worst cases.
2. paced_strict, paced_overdraft: the same, at `--rate` (10) turns/s.
   Figures: turns answered (a model answered: status ok), degraded by reason, the spend at
   the first degradation as a % of the limit, the final spend, the overspend beyond the
   limit (and whether it is within the overdraft), the provider calls the simulator
   counted beside the turns answered. The time order comes from the workers' JSON logs:
   each `turn.completed` line has its timestamp and cost, and the spend at the first
   degradation is the cost of the turns logged before the first degraded one (a turn
   settles just before it logs, so this may miss the few settled in between).
3. worker_kill: 1,000 turns (`--quick` 300) of a tenant with $1,000/day at `--kill-rate`
   (50) turns/s; a third of the way in, one node's whole process group is killed
   (SIGKILL), and a replacement node started. Its turns are redelivered after the
   visibility timeout and run again with new charge ids; its holds are reclaimed once
   `hold_ttl_s` has passed (the bench waits for it, then `Ledger.report` runs the
   reclaim). Figures: provider calls, turns answered, the ledger's spend, the sum of every
   provider call's cost (every turn is the same, so every call costs the same: one
   answered turn's `cost_micros` x the calls; the bench checks that all answered turns
   cost the same), the reclaimed charges and their micros, and spend - that sum. A
   reclaimed call is charged at its reservation, which is larger than what the call
   cost (the chain's input estimate counts the tool's schema and a few tokens a message,
   which the simulator does not bill, and it is padded by 20 % and priced as a cache
   write), so the difference should be small and positive: that padding, once per
   reclaimed call.
4. delivered_twice: 20 turns, each enqueued twice with the same turn id. Figures: provider
   calls, charges (the ledger's spend / one turn's cost) and whether they match.

    .venv/bin/python bench/tenant_budget.py            # about 4 minutes
    .venv/bin/python bench/tenant_budget.py --quick    # about 3.5 minutes: 150 and 300 turns
    .venv/bin/python bench/tenant_budget.py --scenarios at_once,twice --keep

`--quick` saves less than its turn counts suggest: most of a run is fixed waits (turns
waiting on holds until their 20 s deadline, the 30 s visibility timeout, the 25 s hold
TTL, and the 60 s drain when the broker lost a turn).

Last, `worker_log_lines_merged`: lines of the workers' logs that hold two JSON objects
(a node's processes share its stderr; the bench's own reader finds both objects).

Output: `FIGURE <run>_<name> <value> <unit>` lines on stdout; progress on stderr. Only
127.0.0.1 is spoken to; the simulated providers need no API key, and none is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos
import kit
from redis.asyncio import Redis

import budgets
from budgets.keys import BudgetKeys
from worker.fleet import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.settings import Settings, load_settings
from worker.types import Status, TurnResult

SCENARIOS = ("at_once", "paced", "kill", "twice")
LIMIT_MICROS = 30_000  # $0.03 a day
MONTHLY_MICROS = 30 * LIMIT_MICROS
BIG_MICROS = 1_000_000_000  # $1,000: scenarios 3 and 4 are about charges, not limits
MAX_TOKENS = 256
PROCESSES = 2  # per node
HOLD_TTL_S = 25
SWEEP_INTERVAL_S = 5  # a turn the broker lost is re-sent within the drain
TURN_DEADLINE_S = 20  # chaos.py's, under its visibility timeout of 30 s
DRAIN_S = 60.0  # the kill's redelivered turns end by kill + visibility timeout + deadline
WARM_TURNS = (60, 40)
TENANT_WARM = "warm"


def _config(rig: chaos.Rig) -> str:
    """chaos.py's configuration, with the budgets' settings of this bench."""
    text = chaos._config(rig.sim_url, rig.redis_port, rig.namespace)
    for old, new in (
        (
            "\nprocesses = 1\n",
            f"\nprocesses = {PROCESSES}\nsweep_interval_s = {SWEEP_INTERVAL_S}\n",
        ),
        (
            "\n[budgets]\n",
            f"\n[budgets]\nhold_ttl_s = {HOLD_TTL_S}\nevidence_refresh_s = 1\n",
        ),
    ):
        if old not in text:
            raise SystemExit(f"chaos.py's configuration no longer has {old.strip()!r}")
        text = text.replace(old, new)
    if f"\nturn_deadline_s = {TURN_DEADLINE_S}\n" not in text:
        raise SystemExit(
            f"chaos.py's configuration no longer sets turn_deadline_s {TURN_DEADLINE_S}"
        )
    return text


class Rig(chaos.Rig):
    """chaos.py's rig (redis-server, simulator, two nodes) with this bench's settings."""

    def __init__(self, root: Path, latency_s: float) -> None:
        super().__init__("budgets", root, latency_s)
        self.namespace = f"bench_budgets_{os.getpid()}"
        self.config.write_text(_config(self))
        self.settings: Settings = load_settings(self.config)

    def ledger(self, op: Any) -> Any:
        """`op(ledger)` on a fresh client of this rig's Redis."""

        async def go(client: Redis, namespace: str) -> Any:
            return await op(budgets.Ledger(client, namespace=namespace))

        return self.store(go)

    def report(self, tenant: str) -> budgets.BudgetReport:
        return self.ledger(lambda ledger: ledger.report(tenant))

    def settled(self, tenant: str, timeout_s: float = 10.0) -> budgets.BudgetReport:
        """The tenant's report once nothing is held, or after `timeout_s`."""
        until = time.monotonic() + timeout_s
        while (report := self.report(tenant)).reserved_micros and time.monotonic() < until:
            time.sleep(0.5)
        return report

    def p99_tokens(self, model: str) -> int | None:
        """The output tokens an attempt of `model` reserves now (None: `max_tokens`)."""
        bud = self.settings.budgets
        assert bud.reserve_percentile is not None

        async def read(client: Redis, namespace: str) -> int | None:
            evidence = budgets.OutputEvidence(
                client, namespace=namespace, samples=bud.evidence_samples
            )
            found = await evidence.percentiles(
                [model], bud.reserve_percentile, min_samples=bud.evidence_min_samples
            )
            return found[model]

        return self.store(read)

    def turns_logged(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's `turn.completed` events, oldest first."""
        lines = [
            e
            for node in self.nodes
            for e in log_objects(node.log)[0]
            if e.get("event") == "turn.completed" and e.get("tenant_id") == tenant
        ]
        return sorted(lines, key=chaos._when)

    def merged_log_lines(self) -> int:
        """Lines of the workers' logs that hold more than one JSON object."""
        return sum(log_objects(node.log)[1] for node in self.nodes)


def log_objects(log: Path) -> tuple[list[dict[str, Any]], int]:
    """Every JSON object in a worker's log, and how many lines held more than one.

    A node's processes share its stderr, and two of them sometimes write their lines
    into one (`...}{...`, with an empty line further on), which `chaos.log_events` (one
    object a line) would drop.
    """
    decoder, found, merged = json.JSONDecoder(), [], 0
    for line in log.read_text(errors="replace").splitlines():
        at, objects = 0, 0
        while (start := line.find("{", at)) >= 0:
            try:
                event, at = decoder.raw_decode(line, start)
            except ValueError:
                break
            if isinstance(event, dict):
                found.append(event)
                objects += 1
        merged += objects > 1
    return found, merged


def payload(tenant: str, turn_id: str) -> dict[str, Any]:
    return {**chaos.TURN, "tenant_id": tenant, "max_tokens": MAX_TOKENS, "turn_id": turn_id}


@dataclass(frozen=True)
class Hold:
    """One attempt's reservation as `reserve.lua` stored it: expected and worst micros."""

    expected_micros: int
    worst_micros: int


class FirstHold(threading.Thread):
    """Polls a tenant's held hash (every 10 ms) until a hold shows: the first one seen."""

    def __init__(self, rig: Rig, tenant: str) -> None:
        super().__init__(name="budgets-first-hold", daemon=True)
        self.client = rig.sync_redis()
        self.key = BudgetKeys(rig.namespace).held(tenant)
        self.hold: Hold | None = None
        self.done = threading.Event()

    def __enter__(self) -> FirstHold:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join()
        self.client.close()

    def run(self) -> None:
        while self.hold is None and not self.done.wait(0.01):
            # "micros|fallback|worst|provider" per charge; "=..." fields are running totals.
            for name, value in self.client.hgetall(self.key).items():
                if not name.startswith(b"="):
                    micros, _, worst, _ = value.decode().split("|", 3)
                    self.hold = Hold(int(micros), int(worst))
                    break

    def found(self) -> Hold:
        if self.hold is None:
            raise SystemExit(f"no hold seen in {self.key}")
        return self.hold


class Sender(threading.Thread):
    """Enqueues `payloads` in order, `rate` per second (None: as fast as it can)."""

    def __init__(self, settings: Settings, payloads: Sequence[dict[str, Any]], rate: float | None):
        super().__init__(name="budgets-sender", daemon=True)
        self.app = make_app(settings)
        self.limits = settings.limits
        self.payloads = payloads
        self.rate = rate
        self.sent: list[str] = []
        self.failed: list[str] = []
        self.started_at = math.nan
        self.ended_at = math.nan

    def run(self) -> None:
        self.started_at = time.time()
        t0 = time.monotonic()
        for i, turn in enumerate(self.payloads):
            if self.rate is not None:
                time.sleep(max(0.0, t0 + i / self.rate - time.monotonic()))
            try:
                enqueue_turn(turn, app=self.app, limits=self.limits)
            except Exception as exc:
                kit.say(f"#   enqueue failed: {type(exc).__name__}")
                self.failed.append(turn["turn_id"])
            else:
                self.sent.append(turn["turn_id"])
        self.ended_at = time.time()
        with contextlib.suppress(Exception):
            self.app.close()


def send(rig: Rig, payloads: Sequence[dict[str, Any]], rate: float | None) -> Sender:
    sender = Sender(rig.settings, payloads, rate)
    sender.start()
    sender.join()
    return sender


def fresh(tenant: str, n: int) -> list[dict[str, Any]]:
    return [payload(tenant, uuid.uuid4().hex) for _ in range(n)]


def drained(rig: Rig, turn_ids: Sequence[str]) -> dict[str, TurnResult]:
    results, missing = chaos.drain(rig, sorted(set(turn_ids)), DRAIN_S)
    if missing:
        lost = sorted(set(turn_ids) - set(results))
        kit.say(f"#   {missing} turns without a result after {DRAIN_S:g} s: {', '.join(lost[:5])}")
    return results


def warm(rig: Rig) -> Hold:
    """Evidence for the primary, read by every worker process (see the docstring); the
    first hold of the second wave."""
    for i, n in enumerate(WARM_TURNS):
        if i:
            time.sleep(rig.settings.budgets.evidence_refresh_s + 0.5)
        with FirstHold(rig, TENANT_WARM) as first:
            drained(rig, send(rig, fresh(TENANT_WARM, n), None).sent)
    p99 = rig.p99_tokens(rig.settings.chain.models[0])
    kit.figure("evidence_p99_output_tokens", math.nan if p99 is None else p99, "tokens")
    hold = first.found()
    kit.say(f"# warmed: p99 {p99} output tokens; a hold of {hold}")
    return hold


@dataclass(frozen=True)
class Run:
    """One run, whose figures are printed `<name>_<figure>`."""

    name: str

    def fig(self, what: str, value: float, unit: str) -> None:
        kit.figure(f"{self.name}_{what}", value, unit)


def one_cost(results: dict[str, TurnResult], run: Run) -> int:
    """The cost of one answered turn; every answered turn should cost the same."""
    costs = Counter(r.cost_micros for r in results.values() if r.status is Status.OK)
    run.fig("distinct_costs_of_answered_turns", len(costs), "costs")
    return costs.most_common(1)[0][0] if costs else 0


def outcome_figures(run: Run, sent: Sequence[str], results: dict[str, TurnResult]) -> int:
    """Answered, degraded by reason, failed, missing; returns the turns answered."""
    statuses = Counter(r.status for r in results.values())
    reasons = Counter(r.reason for r in results.values() if r.status is Status.DEGRADED)
    run.fig("answered", statuses[Status.OK], "turns")
    run.fig("degraded", statuses[Status.DEGRADED], "turns")
    for reason in sorted({"tenant_budget_exhausted", "tenant_budget_held", *map(str, reasons)}):
        run.fig(f"degraded_{reason}", reasons[reason], "turns")
    run.fig("failed", statuses[Status.FAILED] + statuses[Status.REJECTED], "turns")
    run.fig("missing", len(set(sent)) - len(results), "turns")
    kit.say(f"#   statuses {dict(Counter(str(s) for s in statuses.elements()))}")
    return statuses[Status.OK]


def first_degradation(run: Run, lines: Sequence[dict[str, Any]], started_at: float) -> None:
    """The spend logged before the first degraded turn was logged."""
    first = next((i for i, e in enumerate(lines) if e.get("status") == Status.DEGRADED), None)
    if first is None:
        run.fig("spend_at_first_degradation_pct", math.nan, "%")
        return
    before = sum(int(e.get("cost_micros") or 0) for e in lines[:first])
    run.fig("spend_at_first_degradation", before, "micro-usd")
    run.fig("spend_at_first_degradation_pct", 100 * before / LIMIT_MICROS, "%")
    run.fig("first_degradation_s", chaos._when(lines[first]) - started_at, "s")
    kit.say(f"#   first degradation: {lines[first].get('reason')}, the {first + 1}th turn logged")


def budget_run(rig: Rig, name: str, n: int, rate: float | None, overdraft: int) -> None:
    """Scenarios 1 and 2: `n` turns on a $0.03/day tenant with `overdraft`."""
    run, tenant = Run(name), f"acme-{name.replace('_', '-')}"
    started = time.monotonic()
    rig.ledger(
        lambda ledger: ledger.set_limits(tenant, LIMIT_MICROS, MONTHLY_MICROS, None, overdraft)
    )
    calls_before = rig.sim.calls()
    shown = "as fast as possible" if rate is None else f"at {rate:g}/s"
    kit.say(f"# {name}: {n} turns {shown}, overdraft {overdraft} micro-usd")
    with FirstHold(rig, tenant) as first:
        sender = send(rig, fresh(tenant, n), rate)
        results = drained(rig, sender.sent)
    size = first.found()
    report = rig.settled(tenant)
    calls = rig.sim.calls() - calls_before
    spent = report.day.spent_micros

    run.fig("turns", n, "turns")
    run.fig("enqueue_s", sender.ended_at - sender.started_at, "s")
    run.fig("limit", LIMIT_MICROS, "micro-usd")
    run.fig("overdraft", overdraft, "micro-usd")
    run.fig("expected_per_attempt", size.expected_micros, "micro-usd")
    run.fig("worst_per_attempt", size.worst_micros, "micro-usd")
    run.fig("strict_ceiling_pct", 100 * (LIMIT_MICROS - size.worst_micros) / LIMIT_MICROS, "%")
    answered = outcome_figures(run, sender.sent, results)
    first_degradation(run, rig.turns_logged(tenant), sender.started_at)
    run.fig("spend", spent, "micro-usd")
    run.fig("spend_pct", 100 * spent / LIMIT_MICROS, "%")
    overspend = max(0, spent - LIMIT_MICROS)
    run.fig("overspend", overspend, "micro-usd")
    run.fig("overspend_within_overdraft", int(overspend <= overdraft), "bool")
    run.fig("stored_cost", sum(r.cost_micros for r in results.values()), "micro-usd")
    run.fig("held_at_end", report.reserved_micros, "micro-usd")
    run.fig("provider_calls", calls, "calls")
    run.fig("provider_calls_minus_answered", calls - answered, "calls")
    kit.say(f"#   {name}: {time.monotonic() - started:.0f} s")


def kill_node(rig: Rig) -> float:
    """SIGKILL the first node's whole process group, start a replacement; when it died."""
    node = rig.nodes[0]
    os.killpg(node.proc.pid, signal.SIGKILL)
    killed_at = time.time()
    node.proc.wait(timeout=10)
    kit.say(f"#   node {node.name} killed (process group {node.proc.pid}); starting a replacement")
    rig.nodes.append(rig._start_node("c"))
    return killed_at


def kill_run(rig: Rig, n: int, rate: float) -> None:
    """Scenario 3: one node's process group SIGKILLed while turns are in flight."""
    run, tenant = Run("worker_kill"), "acme-worker-kill"
    started = time.monotonic()
    rig.ledger(lambda ledger: ledger.set_limits(tenant, BIG_MICROS, BIG_MICROS))
    calls_before = rig.sim.calls()
    kit.say(f"# worker_kill: {n} turns at {rate:g}/s, one node killed after {n // 3}")
    sender = Sender(rig.settings, fresh(tenant, n), rate)
    sender.start()
    while len(sender.sent) < n // 3 and sender.is_alive():
        time.sleep(0.05)
    run.fig("provider_calls_at_kill", rig.sim.calls() - calls_before, "calls")
    killed_at = kill_node(rig)
    sender.join()
    results = drained(rig, sender.sent)
    # The dead node's holds expire hold_ttl_s after they were made; the report reclaims them.
    time.sleep(max(0.0, killed_at + HOLD_TTL_S + 1 - time.time()))
    report = rig.settled(tenant)
    calls = rig.sim.calls() - calls_before
    cost = one_cost(results, run)
    call_costs = cost * calls
    spent = report.day.spent_micros
    reclaimed, reclaimed_micros = report.day.reclaimed_charges, report.day.reclaimed_micros
    runs = Counter(str(e.get("turn_id")) for e in rig.turns_logged(tenant))

    run.fig("turns", n, "turns")
    answered = outcome_figures(run, sender.sent, results)
    run.fig("provider_calls", calls, "calls")
    run.fig("provider_calls_minus_answered", calls - answered, "calls")
    run.fig("turns_logged_twice", sum(1 for c in runs.values() if c > 1), "turns")
    run.fig("cost_per_call", cost, "micro-usd")
    run.fig("spend", spent, "micro-usd")
    run.fig("sum_of_call_costs", call_costs, "micro-usd")
    run.fig("spend_minus_call_costs", spent - call_costs, "micro-usd")
    run.fig("reclaimed_charges", reclaimed, "charges")
    run.fig("reclaimed_micros", reclaimed_micros, "micro-usd")
    if reclaimed:
        run.fig("reclaimed_per_charge", reclaimed_micros / reclaimed, "micro-usd")
        extra = (spent - call_costs) / reclaimed
        run.fig("spend_minus_call_costs_per_reclaimed", extra, "micro-usd")
    run.fig("held_at_end", report.reserved_micros, "micro-usd")
    replacement = rig.nodes[-1]
    run.fig("replacement_alive", int(replacement.proc.poll() is None), "bool")
    by_replacement = sum(
        1
        for e in log_objects(replacement.log)[0]
        if e.get("event") == "turn.completed" and e.get("tenant_id") == tenant
    )
    run.fig("replacement_turns", by_replacement, "turns")
    kit.say(f"#   worker_kill: {time.monotonic() - started:.0f} s")


def twice_run(rig: Rig, n: int) -> None:
    """Scenario 4: each turn enqueued twice, with the same turn id."""
    run, tenant = Run("delivered_twice"), "acme-delivered-twice"
    rig.ledger(lambda ledger: ledger.set_limits(tenant, BIG_MICROS, BIG_MICROS))
    calls_before = rig.sim.calls()
    kit.say(f"# delivered_twice: {n} turns, each enqueued twice")
    turns = [p for p in fresh(tenant, n) for p in (p, p)]
    sender = send(rig, turns, None)
    results = drained(rig, sender.sent)
    report = rig.settled(tenant)
    calls = rig.sim.calls() - calls_before
    cost = one_cost(results, run)
    charges = report.day.spent_micros / cost if cost else math.nan
    lines = rig.turns_logged(tenant)
    run.fig("turns", n, "turns")
    run.fig("deliveries", len(sender.sent), "deliveries")
    run.fig("answered", sum(1 for r in results.values() if r.status is Status.OK), "turns")
    run.fig("turns_run_logged", len(lines), "runs")
    run.fig("provider_calls", calls, "calls")
    run.fig("spend", report.day.spent_micros, "micro-usd")
    run.fig("cost_per_turn", cost, "micro-usd")
    run.fig("charges", charges, "charges")
    run.fig("charged_once_per_call", int(charges == calls), "bool")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="150 turns per budget run, 300 killed")
    parser.add_argument("--scenarios", help=f"comma-separated, of {','.join(SCENARIOS)} (all)")
    parser.add_argument("--turns", type=int, help="turns per budget run (300; quick 150)")
    parser.add_argument("--kill-turns", type=int, help="worker_kill's turns (1000; quick 300)")
    parser.add_argument("--rate", type=float, default=10.0, help="paced: turns per second")
    parser.add_argument("--kill-rate", type=float, default=50.0, help="worker_kill: turns/s")
    parser.add_argument("--latency-s", type=float, default=0.5, help="the primary's latency")
    parser.add_argument(
        "--overdraft-worst-cases",
        type=int,
        default=2,
        metavar="N",
        help="the overdraft runs' overdraft, in worst cases of one attempt (2)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs and configurations")
    args = parser.parse_args(argv)
    if args.turns is None:
        args.turns = 150 if args.quick else 300
    if args.kill_turns is None:
        args.kill_turns = 300 if args.quick else 1000
    args.scenarios = args.scenarios.split(",") if args.scenarios else list(SCENARIOS)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kit.raise_fd_limit()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.keep:
            root = Path(tempfile.mkdtemp(prefix="relevo-budgets-"))
            stack.callback(kit.say, f"# logs and configurations kept in {root}")
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="relevo-budgets-")))
        kit.say("# starting the rig")
        rig = stack.enter_context(Rig(root, args.latency_s))
        worst = warm(rig).worst_micros
        for scenario, rate in (("at_once", None), ("paced", args.rate)):
            if scenario in args.scenarios:
                budget_run(rig, f"{scenario}_strict", args.turns, rate, 0)
                overdraft = args.overdraft_worst_cases * worst
                budget_run(rig, f"{scenario}_overdraft", args.turns, rate, overdraft)
        if "kill" in args.scenarios:
            kill_run(rig, args.kill_turns, args.kill_rate)
        if "twice" in args.scenarios:
            twice_run(rig, 20)
        kit.figure("worker_log_lines_merged", rig.merged_log_lines(), "lines")
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
