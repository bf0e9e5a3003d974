"""Overhead per turn: relevo's chain vs LiteLLM's Router vs a bare httpx request.

The same healthy, non-streaming turns, `--concurrency` in flight, through
(a) relevo's chain in this process with its Redis guard (breakers and budgets on a
private redis-server), (b) LiteLLM's Router (the same three models, the two backups
as fallbacks, one retry), (c) a bare POST of the primary's request on relevo's HTTP
client (`make_client()`), the JSON decoded. Client process CPU time only (every
thread), this process pinned to one core, the simulator and Redis to the other.
Each contender is built and warmed once; runs are interleaved (A B C A B C ...),
and each run's CPU includes a short settle after its last turn so work a
contender defers (LiteLLM's logging callbacks) is charged to it.

Then memory per in-flight turn: in a fresh child process per contender,
`--parked` turns are sent to a primary that answers after `--parked-s`; once the
simulator holds them all, the RSS growth (one burst) and the Python heap growth
(tracemalloc, a second burst on a fresh contender) are divided by the turns held.

    .venv/bin/python bench/overhead.py           # ~3 min
    .venv/bin/python bench/overhead.py --quick   # ~60 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit
import uvloop

from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault, SimulatorClient
from worker.turn.chain import Chain

Turn = Callable[[int], Coroutine[Any, Any, None]]
CONTENDERS = ("relevo", "litellm", "httpx")
SETTLE_S = 0.3
TARGET_RATIO = 0.1


@contextlib.asynccontextmanager
async def contender(
    name: str, sim_url: str, redis_url: str, *, redis_timeout_s: float = 2.0
) -> AsyncIterator[Turn]:
    """One turn through `name`, as a callable; it raises unless the primary answered."""
    if name == "relevo":
        namespace = f"ovh{time.time_ns()}"
        settings = kit.relevo_settings(
            sim_url, redis_url, namespace=namespace, redis_timeout_s=redis_timeout_s
        )
        guard = open_guard(settings)
        async with make_client() as client:
            chain = Chain.from_settings(settings, client, guard=guard)

            async def relevo_turn(i: int) -> None:
                result = await chain.run(kit.turn_request(i))
                if result.status != "ok" or result.step != 0:
                    raise RuntimeError(f"relevo turn {result.status} step {result.step}")

            yield relevo_turn
        await guard.aclose()
    elif name == "litellm":
        router = kit.litellm_router(sim_url)
        messages = kit.litellm_messages()

        async def litellm_turn(i: int) -> None:
            response = await router.acompletion(
                model="primary", messages=messages, max_tokens=kit.MAX_TOKENS
            )
            if not response.choices[0].message.content.startswith("Answer from alpha"):
                raise RuntimeError("litellm answered from another model")

        yield litellm_turn
    else:
        url, headers, body = kit.bare_request(sim_url)
        async with make_client() as client:

            async def httpx_turn(i: int) -> None:
                response = await client.post(url, headers=headers, content=body)
                response.raise_for_status()
                response.json()

            yield httpx_turn


async def drive(turn: Turn, turns: int, concurrency: int) -> None:
    """`turns` turns, `concurrency` of them in flight."""
    counter = iter(range(turns))

    async def lane() -> None:
        for i in counter:
            await turn(i)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(turns, concurrency)):
            group.create_task(lane())


async def measure_cpu(turn: Turn, turns: int, concurrency: int) -> tuple[float, float]:
    """(client CPU µs per turn, wall s) for one run, the settle included in the CPU."""
    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await drive(turn, turns, concurrency)
    wall = time.perf_counter() - wall0
    await asyncio.sleep(SETTLE_S)
    return (time.process_time() - cpu0) / turns * 1e6, wall


async def cpu_runs(args: argparse.Namespace, rig: kit.Rig) -> dict[str, list[float]]:
    rig.sim.set_faults(kit.PRIMARY, Fault(latency_s=args.latency_ms / 1000))
    per: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    async with contextlib.AsyncExitStack() as stack:
        turns = {
            n: await stack.enter_async_context(contender(n, rig.sim_url, rig.redis_url))
            for n in CONTENDERS
        }
        for turn in turns.values():
            await drive(turn, args.warmup, args.concurrency)
        deadline = time.monotonic() + args.budget_s
        for repeat in range(args.repeats):
            order = CONTENDERS if repeat % 2 == 0 else CONTENDERS[::-1]
            for name in order:
                us, wall = await measure_cpu(turns[name], args.turns, args.concurrency)
                per[name].append(us)
                kit.say(f"# cpu {name:<8} #{repeat} {us:8.0f} us/turn  {wall:6.2f} s")
            if time.monotonic() > deadline:
                kit.say(f"# time budget spent after {repeat + 1} rounds")
                break
    return per


# --- memory per in-flight turn (runs in a child process per contender) ------------------------


def parked_at(sim: SimulatorClient) -> int:
    """Calls the simulator holds now (arrived, not finished)."""
    held = 0
    for counts in sim.counts().values():
        held += counts["calls"] - sum(v for k, v in counts.items() if k != "calls")
    return held


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def burst(turn: Turn, sim: SimulatorClient, parked: int, traced: bool) -> tuple[int, float]:
    """Start `parked` turns at once; (most turns the simulator held, bytes grown per turn started).

    Memory is read when the simulator holds the most turns (all of them, unless the
    contender's own pool queues some: LiteLLM sends at most 500 per host at a time).
    """
    gc.collect()
    if traced:
        tracemalloc.start()

    def used() -> int:
        return tracemalloc.get_traced_memory()[0] if traced else rss_bytes()

    before = used()
    tasks = [asyncio.create_task(turn(i)) for i in range(parked)]
    peak, grown, until = 0, 0, time.monotonic() + 30
    while time.monotonic() < until:
        await asyncio.sleep(0.1)
        held = await asyncio.to_thread(parked_at, sim)
        if held > peak:
            peak, grown = held, used() - before
        if held >= parked or (peak and held < peak):
            break
    if traced:
        tracemalloc.stop()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        kit.say(f"#   {len(failed)} turns failed, e.g. {failed[0]!r}")
    return peak, grown / parked


async def memory_child(
    name: str, sim_url: str, redis_url: str, *, parked: int, parked_s: float, modes: str
) -> None:
    kit.quiet_relevo_logs()
    sim = SimulatorClient(sim_url)
    out: dict[str, float] = {}
    for mode in modes.split(","):
        sim.set_faults(kit.PRIMARY)
        # Tracemalloc slows every allocation: give relevo's store its longest timeout so a
        # Redis pool wait is not mistaken for an outage (see docs/design/benchmarks.md).
        async with contender(name, sim_url, redis_url, redis_timeout_s=5.0) as turn:
            await drive(turn, 20, 10)
            sim.set_faults(kit.PRIMARY, Fault(latency_s=parked_s))
            held, per_turn = await burst(turn, sim, parked, traced=mode == "heap")
        out[f"{mode}_held"] = held
        out[f"{mode}_bytes"] = per_turn
    sim.set_faults(kit.PRIMARY)
    sim.close()
    print(json.dumps(out), flush=True)


def memory_runs(args: argparse.Namespace, rig: kit.Rig) -> dict[str, dict[str, float]]:
    modes = "heap" if args.quick else "rss,heap"
    out: dict[str, dict[str, float]] = {}
    for name in CONTENDERS:
        cmd = [sys.executable, __file__, "--memory-child", name, rig.sim_url, rig.redis_url]
        cmd += [str(args.parked), str(args.parked_s), modes]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            kit.say(f"# memory child {name} failed: {done.stderr[-2000:]}")
            continue
        out[name] = json.loads(lines[-1])
        kit.say(f"# memory {name}: {out[name]}")
    return out


# --- entry point -----------------------------------------------------------------------------


def report(per: dict[str, list[float]], memory: dict[str, dict[str, float]]) -> None:
    med = {name: kit.median(values) for name, values in per.items()}
    for name, value in med.items():
        kit.figure(f"overhead_cpu_per_turn_{name}", round(value), "us")
    added = {name: med[name] - med["httpx"] for name in ("relevo", "litellm")}
    for name, value in added.items():
        kit.figure(f"overhead_added_cpu_over_httpx_{name}", round(value), "us")
    ratio = added["relevo"] / added["litellm"]
    kit.figure("overhead_ratio_relevo_added_over_litellm_added", round(ratio, 3), "x")
    rounds = [
        (r - h) / (lite - h)
        for r, lite, h in zip(per["relevo"], per["litellm"], per["httpx"], strict=False)
    ]
    kit.figure("overhead_ratio_median_of_rounds", round(kit.median(rounds), 3), "x")
    kit.figure("overhead_ratio_target", TARGET_RATIO, "x")
    kit.figure("overhead_ratio_target_met", int(ratio <= TARGET_RATIO), "bool")
    for name, values in memory.items():
        for mode in ("rss", "heap"):
            if f"{mode}_bytes" in values:
                kib = values[f"{mode}_bytes"] / 1024
                kit.figure(f"memory_per_inflight_turn_{mode}_{name}", round(kib, 1), "KiB")
                kit.figure(f"memory_turns_held_{mode}_{name}", int(values[f"{mode}_held"]), "turns")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs (~60 s)")
    parser.add_argument("--turns", type=int, help="turns per run (2000; quick 400)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds (5; quick 3)")
    parser.add_argument("--concurrency", type=int, default=50, help="turns in flight (50)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="primary latency (20)")
    parser.add_argument("--warmup", type=int, default=200, help="turns per contender first")
    parser.add_argument(
        "--parked", type=int, default=1000, help="turns held for memory (1000; 0 skips it)"
    )
    parser.add_argument("--parked-s", type=float, default=5.0, help="how long they are held")
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="event loop for every contender (asyncio; relevo's workers run uvloop)",
    )
    parser.add_argument("--budget-s", type=float, help="stop starting CPU rounds after (150; 25)")
    args = parser.parse_args(argv)
    defaults = {"turns": 400, "repeats": 3, "budget_s": 25.0} if args.quick else {}
    defaults = defaults or {"turns": 2000, "repeats": 5, "budget_s": 150.0}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.quick:
        args.parked_s = min(args.parked_s, 3.0)
    if args.parked < 0:
        parser.error("--parked must be 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    client_core, server_core = kit.cores()
    kit.pin(0, client_core)
    kit.quiet_relevo_logs()
    started = time.monotonic()
    with kit.rig(server_core) as rig:
        kit.say(f"# sim {rig.sim_url} redis {rig.redis_url} cores {client_core}/{server_core}")
        kit.say(f"# event loop: {args.loop}")
        per = (uvloop.run if args.loop == "uvloop" else asyncio.run)(cpu_runs(args, rig))
        rig.sim.set_faults(kit.PRIMARY)
        memory = memory_runs(args, rig) if args.parked > 0 else {}
    report(per, memory)
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        name, sim_url, redis_url, parked, parked_s, modes = sys.argv[2:8]
        kit.pin(0, kit.cores()[0])
        asyncio.run(
            memory_child(
                name,
                sim_url,
                redis_url,
                parked=int(parked),
                parked_s=float(parked_s),
                modes=modes,
            )
        )
        sys.exit(0)
    sys.exit(main())
