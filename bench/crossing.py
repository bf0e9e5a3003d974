"""What the crossing from Celery's threads to the worker's event loop costs per turn.

A worker's turn crosses once: a Celery pool thread hands the turn's coroutine to the
process's loop (`worker.fleet.runner.LoopThread.run`: `run_coroutine_threadsafe` and a
blocking `.result(timeout)`) and sleeps until it is done. Side by side, in this one
process, on one `LoopThread` (uvloop), for K in flight and a coroutine that only does a
turn's cheapest await (`asyncio.sleep(latency)`):

- threads: K threads, each running that coroutine through `LoopThread.run`, one after
  another, as Celery's threads pool runs turns;
- loop: K lanes on the loop itself, each creating a task of the same coroutine and
  awaiting it, as a pool that ran each task's coroutine on the loop would (no threads).

The process's CPU time (every thread) per completed coroutine of each, their difference
(the crossing: thread wake-ups, the concurrent future's callbacks, GIL hand-offs) and
wall throughput; rounds interleaved, medians. The difference is also given as a share of
a turn's worker CPU (`--turn-ms`) and of the worker's budget over Celery's floor
(`--budget-ms`).

    .venv/bin/python bench/crossing.py            # ~90 s
    .venv/bin/python bench/crossing.py --quick    # ~10 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

from worker.fleet.runner import LoopThread

MODES = ("threads", "loop")
# TurnRunner waits with a timeout (a timed condition wait): so do the threads here.
_TIMEOUT_S = 60.0


async def turn(latency_s: float) -> None:
    """A turn's cheapest await."""
    await asyncio.sleep(latency_s)


@dataclass(frozen=True)
class Run:
    """One run of one mode: process CPU µs per coroutine (of which the kernel's) and
    coroutines per second."""

    cpu_us: float
    sys_us: float
    per_s: float


def timed(count: int, body: Callable[[], None]) -> Run:
    """`body` (which completes `count` coroutines), CPU of every thread and wall clock."""
    gc.collect()
    # process_time is exact; getrusage's user/kernel split of it is apportioned by ticks.
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = time.process_time(), time.perf_counter()
    body()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before.ru_stime
    return Run(cpu / count * 1e6, kernel / count * 1e6, count / wall)


class Threads:
    """K parked threads; each round, each runs `each` coroutines through `LoopThread.run`.

    The threads outlive the rounds (as Celery's pool threads do), so starting them is not
    measured; they wait on a barrier between rounds, which costs nothing while parked.
    """

    def __init__(self, loop: LoopThread, k: int) -> None:
        self.loop, self.k = loop, k
        self._go = threading.Barrier(k + 1)
        self._done = threading.Barrier(k + 1)
        self._job: tuple[int, float] = (0, 0.0)
        self._threads = [
            threading.Thread(target=self._work, name=f"pool-{i}", daemon=True) for i in range(k)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while True:
            self._go.wait()
            each, latency_s = self._job
            if each < 0:
                return
            for _ in range(each):
                self.loop.run(turn(latency_s), timeout_s=_TIMEOUT_S)
            self._done.wait()

    def round(self, each: int, latency_s: float) -> None:
        self._job = (each, latency_s)
        self._go.wait()
        self._done.wait()

    def stop(self) -> None:
        self._job = (-1, 0.0)
        self._go.wait()
        for thread in self._threads:
            thread.join(timeout=5)


async def lanes(k: int, each: int, latency_s: float) -> None:
    """K lanes on the loop, each creating and awaiting `each` tasks one after another."""

    async def lane() -> None:
        for _ in range(each):
            await asyncio.create_task(turn(latency_s))

    await asyncio.gather(*(lane() for _ in range(k)))


def cell(
    loop: LoopThread, k: int, latency_s: float, turns: int, rounds: int
) -> dict[str, list[Run]]:
    """Both modes at K in flight, `rounds` interleaved rounds of about `turns` each."""
    each = max(1, turns // k)
    count = each * k
    pool = Threads(loop, k)
    bodies: dict[str, Callable[[], None]] = {
        "threads": lambda: pool.round(each, latency_s),
        # One crossing per round, to start the lanes: nothing against `count`.
        "loop": lambda: loop.run(lanes(k, each, latency_s)),
    }
    try:
        for body in bodies.values():
            body()  # warm-up: the loop's and the threads' first turns, the allocator
        per: dict[str, list[Run]] = {mode: [] for mode in MODES}
        for i in range(rounds):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                run = timed(count, bodies[mode])
                per[mode].append(run)
                kit.say(
                    f"# K={k:<4} {latency_s * 1000:g} ms {mode:<7} #{i} "
                    f"{run.cpu_us:7.1f} us/turn ({run.sys_us:5.1f} sys) {run.per_s:8.0f} turns/s"
                )
        return per
    finally:
        pool.stop()


def report(name: str, per: dict[str, list[Run]], turn_ms: float, budget_ms: float) -> None:
    """This cell's FIGURE lines."""
    threads, on_loop = per["threads"], per["loop"]
    for mode in MODES:
        runs = per[mode]
        kit.figure(
            f"crossing_cpu_per_turn_{mode}_{name}", kit.median([r.cpu_us for r in runs]), "us"
        )
        kit.figure(
            f"crossing_sys_per_turn_{mode}_{name}", kit.median([r.sys_us for r in runs]), "us"
        )
        kit.figure(
            f"crossing_turns_per_s_{mode}_{name}", round(kit.median([r.per_s for r in runs])), "/s"
        )
    # A - B within each round: the two ran back to back under the same noise.
    diffs = [a.cpu_us - b.cpu_us for a, b in zip(threads, on_loop, strict=True)]
    ratios = [a.cpu_us / b.cpu_us for a, b in zip(threads, on_loop, strict=True)]
    cost = kit.median(diffs)
    kit.figure(f"crossing_cost_per_turn_{name}", cost, "us")
    kit.say(f"# {name}: threads - loop per round {[round(d, 1) for d in diffs]} us")
    kit.figure(f"crossing_cpu_ratio_threads_over_loop_{name}", kit.median(ratios), "x")
    kit.figure(f"crossing_share_of_turn_{name}", cost / (turn_ms * 10), "%")
    kit.figure(f"crossing_share_of_budget_{name}", cost / (budget_ms * 10), "%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (~10 s)")
    parser.add_argument("--in-flight", help="K values, comma-separated (500,100)")
    parser.add_argument("--latency-ms", help="the coroutine's sleep, comma-separated (50,0)")
    parser.add_argument("--turns", type=int, help="coroutines per run (10000; quick 2000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5; quick 2)")
    parser.add_argument("--turn-ms", type=float, default=5.0, help="a turn's worker CPU (5.0)")
    parser.add_argument(
        "--budget-ms", type=float, default=0.8, help="worker CPU allowed over Celery's (0.8)"
    )
    args = parser.parse_args()
    ks = [int(k) for k in (args.in_flight or "500,100").split(",")]
    latencies = [float(ms) / 1000 for ms in (args.latency_ms or "50,0").split(",")]
    turns = args.turns or (2000 if args.quick else 10000)
    rounds = args.rounds or (2 if args.quick else 5)
    started = time.monotonic()
    loop = LoopThread(name="crossing-loop")
    try:
        for k in ks:
            for latency_s in latencies:
                per = cell(loop, k, latency_s, turns, rounds)
                report(f"k{k}_{latency_s * 1000:g}ms", per, args.turn_ms, args.budget_ms)
    finally:
        loop.stop()
    kit.figure("crossing_turn_cpu_assumed", args.turn_ms, "ms")
    kit.figure("crossing_budget_over_floor", args.budget_ms, "ms")
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
