"""Client CPU per turn: relevo's chain with its Redis guard against a bare aiohttp POST.

The contenders of bench/overhead.py (relevo's chain with its Redis guard on a private
redis-server, and a bare POST on relevo's HTTP client, httpx over aiohttp's pool) beside
a plain `aiohttp.ClientSession` POST of the same request, JSON decoded: `--concurrency`
in flight (100), interleaved runs, medians; this process pinned to one core, the
simulator and Redis to the other. `--profile FILE` then records relevo's turns alone
with py-spy (`pip install py-spy`) into a flame graph (SVG) or, for a `.txt` name,
collapsed stacks.

    .venv/bin/python bench/client_cpu.py                  # ~40 s
    .venv/bin/python bench/client_cpu.py --profile relevo.txt

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import kit
import overhead

from worker.simulator import Fault

TARGET_RATIO = 3.0
CONTENDERS = ("relevo", "httpx", "aiohttp")


@contextlib.asynccontextmanager
async def bare_aiohttp(sim_url: str) -> AsyncIterator[overhead.Turn]:
    url, headers, body = kit.bare_request(sim_url)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def turn(i: int) -> None:
            async with session.post(url, headers=headers, data=body) as response:
                response.raise_for_status()
                await response.json()

        yield turn


async def measure(args: argparse.Namespace, rig: kit.Rig) -> dict[str, float]:
    rig.sim.set_faults(kit.PRIMARY, Fault(latency_s=args.latency_ms / 1000))
    per: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    async with contextlib.AsyncExitStack() as stack:
        turns = {
            name: await stack.enter_async_context(
                bare_aiohttp(rig.sim_url)
                if name == "aiohttp"
                else overhead.contender(name, rig.sim_url, rig.redis_url)
            )
            for name in CONTENDERS
        }
        for turn in turns.values():
            await overhead.drive(turn, 300, args.concurrency)
        for repeat in range(args.repeats):
            for name in CONTENDERS if repeat % 2 == 0 else CONTENDERS[::-1]:
                us, _ = await overhead.measure_cpu(turns[name], args.turns, args.concurrency)
                per[name].append(us)
                kit.say(f"# {name:<8} #{repeat} {us:7.0f} us/turn")
        if args.profile:
            await profile(args, turns["relevo"])
    figures = {name: kit.median(values) for name, values in per.items()}
    rounds = [r / a for r, a in zip(per["relevo"], per["aiohttp"], strict=True)]
    figures["ratio"] = figures["relevo"] / figures["aiohttp"]
    figures["ratio_median_of_rounds"] = kit.median(rounds)
    return figures


async def profile(args: argparse.Namespace, turn: overhead.Turn) -> None:
    """py-spy on this process for `--profile-s` while relevo's turns run (no pauses)."""
    fmt = "raw" if args.profile.endswith(".txt") else "flamegraph"
    cmd = ["record", "--pid", str(os.getpid()), "--rate", "250", "--nonblocking"]
    cmd += ["--duration", str(args.profile_s), "--format", fmt, "--output", args.profile]
    spy = await asyncio.create_subprocess_exec(
        "py-spy", *cmd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    while spy.returncode is None:
        await overhead.drive(turn, args.turns, args.concurrency)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(spy.wait(), 0.01)
    kit.say(f"# profile of relevo's turns: {args.profile} (py-spy exit {spy.returncode})")


def report(figures: dict[str, float]) -> None:
    for name in CONTENDERS:
        kit.figure(f"client_cpu_per_turn_{name}", round(figures[name]), "us")
    kit.figure("client_cpu_ratio_relevo_over_aiohttp", round(figures["ratio"], 2), "x")
    rounds = round(figures["ratio_median_of_rounds"], 2)
    kit.figure("client_cpu_ratio_median_of_rounds", rounds, "x")
    kit.figure("client_cpu_ratio_target", TARGET_RATIO, "x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns per run (1000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--concurrency", type=int, default=100, help="turns in flight (100)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="primary latency (20)")
    parser.add_argument("--profile", help="then profile relevo's turns with py-spy into this")
    parser.add_argument("--profile-s", type=int, default=10, help="how long to profile (10)")
    args = parser.parse_args()
    return kit.run_pinned(lambda rig: measure(args, rig), report)


if __name__ == "__main__":
    sys.exit(main())
