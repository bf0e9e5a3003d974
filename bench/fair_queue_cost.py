"""The fair queue's Redis cost per turn: release 0.1.0's scripts against this release's.

Both on one private redis-server, in turns, each replaying what a saturated fleet sends
the fair queue, one command at a time as producers and workers do; FIFO (the producer's
LPUSH) replayed alongside as the floor. A turn's message is the one the broker channel
queues for a one-line turn (a real one, made by `enqueue_turn`).

- 0.1.0: `enqueue.lua` per turn; a worker's turn concludes: `release.lua`, whose wake
  token a dispatcher takes (`BLPOP`) to run `dispatch.lua`, which finds room for one turn.
- this release: `enqueue.lua` per turn; a dispatcher's round (`dispatch.lua`) runs once
  `--per-round` turns of its process concluded: it gives their leases back and moves as
  many turns (leases a dead worker left are looked for once a second, not here). How
  many a round carries in a fleet is what `[fairness] gather_s` gathers: bench/fairness.py
  prints the scripts a turn (`fairness_dispatch_scripts_per_turn`: 1 + rounds per turn).
- FIFO: `LPUSH` per turn, the broker's queue.
- multi (enqueue only, for reference): a `MULTI` of four plain commands, what an enqueue
  with no script would cost on a layout 0.1.0 cannot read (a list per tenant): the most
  that giving up rolling upgrades of the fair queue could save at the producer.

First, what a round trip alone costs the server (a `PING`). Scenarios: `alone` (one
tenant), `many` (`--tenants` tenants, each visit one turn). The server's CPU (INFO
`used_cpu_sys` + `used_cpu_user`) per turn in each phase (`enqueue`; `dispatch`: the
workers' `RPOP`s and the rounds; 0.1.0's `release`: its scripts and wake-ups; FIFO's
`take`: the `RPOP`s), the median of `--repeat` runs; `_added` is the total less FIFO's.
Each phase's commands per turn (INFO commandstats) go to stderr.

    .venv/bin/python bench/fair_queue_cost.py                # ~1 min
    .venv/bin/python bench/fair_queue_cost.py --turns 1000 --repeat 9

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.fairkit

import redis
from node_capacity import CONFIG, private_redis, say
from redis.asyncio import Redis

from tests.fairkit import Release010
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.fairqueue import FairQueue, enqueue_sync
from worker.settings import load_settings
from worker.types import Message, TurnRequest

T = TypeVar("T")
NAMESPACE = "cost"
QUEUE = "cost-q"
DEPTH = 8


def figure(name: str, value: float, unit: str) -> None:
    print(f"FIGURE {name} {value:.4g} {unit}", flush=True)


def real_message(url: str, work: Path) -> str:
    """The message the broker channel queues for one turn, as stored in the fair queue."""
    config = work / "message.toml"
    text = CONFIG.format(redis_url=url, queue=QUEUE, sim="http://127.0.0.1:9")
    config.write_text(text.replace('namespace = "cap"', f'namespace = "{NAMESPACE}"'))
    app = make_app(load_settings(config, require_secrets=False))
    request = TurnRequest(
        tenant_id="t", messages=[Message(role="user", content="hello")], deadline_s=3600
    )
    enqueue_turn(request, app=app)
    client = redis.Redis.from_url(url)
    raw = next(iter(client.hvals(f"{{{NAMESPACE}}}:fair:msgs")))
    client.flushdb()
    client.close()
    return raw.decode().split("|", 4)[4]


class Meter:
    """The server's CPU and commands over each phase of a run (INFO before and after)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, dict[str, float]] = {}

    def _now(self) -> tuple[float, dict[str, int]]:
        cpu = self.client.info("cpu")
        stats = self.client.info("commandstats")
        calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
        return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), calls

    def phase(self, name: str, turns: int, work: Callable[[], object]) -> None:
        cpu0, calls0 = self._now()
        work()
        cpu1, calls1 = self._now()
        self.cpu[name] = (cpu1 - cpu0) / turns
        self.calls[name] = {
            k: (v - calls0.get(k, 0)) / turns
            for k, v in calls1.items()
            if k != "info" and v > calls0.get(k, 0)
        }


class Replay:
    """One implementation's fair queue (or none: FIFO) on the private server: the producers'
    enqueues, then the saturated fleet's cycle, each a phase of its own."""

    def __init__(self, url: str, mode: str, message: str) -> None:
        self.mode = mode
        self.sync = redis.Redis.from_url(url)
        self.loop = asyncio.new_event_loop()
        self.fair = FairQueue(Redis.from_url(url), namespace=NAMESPACE, queue=QUEUE)
        self.old = Release010(self.fair)
        self.message = message
        self.meter = Meter(self.sync)

    def close(self) -> None:
        self.loop.run_until_complete(self.fair.redis.aclose())
        self.loop.close()
        self.sync.close()

    def _await(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    def enqueue(self, tenant: str, turn: str) -> None:
        message = f"{self.message}|{tenant}|{turn}"
        if self.mode == "fifo":
            self.sync.lpush(QUEUE, message)
        elif self.mode == "multi":
            # No script: a list per tenant, and what a dispatcher would need to find it.
            pipe = self.sync.pipeline(transaction=True)
            pipe.hsetnx(f"{{{NAMESPACE}}}:ref:index", turn, tenant)
            pipe.lpush(f"{{{NAMESPACE}}}:ref:q:{tenant}", message)
            pipe.hincrby(f"{{{NAMESPACE}}}:ref:queued", tenant, 1)
            pipe.zadd(f"{{{NAMESPACE}}}:ref:ready", {tenant: 0}, nx=True)
            pipe.execute()
        elif self.mode == "old":
            self.old.enqueue(self.sync, tenant, turn, deadline_ms=3_600_000, message=message)
        else:
            enqueue_sync(
                self.sync,
                NAMESPACE,
                tenant=tenant,
                turn_id=turn,
                deadline_ms=3_600_000,
                input_tokens=10,
                message=message,
            )

    def take(self) -> tuple[str, str]:
        raw = self.sync.rpop(QUEUE)
        if raw is None:
            raise SystemExit("the broker's queue ran dry: a round moved nothing")
        tenant, turn = raw.decode().rsplit("|", 2)[1:]
        return tenant, turn

    def run(self, tenants: Sequence[str], per_tenant: int, per_round: int) -> None:
        turns = len(tenants) * per_tenant
        ids = [(t, f"{t}-{i}") for i in range(per_tenant) for t in tenants]
        self.meter.phase("enqueue", turns, lambda: [self.enqueue(*x) for x in ids])
        if self.mode == "fifo":
            self.meter.phase("take", turns, lambda: [self.take() for _ in ids])
        if self.mode in ("fifo", "multi"):
            return
        self._await(self.fair.dispatch(most=32, depth=DEPTH))  # the first round fills up
        if self.mode == "old":
            concluded: list[tuple[str, str]] = []
            self.meter.phase("dispatch", turns, lambda: self._old_rounds(turns, concluded))
            self.meter.phase("release", turns, lambda: self._old_releases(concluded))
        else:
            self.meter.phase("dispatch", turns, lambda: self._rounds(turns, per_round))

    def _old_rounds(self, turns: int, concluded: list[tuple[str, str]]) -> None:
        """A worker takes a turn; its lease given back wakes a round with room for one.
        (The leases are given back in a phase of their own: without limits, a lease does
        not change what a round moves.)"""
        for _ in range(turns):
            concluded.append(self.take())
            self._await(self.old.dispatch(most=32, depth=DEPTH))

    def _old_releases(self, concluded: list[tuple[str, str]]) -> None:
        for tenant, turn in concluded:
            self._await(self.old.release(tenant, turn))
            self._await(self.fair.wait(0.01))  # the wake token, taken by a dispatcher

    def _rounds(self, turns: int, per_round: int) -> None:
        """A round each `per_round` turns taken: it gives their leases back and refills."""
        concluded: list[tuple[str, str]] = []
        for done in range(1, turns + 1):
            concluded.append(self.take())
            if len(concluded) == per_round or done == turns:
                round_ = self.fair.dispatch(most=32, depth=DEPTH, released=concluded, expire=False)
                self._await(round_)
                concluded = []


def main(args: argparse.Namespace) -> None:
    scenarios = {
        "alone": (["noisy"], args.turns),
        "many": ([f"t{i:03d}" for i in range(args.tenants)], args.turns // args.tenants),
    }
    modes = ["fifo", "old", *(f"new{k}" for k in args.per_round), "multi"]
    cpu: dict[tuple[str, str], list[dict[str, float]]] = {}
    calls: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fair-cost-")))
        url, _ = private_redis(stack, work)
        message = real_message(url, work)
        say(f"a turn's message: {len(message)} bytes")
        client = redis.Redis.from_url(url)
        meter = Meter(client)
        meter.phase("round_trip", 2000, lambda: [client.ping() for _ in range(2000)])
        figure("fair_cost_round_trip", meter.cpu["round_trip"] * 1e6, "us")
        for attempt in range(args.repeat):
            for scenario, (tenants, per_tenant) in scenarios.items():
                for mode in modes:
                    replay = Replay(url, mode, message)
                    per_round = int(mode[3:]) if mode.startswith("new") else 1
                    replay.run(tenants, per_tenant, per_round)
                    replay.close()
                    client.flushdb()  # the private server only
                    cpu.setdefault((scenario, mode), []).append(replay.meter.cpu)
                    calls[scenario, mode] = replay.meter.calls
            say(f"run {attempt + 1} of {args.repeat} done")
        client.close()
    for scenario in scenarios:
        fifo = statistics.median(sum(r.values()) for r in cpu[scenario, "fifo"])
        for mode in modes:
            runs = cpu[scenario, mode]
            for phase in runs[0]:
                value = statistics.median(r[phase] for r in runs)
                figure(f"fair_cost_{scenario}_{mode}_{phase}", value * 1e6, "us")
            total = statistics.median(sum(r.values()) for r in runs)
            figure(f"fair_cost_{scenario}_{mode}_per_turn", total * 1e6, "us")
            if mode not in ("fifo", "multi"):
                figure(f"fair_cost_{scenario}_{mode}_added", (total - fifo) * 1e6, "us")
            for phase, counted in calls[scenario, mode].items():
                shown = ", ".join(
                    f"{n} {c:.2f}" for n, c in sorted(counted.items(), key=lambda kv: -kv[1])
                )
                say(f"{scenario} {mode} {phase}, calls per turn: {shown}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=1000)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--per-round", type=int, nargs="+", default=[1, 2, 4])
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
