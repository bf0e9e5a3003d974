"""Redis server CPU per turn: the guard alone, and the whole worker path.

Measured from outside, on a private redis-server nothing else speaks to: the deltas of
INFO's `used_cpu_sys` + `used_cpu_user` and of `commandstats` over a run, divided by the
turns the run completed. One Redis core serves 1 s / (CPU per turn) turns per second:
the fleet's ceiling, printed beside each figure.

- guard: the real chain with its Redis guard in this process (breakers, budgets, kill
  switch, cooldowns; no Celery), `--turns` turns at `--in-flight`; healthy, then with
  the primary answering 503 (each turn falls back once; breakers kept closed).
- guard on a cluster (`--cluster`): the same turns with the shared state on a local Redis
  Cluster of three primaries (tests/clusterkit.py): CPU and commands summed over the
  nodes, and the packets the client sent per turn (a pipeline is one packet per node,
  sent concurrently) beside the round trips it waited for.
- scripts (`--only scripts`): each of a healthy turn's four scripts alone (check, record,
  reserve, settle; the scopes, pairs and accounts of the 3-model chain), 3,000 calls
  pipelined 100 at a time on fresh charge ids: the server's cost of the scripts without
  the chain's traffic, steadier than the turns' on a busy machine.
- `--attribute`: the guard's turns and the scripts with spend attribution by two metadata
  keys (`[budgets] attribute_by = ["agent", "user"]`; 5 agents, 500 users, past the bound
  of 100 a period), for a side-by-side with the same run without it.
- worker: real `celery worker` processes (bench/node_capacity.py's rig) fed K turns in
  flight: the broker's, the result backend's, the turn store's and the guard's commands
  together, healthy and falling back, plus Celery's floor (a task that only sleeps).

    .venv/bin/python bench/store_cost.py                 # ~2 min
    .venv/bin/python bench/store_cost.py --only guard    # ~20 s
    .venv/bin/python bench/store_cost.py --only guard --cluster
    .venv/bin/python bench/store_cost.py --only scripts --attribute

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress and the top commands on
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.clusterkit

import kit
import node_capacity as cap
import redis.asyncio as aioredis

from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault
from worker.turn.chain import Chain

NEVER_TRIP = {"min_calls_in_window": 10**6, "consecutive_failures_threshold": 10**6}
# Appended to bench/node_capacity.py's worker config: falling back never opens a breaker.
WORKER_BREAKERS = """
[breakers]
min_calls_in_window = 1000000
consecutive_failures_threshold = 1000000
"""


async def snapshot(admins: list[aioredis.Redis]) -> tuple[float, dict[str, int]]:
    """(CPU seconds the servers have used, calls per command), INFO's own left out."""
    seconds, calls = 0.0, {}
    for admin in admins:
        cpu: dict[str, Any] = await admin.info("cpu")
        stats: dict[str, Any] = await admin.info("commandstats")
        seconds += float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
        for k, v in stats.items():
            name = k.removeprefix("cmdstat_")
            calls[name] = calls.get(name, 0) + int(v["calls"])
    calls.pop("info", None)
    return seconds, calls


class Packets:
    """Counts what the client sends: one packet per node per pipeline (bench-only)."""

    sent = 0

    def __enter__(self) -> Packets:
        from redis.asyncio.connection import AbstractConnection

        self._cls, self._real = AbstractConnection, AbstractConnection.send_packed_command

        async def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            Packets.sent += 1
            await self._real(conn, command, check_health)

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        self._cls.send_packed_command = self._real  # type: ignore[method-assign]


def cost(
    before: tuple[float, dict[str, int]], after: tuple[float, dict[str, int]], turns: int
) -> tuple[float, float, dict[str, float]]:
    """(server CPU µs per turn, commands per turn, calls per turn by command)."""
    n = max(1, turns)
    per = {name: (calls - before[1].get(name, 0)) / n for name, calls in after[1].items()}
    per = {name: v for name, v in per.items() if v > 0}
    return (after[0] - before[0]) * 1e6 / n, sum(per.values()), per


def publish(name: str, measured: list[tuple[float, float, dict[str, float]]]) -> None:
    us = kit.median([m[0] for m in measured])
    commands = kit.median([m[1] for m in measured])
    kit.say(f"# {name}: {[round(m[0], 1) for m in measured]} us/turn")
    top = sorted(measured[-1][2].items(), key=lambda kv: -kv[1])[:8]
    kit.say("#   " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    kit.figure(f"store_cost_{name}_redis_cpu", us, "us/turn")
    kit.figure(f"store_cost_{name}_commands", commands, "commands/turn")
    kit.figure(f"store_cost_{name}_ceiling", 1e6 / us if us > 0 else float("inf"), "turns/s/core")


# --- the guard alone ------------------------------------------------------------------------


async def guard_runs(args: argparse.Namespace, rig: kit.Rig) -> None:
    with ExitStack() as stack:
        if not args.cluster:
            await guard_turns(args, rig, rig.redis_url, [rig.redis_url], "guard")
            return
        from tests.clusterkit import Cluster

        cluster = Cluster(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        stack.callback(cluster.stop)
        cluster.start()
        for proc in cluster.processes:
            kit.pin(proc.pid, kit.cores()[1])
        nodes = [f"redis://127.0.0.1:{port}/0" for port in cluster.ports]
        await guard_turns(args, rig, cluster.url, nodes, "guard_cluster")


async def guard_turns(
    args: argparse.Namespace, rig: kit.Rig, shared_url: str, nodes: list[str], label: str
) -> None:
    settings = kit.relevo_settings(
        rig.sim_url, rig.redis_url, namespace=f"sc{time.time_ns()}", breakers=NEVER_TRIP
    )
    shared = settings.redis.model_copy(update={"shared_url": shared_url})
    settings = settings.model_copy(update={"redis": shared})
    if args.attribute:
        plan = settings.budgets.model_copy(update={"attribute_by": ATTRIBUTE_BY})
        settings = settings.model_copy(update={"budgets": plan})
        label += "_attributed"
    admins = [aioredis.Redis.from_url(url) for url in nodes]
    guard = open_guard(settings)
    packets = Packets()
    async with make_client() as http:
        chain = Chain.from_settings(settings, http, guard=guard)

        async def turn(i: int, step: int) -> None:
            request = kit.turn_request(i)
            if args.attribute:
                request = request.model_copy(update={"metadata": metadata(i)})
            result = await chain.run(request)
            if result.status != "ok" or result.step != step:
                raise RuntimeError(f"turn {result.status} at step {result.step}, not {step}")

        for name, faults, step in (("healthy", (), 0), ("fallback", (Fault(status=503),), 1)):
            rig.sim.set_faults(kit.PRIMARY, *faults)
            await drive(lambda i, s=step: turn(i, s), 200, args.in_flight)  # warm up
            measured = []
            for _ in range(args.repeats):
                before = await snapshot(admins)
                await drive(lambda i, s=step: turn(i, s), args.turns, args.in_flight)
                measured.append(cost(before, await snapshot(admins), args.turns))
            publish(f"{label}_{name}", measured)
            with packets:
                sent = Packets.sent
                await drive(lambda i, s=step: turn(i, s), 200, 1)
                per_turn = (Packets.sent - sent) / 200
                kit.figure(f"store_cost_{label}_{name}_packets_alone", per_turn, "packets/turn")
        rig.sim.set_faults(kit.PRIMARY)
    await guard.aclose()
    for admin in admins:
        await admin.aclose()


async def drive(turn: Callable[[int], Awaitable[None]], turns: int, in_flight: int) -> None:
    numbers = iter(range(turns))

    async def lane() -> None:
        for i in numbers:
            await turn(i)

    await asyncio.gather(*(lane() for _ in range(in_flight)))


# --- each script alone -----------------------------------------------------------------------

ATTRIBUTE_BY = ("agent", "user")


def metadata(i: int) -> dict[str, str]:
    return {"agent": f"agent-{i % 5}", "user": f"user-{i % 500}"}


SCOPES = [f"{kind}:{name}" for name in ("alpha", "beta", "gamma") for kind in ("model", "vendor")]
PAIRS = [("oa", "alpha"), ("an", "beta"), ("gg", "gamma")]
CALLS, BATCH = 3000, 100


async def script_runs(args: argparse.Namespace, rig: kit.Rig) -> None:
    import breakers
    import budgets

    admin = aioredis.Redis.from_url(rig.redis_url)
    namespace = f"sc{time.time_ns()}"
    fleet = breakers.FleetBreakers(admin, namespace=namespace)
    ledger = budgets.Ledger(
        admin, namespace=namespace, default_limits=budgets.Limits(10**12, 10**13)
    )
    await fleet.load_scripts()
    await ledger.load_scripts()
    success = [breakers.Outcome(s, breakers.Verdict.SUCCESS) for s in SCOPES[:2]]
    # The labels of charge "r<repeat>-<i>", or none.
    labels: Callable[[str], str] = lambda c: (  # noqa: E731
        budgets.encode_labels(ATTRIBUTE_BY, metadata(int(c.rsplit("-", 1)[1])), 100)
        if args.attribute
        else ""
    )
    ops: dict[str, Callable[[Any, str], object]] = {
        "check": lambda pipe, _: fleet.check_on(pipe, SCOPES, PAIRS, ["an", "gg", "oa"]),
        "record": lambda pipe, _: fleet.record_on(pipe, success),
        "reserve": lambda pipe, c: ledger.reserve_on(
            pipe,
            f"t{c[-1]}",
            c,
            provider="oa",
            micros=2000,
            fallback=False,
            ttl_s=30,
            labels=labels(c),
        ),
        "settle": lambda pipe, c: ledger.settle_on(
            pipe, f"t{c[-1]}", c, 1000, provider="oa", labels=labels(c)
        ),
    }
    per: dict[str, list[float]] = {name: [] for name in ops}
    for repeat in range(args.repeats + 1):  # the first round warms up
        charges = [f"r{repeat}-{i}" for i in range(CALLS)]
        for name, op in ops.items():
            before = await snapshot([admin])
            for start in range(0, CALLS, BATCH):
                async with admin.pipeline(transaction=False) as pipe:
                    for charge in charges[start : start + BATCH]:
                        op(pipe, charge)
                    replies = await pipe.execute(raise_on_error=False)
                if any(isinstance(r, Exception) for r in replies):
                    raise SystemExit(
                        f"{name}: {next(r for r in replies if isinstance(r, Exception))}"
                    )
            if repeat:
                per[name].append(cost(before, await snapshot([admin]), CALLS)[0])
    tag = "_attributed" if args.attribute else ""
    for name, values in per.items():
        kit.say(f"# script {name}: {[round(v, 1) for v in values]} us/call")
        kit.figure(f"store_cost_script_{name}{tag}_redis_cpu", kit.median(values), "us/call")
    total = sum(kit.median(v) for v in per.values())
    kit.figure(f"store_cost_scripts_of_a_healthy_turn{tag}_redis_cpu", total, "us/turn")
    await admin.aclose()


# --- the whole worker path ------------------------------------------------------------------


async def worker_runs(args: argparse.Namespace) -> None:
    cap.raise_fd_limit()
    options = cap.parse_args(["--latency-s", str(args.latency_s), "--ramp-s", "0.5"])
    options.settle_s, options.window_s = 2.0, args.window_s
    cap.CONFIG += WORKER_BREAKERS
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="store-cost-")))
        url, redis_pid = cap.private_redis(stack, work)
        sim, sim_pid = cap.simulator(stack, work, args.latency_s)
        rig = cap.Rig(options, url, sim, {"simulator": [sim_pid], "redis": [redis_pid]}, work)
        admin = [aioredis.Redis.from_url(url)]
        shape = cap.Shape.parse(args.shape)
        floor = cap.Shape(shape.pool, shape.processes, shape.concurrency, floor=True)
        runs: dict[str, list[tuple[float, float, dict[str, float]]]] = {}
        for _ in range(args.repeats):
            for name, run_shape, faults in (
                ("worker_floor", floor, [Fault(latency_s=args.latency_s)]),
                ("worker_healthy", shape, [Fault(latency_s=args.latency_s)]),
                ("worker_fallback", shape, [Fault(status=503)]),
            ):
                sim.set_faults("alpha", *faults)
                sim.set_faults("beta", Fault(latency_s=args.latency_s))
                runs.setdefault(name, []).append(await worker_cell(rig, admin, run_shape, args.k))
        for name, measured in runs.items():
            publish(name, measured)
        await admin[0].aclose()


async def worker_cell(
    rig: cap.Rig, admin: list[aioredis.Redis], shape: cap.Shape, k: int
) -> tuple[float, float, dict[str, float]]:
    """One shape at K turns in flight: the server's cost per turn completed in the window."""
    measured: list[tuple[float, float, dict[str, float]]] = []

    async def measure(rig_: cap.Rig, feeder: cap.Feeder, k_: int, pids: Any) -> cap.Cell:
        feeder.set_target(k_, rig_.args.ramp_s)
        await asyncio.sleep(rig_.args.settle_s)
        first, before = len(feeder.done), await snapshot(admin)
        await asyncio.sleep(rig_.args.window_s)
        after, turns = await snapshot(admin), feeder.done[first:]
        if any(not ok for *_, ok in turns):
            raise SystemExit(f"{shape.name}: {sum(not ok for *_, ok in turns)} turns not ok")
        measured.append(cost(before, after, len(turns)))
        kit.say(f"# {shape.name} K={k_}: {len(turns) / rig_.args.window_s:.0f} turns/s")
        return cap.Cell(0, 0, 0, 0, 0, 0, 0, 0)

    await cap.run_shape(rig, shape, [k], measure)
    return measured[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("guard", "scripts", "worker"), help="one part")
    parser.add_argument("--turns", type=int, default=2000, help="guard: turns per run")
    parser.add_argument("--in-flight", type=int, default=100, help="guard: turns in flight")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--cluster", action="store_true", help="guard: shared state on a cluster")
    parser.add_argument(
        "--attribute", action="store_true", help="guard, scripts: spend attributed by 2 keys"
    )
    parser.add_argument("--shape", default="threads:1x500", help="worker: pool:PxC")
    parser.add_argument("--k", type=int, default=200, help="worker: turns kept in flight")
    parser.add_argument("--latency-s", type=float, default=0.5, help="worker: provider latency")
    parser.add_argument("--window-s", type=float, default=4.0, help="worker: measured window")
    args = parser.parse_args()
    if args.only in (None, "guard"):
        kit.run_pinned(lambda rig: guard_runs(args, rig), lambda _: None)
    if args.only in (None, "scripts"):
        kit.run_pinned(lambda rig: script_runs(args, rig), lambda _: None)
    if args.only in (None, "worker"):
        asyncio.run(worker_runs(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
