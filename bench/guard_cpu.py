"""Client CPU of the Redis guard per healthy turn: `admit` then `conclude`, no HTTP.

The guard's two round trips of a healthy turn (breaker check + budget reservation,
then breaker record + settlement) against a private redis-server on the other
core, beside the floor: two round trips of one trivial EVALSHA each on the same
client. At 1 and 50 turns in flight, interleaved, medians of `--repeats` runs.

    .venv/bin/python bench/guard_cpu.py            # ~30 s
    .venv/bin/python bench/guard_cpu.py --quick    # ~10 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

from worker.guard.protocol import Charge, Conclusion, Signal, Target
from worker.guard.redis_guard import open_guard

Op = Callable[[int], Awaitable[None]]
TARGETS = [
    Target("openai/alpha", "openai", "oa", kit.PRIMARY),
    Target("anthropic/beta", "anthropic", "an", kit.BACKUP),
    Target("google/gamma", "google", "gg", kit.LAST),
]


async def drive(op: Op, count: int, in_flight: int) -> float:
    """Client CPU µs per op, `in_flight` at a time."""
    numbers = iter(range(count))

    async def lane() -> None:
        for i in numbers:
            await op(i)

    gc.collect()
    started = time.process_time()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return (time.process_time() - started) / count * 1e6


async def measure(args: argparse.Namespace, rig: kit.Rig) -> dict[str, float]:
    namespace = f"g{time.time_ns()}"
    settings = kit.relevo_settings("http://127.0.0.1:9", rig.redis_url, namespace=namespace)
    guard = open_guard(settings)
    floor_client = guard.pipes.redis
    trivial = await floor_client.script_load("return 1")

    async def guarded(i: int) -> None:
        charge = Charge(f"c{i}", f"tenant{i % 8}", "oa", 2_000, False)
        admission = await guard.admit(TARGETS, charge)
        if admission.refusal is not None:
            raise RuntimeError(f"refused: {admission.refusal}")
        await guard.conclude(Conclusion(TARGETS[0], charge, Signal.SUCCESS, 1_000))

    async def floor(i: int) -> None:
        for _ in range(2):
            pipe = floor_client.pipeline(transaction=False)
            pipe.evalsha(trivial, 0)
            await pipe.execute()

    ops = {"guard": guarded, "floor": floor}
    figures: dict[str, float] = {}
    for op in ops.values():
        await drive(op, 300, 50)
    for in_flight in (1, 50):
        per: dict[str, list[float]] = {name: [] for name in ops}
        for repeat in range(args.repeats):
            for name in ops if repeat % 2 == 0 else reversed(ops):
                per[name].append(await drive(ops[name], args.turns, in_flight))
        for name, values in per.items():
            kit.say(f"# {name} at {in_flight}: {[round(v) for v in values]}")
            figures[f"guard_cpu_{name}_at_{in_flight}"] = kit.median(values)
    await guard.aclose()
    return figures


def report(figures: dict[str, float]) -> None:
    for name, value in figures.items():
        kit.figure(name, value, "us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs (~10 s)")
    parser.add_argument("--turns", type=int, help="turns per run (2000; quick 500)")
    parser.add_argument("--repeats", type=int, help="interleaved runs (5; quick 3)")
    args = parser.parse_args()
    args.turns = args.turns or (500 if args.quick else 2000)
    args.repeats = args.repeats or (3 if args.quick else 5)
    return kit.run_pinned(lambda rig: measure(args, rig), report)


if __name__ == "__main__":
    sys.exit(main())
