"""Broker cost: Redis or RabbitMQ as the broker, side by side in one run.

Each pass gets bench/chaos.py's rig for one broker: a private `redis-server` with its
append-only file (`appendfsync everysec`, as deploy/redis/redis.conf: the store relevo needs
with either broker), `relevo simulate` (the primary answers after `--latency-s`), two
`relevo worker` processes (50 threads each), and for RabbitMQ a private node
(tests/rabbitkit.py) as `[broker] url`. Fair dispatch is on, as by default. This process
keeps `--in-flight` turns in flight through `Producer` (each turn enqueued, its result
awaited, the next one sent) for `--warmup-s`, then measures for `--measure-s`:

- turns completed per second;
- the broker's CPU per turn: RabbitMQ's Erlang VM (beam.smp utime+stime from /proc), or
  Redis's (INFO used_cpu_sys + used_cpu_user) when Redis is the broker;
- Redis's CPU per turn (with RabbitMQ, the store's share alone: results, records, the
  fair queue, breakers and budgets), and the worker processes' CPU per turn;
- how long an enqueue took (p50, p99): with RabbitMQ, a confirmed publish.

Brokers alternate (redis, rabbitmq, rabbitmq, redis, ...) for `--passes` passes each; the
figures are medians over passes. Needs root and rabbitmq-server (a private node).

    .venv/bin/python bench/broker_cost.py            # ~4 min: 2 passes each
    .venv/bin/python bench/broker_cost.py --quick    # ~2 min: 1 pass each

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos
import kit
import node_capacity as cap

from worker.fleet import Producer

BROKERS = {"redis": "redis_restart", "rabbitmq": "rabbitmq_restart"}  # the chaos rig of each


def cpu(rig: chaos.Rig) -> dict[str, float]:
    """CPU seconds so far: the broker, Redis, the worker processes."""
    with contextlib.closing(rig.sync_redis()) as client:
        info = client.info("cpu")
    redis_s = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    broker_s = redis_s if rig.rabbit is None else rig.rabbit.cpu_s()
    workers_s = cap.tree_cpu_s([node.proc.pid for node in rig.nodes])
    return {"broker": broker_s, "redis": redis_s, "workers": workers_s}


async def drive(
    rig: chaos.Rig, args: argparse.Namespace
) -> tuple[int, dict[str, float], list[float]]:
    """Keep `in_flight` turns going; the turns completed, the CPU used and the enqueue
    times (ms) within the measured window."""
    window: dict[str, float] = {}
    done: list[float] = []
    enqueue_ms: list[float] = []
    end = time.monotonic() + args.warmup_s + args.measure_s

    async with Producer.from_settings(rig.settings) as producer:

        async def lane() -> None:
            while time.monotonic() < end:
                began = time.perf_counter()
                handle = await producer.enqueue({**chaos.TURN, "turn_id": uuid.uuid4().hex})
                sent_ms = (time.perf_counter() - began) * 1000
                await handle.result(timeout_s=60)
                if "start" in window and "end" not in window:
                    done.append(time.monotonic())
                    enqueue_ms.append(sent_ms)

        async def meter() -> dict[str, float]:
            await asyncio.sleep(args.warmup_s)
            before = await asyncio.to_thread(cpu, rig)
            window["start"] = time.monotonic()
            await asyncio.sleep(args.measure_s)
            window["end"] = time.monotonic()
            after = await asyncio.to_thread(cpu, rig)
            return {k: after[k] - before[k] for k in before}

        lanes = [asyncio.create_task(lane()) for _ in range(args.in_flight)]
        used = await meter()
        await asyncio.gather(*lanes)
    return len(done), used, enqueue_ms


def one_pass(broker: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    kit.say(f"# {broker}: starting the rig")
    with chaos.Rig(BROKERS[broker], root, args.latency_s) as rig:
        turns, used, enqueue_ms = asyncio.run(drive(rig, args))
    if not turns:
        raise SystemExit(f"{broker}: no turn completed in the measured window")
    figures = {
        "turns_per_s": turns / args.measure_s,
        "broker_cpu_ms_per_turn": used["broker"] * 1000 / turns,
        "redis_cpu_ms_per_turn": used["redis"] * 1000 / turns,
        "workers_cpu_ms_per_turn": used["workers"] * 1000 / turns,
        "enqueue_ms_p50": cap.pct(enqueue_ms, 50),
        "enqueue_ms_p99": cap.pct(enqueue_ms, 99),
    }
    kit.say(f"#   {broker}: " + ", ".join(f"{k} {v:.3g}" for k, v in figures.items()))
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one pass per broker")
    parser.add_argument("--passes", type=int, help="passes per broker (2; quick 1)")
    parser.add_argument("--in-flight", type=int, default=60, help="turns kept in flight")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=20.0)
    parser.add_argument("--latency-s", type=float, default=0.2, help="the primary's latency")
    args = parser.parse_args(argv)
    if args.passes is None:
        args.passes = 1 if args.quick else 2
    missing = chaos.private_rabbit_missing()
    if missing is not None:
        parser.error(missing)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kit.raise_fd_limit()
    root = Path(tempfile.mkdtemp(prefix="relevo-broker-"))
    order = ["redis", "rabbitmq"]
    runs: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        for n in range(args.passes):
            for broker in order if n % 2 == 0 else order[::-1]:
                runs[broker].append(one_pass(broker, root / f"{broker}-{n}", args))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    units = {"turns_per_s": "turns/s", "enqueue_ms_p50": "ms", "enqueue_ms_p99": "ms"}
    for broker in order:
        for name in runs[broker][0]:
            value = statistics.median(run[name] for run in runs[broker])
            kit.figure(f"{broker}_{name}", value, units.get(name, "ms"))
    for name in ("turns_per_s", "broker_cpu_ms_per_turn"):
        ratio = statistics.median(r[name] for r in runs["rabbitmq"]) / statistics.median(
            r[name] for r in runs["redis"]
        )
        kit.figure(f"rabbitmq_over_redis_{name}", ratio, "ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
