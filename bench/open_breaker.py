"""Open-breaker latency: what skipping a primary whose breaker is Open adds to a turn.

Two chains on the same private Redis and the same guard settings: (A) the usual
chain, `openai/alpha` first, with alpha's breaker forced Open through the operators'
API (`breakers.Operators.force_open`), so every turn skips it and the backup
`anthropic/beta` answers; (B) a chain whose primary *is* that backup. Turns are
timed end to end in this process (pinned to one core; the simulator and Redis on the
other) and alternated A B B A ...; the added latency is A's percentile minus B's.
Run at one turn in flight with an instant backup (the added time alone), then at
`--concurrency` in flight with the backup answering after `--latency-ms`, below the
load at which this one client core saturates (then latency only measures CPU queueing).
Also prints each chain's client CPU per turn.

    .venv/bin/python bench/open_breaker.py           # ~40 s
    .venv/bin/python bench/open_breaker.py --quick   # ~10 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

import breakers
from worker.adapters import make_client
from worker.guard.protocol import Target
from worker.guard.redis_guard import model_scope, open_guard
from worker.simulator import Fault
from worker.turn.chain import Chain

TARGET_P99_MS = 5.0
BACKUP_FIRST = ("anthropic/beta", "google/gamma", "openai/alpha")


async def timed(chain: Chain, i: int, want_step: int) -> float:
    started = time.perf_counter()
    result = await chain.run(kit.turn_request(i))
    took = (time.perf_counter() - started) * 1000
    if result.status != "ok" or result.step != want_step:
        raise RuntimeError(f"unexpected turn: {result.status} step {result.step}")
    return took


async def lanes(chain: Chain, turns: int, concurrency: int, want_step: int) -> list[float]:
    times: list[float] = []
    counter = iter(range(turns))

    async def lane() -> None:
        for i in counter:
            times.append(await timed(chain, i, want_step))  # noqa: PERF401

    async with asyncio.TaskGroup() as group:
        for _ in range(min(turns, concurrency)):
            group.create_task(lane())
    return times


async def measure(args: argparse.Namespace, rig: kit.Rig) -> dict[int, dict[str, list[float]]]:
    namespace = f"open{time.time_ns()}"
    skipping = kit.relevo_settings(rig.sim_url, rig.redis_url, namespace=namespace)
    direct = kit.relevo_settings(
        rig.sim_url, rig.redis_url, namespace=namespace, chain=BACKUP_FIRST
    )
    guard_a, guard_b = open_guard(skipping), open_guard(direct)
    out: dict[int, dict[str, list[float]]] = {}
    async with make_client() as client:
        chain_a = Chain.from_settings(skipping, client, guard=guard_a)
        chain_b = Chain.from_settings(direct, client, guard=guard_b)
        await lanes(chain_a, 20, 5, want_step=0)  # the primary's scope now exists
        scope = model_scope(Target("openai/alpha", "openai", "oa", kit.PRIMARY))
        store = breakers.FleetBreakers(guard_a.redis, namespace=namespace)
        state = await breakers.Operators(store).force_open(scope)
        kit.say(f"# forced {scope} open (it was {state})")
        skipped = await chain_a.run(kit.turn_request())
        if skipped.effective_model != "anthropic/beta" or skipped.attempts[0].outcome != "skipped":
            raise RuntimeError(f"the primary was not skipped: {skipped.attempts}")
        await lanes(chain_a, 50, 5, want_step=1)
        await lanes(chain_b, 50, 5, want_step=0)
        for concurrency in (1, args.concurrency):
            latency = 0.0 if concurrency == 1 else args.latency_ms / 1000
            rig.sim.set_faults(kit.BACKUP, *([Fault(latency_s=latency)] if latency else []))
            per: dict[str, list[float]] = {"open": [], "direct": []}
            cpu: dict[str, float] = {"open": 0.0, "direct": 0.0}
            turns = args.turns if concurrency == 1 else args.turns * 2
            chunk = max(concurrency, turns // args.rounds)
            for r in range(args.rounds):
                pair = [("open", chain_a, 1), ("direct", chain_b, 0)]
                for name, chain, step in pair if r % 2 == 0 else pair[::-1]:
                    cpu0 = time.process_time()
                    per[name] += await lanes(chain, chunk, concurrency, want_step=step)
                    cpu[name] += time.process_time() - cpu0
            out[concurrency] = per
            for name, seconds in cpu.items():
                us = seconds / len(per[name]) * 1e6
                kit.figure(f"{_LABEL[name]}_cpu_per_turn_c{concurrency}", round(us), "us")
            p = {k: (kit.pct(v, 50), kit.pct(v, 99)) for k, v in per.items()}
            kit.say(f"# c{concurrency}: p50/p99 ms {p}")
    await guard_a.aclose()
    await guard_b.aclose()
    return out


_LABEL = {"open": "open_breaker", "direct": "backup_first"}


def report(out: dict[int, dict[str, list[float]]]) -> None:
    for concurrency, per in out.items():
        for q in (50, 99):
            open_ms, direct_ms = kit.pct(per["open"], q), kit.pct(per["direct"], q)
            kit.figure(f"open_breaker_turn_p{q}_c{concurrency}", round(open_ms, 3), "ms")
            kit.figure(f"backup_first_turn_p{q}_c{concurrency}", round(direct_ms, 3), "ms")
            added = open_ms - direct_ms
            kit.figure(f"open_breaker_added_p{q}_c{concurrency}", round(added, 3), "ms")
            if q == 99:
                met = int(added < TARGET_P99_MS)
                kit.figure(f"open_breaker_added_p99_target_met_c{concurrency}", met, "bool")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns (~10 s)")
    parser.add_argument("--turns", type=int, help="turns per chain at one in flight (2000; 500)")
    parser.add_argument("--rounds", type=int, default=10, help="alternations per chain (10)")
    parser.add_argument("--concurrency", type=int, default=10, help="the loaded run (10)")
    parser.add_argument(
        "--latency-ms", type=float, default=20.0, help="the backup's latency when loaded (20)"
    )
    args = parser.parse_args(argv)
    if args.turns is None:
        args.turns = 500 if args.quick else 2000
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return kit.run_pinned(lambda rig: measure(args, rig), report)


if __name__ == "__main__":
    sys.exit(main())
