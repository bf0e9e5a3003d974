"""Hedged attempts: time to first token with a primary that is slow one call in ten.

The simulated primary (`openai/alpha`) sends its first byte after 0.4 s for 90 % of calls
and after 3 s for the other 10 % (`Fault.latency_mix`, drawn from the simulator's seeded
random); the backup (`anthropic/beta`) after 0.5 s. Each contender runs the same streamed
turns, `--turns` at `--concurrency` in flight, in `--rounds` chunks whose order alternates
from round to round, all in one run:

- relevo with hedging off;
- relevo with hedging on, a 5 % hedge budget;
- relevo with hedging on, a budget of `--wide-budget` (enough for this tail: 10 % of the
  calls are slow, and a 5 % budget can hedge only half of them);
- LiteLLM's Router (fallbacks and one retry, as in `bench/kit.py`: it has no hedging).

relevo keeps its breakers, budgets and hedging evidence on a private redis-server. Before
its measured turns each hedging contender runs `--warm` unmeasured turns, so that the
fleet holds first-byte evidence and its hedge bucket what normal attempts left in it, as
in a running fleet: at most its burst (1 for the 5 % budget, 10 for the wide one). So
the measured turns may make at most share x turns + burst extra calls. The hedge delay is
the `--percentile` of first-byte latency: it must sit below the share of slow calls (p95
of this primary is its slow mode, 3 s), so the bench sets p80.

    .venv/bin/python bench/hedging.py            # ~1.5 min
    .venv/bin/python bench/hedging.py --quick    # ~40 s: 200 turns each

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

from worker.simulator import Fault

SLOW = Fault(latency_mix=((0.9, 0.4), (0.1, 3.0)))
BACKUP = Fault(latency_s=0.5)
CONTENDERS = ("relevo_off", "relevo_on", "relevo_on_wide", "litellm")
SEED = 18


def budgets_of(args: argparse.Namespace) -> dict[str, tuple[float, int]]:
    """Each hedging contender's (budget share, burst)."""
    return {"relevo_on": (0.05, 1), "relevo_on_wide": (args.wide_budget, 10)}


Ttft = Callable[[int], Awaitable[float]]  # one streamed turn: seconds to its first content
# Per relevo contender: hedged races the hedge won ("hedged" losers) and lost ("hedge").
RACES: dict[str, Counter[str]] = defaultdict(Counter)


@contextlib.asynccontextmanager
async def contender(name: str, rig: kit.Rig, args: argparse.Namespace) -> AsyncIterator[Ttft]:
    if name == "litellm":
        router = kit.litellm_router(rig.sim_url)
        messages = kit.litellm_messages()

        async def litellm_ttft(i: int) -> float:
            return await kit.litellm_first_token_s(router, messages)

        yield litellm_ttft
        return

    from worker.adapters import make_client
    from worker.guard.redis_guard import open_guard
    from worker.settings import load_settings
    from worker.turn.chain import Chain

    namespace = f"hedge{time.time_ns()}"
    base = kit.relevo_settings(rig.sim_url, rig.redis_url, namespace=namespace)
    budget = budgets_of(args).get(name)
    data = base.model_dump(mode="json")
    data["chain"]["hedging"] = {
        "enabled": budget is not None,
        "budget_share": budget[0] if budget else 0.05,
        "burst": budget[1] if budget else 1,
        "percentile": args.percentile,
    }
    settings = load_settings(data=data)
    guard = open_guard(settings)
    async with make_client() as client:
        chain = Chain.from_settings(settings, client, guard=guard)

        async def relevo_ttft(i: int) -> float:
            started, first = time.perf_counter(), 0.0

            def on_text(_: str) -> None:
                nonlocal first
                first = first or time.perf_counter()

            result = await chain.run(kit.turn_request(i, stream=True), on_text=on_text)
            for a in result.attempts:
                if a.outcome == "hedge_lost":
                    RACES[name]["won" if a.error_class == "hedged" else "lost"] += 1
            if result.status != "ok" or not first:
                raise RuntimeError(f"relevo turn {result.status} {result.reason}")
            return first - started

        if budget is not None:
            await lanes(relevo_ttft, args.warm, args.concurrency)
            RACES[name].clear()
        yield relevo_ttft
    await guard.aclose()


async def lanes(ttft: Ttft, turns: int, concurrency: int) -> list[float]:
    times: list[float] = []
    counter = iter(range(turns))

    async def lane() -> None:
        for i in counter:
            times.append(await ttft(i))  # noqa: PERF401

    async with asyncio.TaskGroup() as group:
        for _ in range(min(turns, concurrency)):
            group.create_task(lane())
    return times


def provider_calls(rig: kit.Rig) -> int:
    return sum(rig.sim.calls(model) for model in (kit.PRIMARY, kit.BACKUP, kit.LAST))


async def measure(args: argparse.Namespace, rig: kit.Rig) -> dict[str, dict[str, Any]]:
    rig.sim.set_faults(kit.PRIMARY, SLOW)
    rig.sim.set_faults(kit.BACKUP, BACKUP)
    out: dict[str, dict[str, Any]] = {n: {"ttft": [], "extra": 0} for n in CONTENDERS}
    async with contextlib.AsyncExitStack() as stack:
        ttfts = {n: await stack.enter_async_context(contender(n, rig, args)) for n in CONTENDERS}
        chunk = args.turns // args.rounds
        for r in range(args.rounds):
            # Alternating orders: a noisy machine's drift falls on every contender alike.
            for name in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
                before = provider_calls(rig)
                out[name]["ttft"] += await lanes(ttfts[name], chunk, args.concurrency)
                # A cut loser's request has arrived: counting now misses none.
                out[name]["extra"] += provider_calls(rig) - before - chunk
    for name, row in out.items():
        times = row["ttft"]
        races = RACES[name]
        kit.say(
            f"# {name:<15} p50 {kit.pct(times, 50):.3f} s  p99 {kit.pct(times, 99):.3f} s  "
            f"extra calls {row['extra']} of {len(times)} turns, hedges won {races['won']} "
            f"lost {races['lost']}, slower than 2 s {sum(t > 2 for t in times)}"
        )
    return out


def report(out: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    off = out["relevo_off"]["ttft"]
    for name, row in out.items():
        times = row["ttft"]
        kit.figure(f"hedging_ttft_p50_{name}", kit.pct(times, 50), "s")
        kit.figure(f"hedging_ttft_p99_{name}", kit.pct(times, 99), "s")
        kit.figure(f"hedging_extra_calls_{name}", row["extra"], "calls")
        kit.figure(f"hedging_slower_than_2s_{name}", sum(t > 2 for t in times), "turns")
        if name in RACES:
            kit.figure(f"hedging_hedges_won_{name}", RACES[name]["won"], "hedges")
            kit.figure(f"hedging_hedges_lost_{name}", RACES[name]["lost"], "hedges")
    for name, (share, burst) in budgets_of(args).items():
        times = out[name]["ttft"]
        p99 = kit.pct(times, 99) / kit.pct(off, 99)
        p50 = kit.pct(times, 50) / kit.pct(off, 50)
        kit.figure(f"hedging_p99_ratio_{name}", p99, "x")
        kit.figure(f"hedging_p50_ratio_{name}", p50, "x")
        allowed = share * len(times) + burst
        kit.figure(f"hedging_extra_calls_allowed_{name}", allowed, "calls")
        met = p99 <= 0.4 and abs(p50 - 1) <= 0.05 and out[name]["extra"] <= allowed
        kit.figure(f"hedging_goals_met_{name}", int(met), "bool")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 turns per contender")
    parser.add_argument("--turns", type=int, help="measured turns per contender (500)")
    parser.add_argument("--concurrency", type=int, default=50, help="turns in flight (50)")
    parser.add_argument("--rounds", type=int, default=4, help="chunks per contender, alternated")
    parser.add_argument("--warm", type=int, default=100, help="unmeasured turns first (100)")
    parser.add_argument("--percentile", type=float, default=80.0, help="hedge delay (p80)")
    parser.add_argument("--wide-budget", type=float, default=0.15, help="the wide budget")
    args = parser.parse_args(argv)
    if args.turns is None:
        args.turns = 200 if args.quick else 500
    if args.quick:
        args.rounds = 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    client_core, server_core = kit.cores()
    kit.pin(0, client_core)
    kit.quiet_relevo_logs()
    started = time.monotonic()
    with kit.rig(server_core, seed=SEED) as rig:
        out = asyncio.run(measure(args, rig))
    report(out, args)
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
