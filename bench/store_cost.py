"""Redis server CPU per turn: the guard alone, and the whole worker path.

Measured from outside, on a private redis-server nothing else speaks to: the deltas of
INFO's `used_cpu_sys` + `used_cpu_user` and of `commandstats` over a run, divided by the
turns the run completed. One Redis core serves 1 s / (CPU per turn) turns per second:
the fleet's ceiling, printed beside each figure.

- guard: the real chain with its Redis guard in this process (breakers, budgets, kill
  switch, cooldowns; no Celery), `--turns` turns at `--in-flight`; healthy, then with
  the primary answering 503 (each turn falls back once; breakers kept closed).
- worker: real `celery worker` processes (bench/node_capacity.py's rig) fed K turns in
  flight: the broker's, the result backend's, the turn store's and the guard's commands
  together, healthy and falling back, plus Celery's floor (a task that only sleeps).

    .venv/bin/python bench/store_cost.py                 # ~2 min
    .venv/bin/python bench/store_cost.py --only guard    # ~20 s

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


async def snapshot(admin: aioredis.Redis) -> tuple[float, dict[str, int]]:
    """(CPU seconds the server has used, calls per command), INFO's own left out."""
    cpu: dict[str, Any] = await admin.info("cpu")
    stats: dict[str, Any] = await admin.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    calls.pop("info", None)
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), calls


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
    settings = kit.relevo_settings(
        rig.sim_url, rig.redis_url, namespace=f"sc{time.time_ns()}", breakers=NEVER_TRIP
    )
    admin = aioredis.Redis.from_url(rig.redis_url)
    guard = open_guard(settings)
    async with make_client() as http:
        chain = Chain.from_settings(settings, http, guard=guard)

        async def turn(i: int, step: int) -> None:
            result = await chain.run(kit.turn_request(i))
            if result.status != "ok" or result.step != step:
                raise RuntimeError(f"turn {result.status} at step {result.step}, not {step}")

        for name, faults, step in (("healthy", (), 0), ("fallback", (Fault(status=503),), 1)):
            rig.sim.set_faults(kit.PRIMARY, *faults)
            await drive(lambda i, s=step: turn(i, s), 200, args.in_flight)  # warm up
            measured = []
            for _ in range(args.repeats):
                before = await snapshot(admin)
                await drive(lambda i, s=step: turn(i, s), args.turns, args.in_flight)
                measured.append(cost(before, await snapshot(admin), args.turns))
            publish(f"guard_{name}", measured)
        rig.sim.set_faults(kit.PRIMARY)
    await guard.aclose()
    await admin.aclose()


async def drive(turn: Callable[[int], Awaitable[None]], turns: int, in_flight: int) -> None:
    numbers = iter(range(turns))

    async def lane() -> None:
        for i in numbers:
            await turn(i)

    await asyncio.gather(*(lane() for _ in range(in_flight)))


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
        admin = aioredis.Redis.from_url(url)
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
        await admin.aclose()


async def worker_cell(
    rig: cap.Rig, admin: aioredis.Redis, shape: cap.Shape, k: int
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
    parser.add_argument("--only", choices=("guard", "worker"), help="one half of the bench")
    parser.add_argument("--turns", type=int, default=2000, help="guard: turns per run")
    parser.add_argument("--in-flight", type=int, default=100, help="guard: turns in flight")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--shape", default="threads:1x500", help="worker: pool:PxC")
    parser.add_argument("--k", type=int, default=200, help="worker: turns kept in flight")
    parser.add_argument("--latency-s", type=float, default=0.5, help="worker: provider latency")
    parser.add_argument("--window-s", type=float, default=4.0, help="worker: measured window")
    args = parser.parse_args()
    if args.only != "worker":
        kit.run_pinned(lambda rig: guard_runs(args, rig), lambda _: None)
    if args.only != "guard":
        asyncio.run(worker_runs(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
