"""CPU per turn of choosing a chain: no chain named (with one chain configured, and with
20), against a named one among 20 chains (the same models), and against an older
checkout's turns (which had one chain), side by side.

Each contender is a child process running healthy, non-streamed turns through `Chain.run`
in that process (no Redis: the open guard), against one simulator in another process;
its CPU time (every thread) per turn is the figure. Contenders run interleaved
(A B C A B C ...), so the machine's noise falls on each alike.

    .venv/bin/python bench/routing_cost.py                      # this checkout alone
    .venv/bin/python bench/routing_cost.py --before ../old-tree  # and an older checkout

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The child: builds a chain on the simulator and runs `turns` turns, CPU timed.
CHILD = r"""
import asyncio, json, os, sys, time
from worker.adapters import make_client
from worker.settings import load_settings
from worker.turn.chain import Chain
from worker.types import Message, TurnRequest

url, chains, named, turns = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
model = lambda vendor, provider, model_id: {
    "vendor": vendor, "context_window": 100000, "input_usd_per_mtok": 1,
    "output_usd_per_mtok": 2, "serve": [{"provider": provider, "model_id": model_id}],
}
data = {
    "chain": {"models": ["openai/alpha", "anthropic/beta"]},
    "providers": {
        "oa": {"kind": "openai", "base_url": url + "/v1", "api_key_env": "BENCH_KEY"},
        "an": {"kind": "anthropic", "base_url": url, "api_key_env": "BENCH_KEY"},
    },
    "models": {"openai/alpha": model("openai", "oa", "alpha"),
               "anthropic/beta": model("anthropic", "an", "beta")},
}
if chains:
    # The same models as [chain]: only the choosing differs.
    same = {"models": ["openai/alpha", "anthropic/beta"]}
    data["chains"] = {f"c{i}": same for i in range(chains)}
settings = load_settings(data=data)
fields = {"chain": named} if named != "-" else {}
hello = (Message(role="user", content="Hi"),)
request = lambda: TurnRequest(tenant_id="acme", messages=hello, **fields)

async def main():
    async with make_client(settings.http) as client:
        chain = Chain.from_settings(settings, client)
        for _ in range(50):
            await chain.run(request())
        began = time.process_time()
        for _ in range(turns // 20):
            results = await asyncio.gather(*(chain.run(request()) for _ in range(20)))
            assert all(r.status.value == "ok" for r in results), results[0]
        print(json.dumps({"cpu_us": (time.process_time() - began) / turns * 1e6}))

asyncio.run(main())
"""


def _run(tree: Path, url: str, chains: int, named: str, turns: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "BENCH_KEY": "k"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(chains), named, str(turns)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an older checkout, run beside this one")
    parser.add_argument("--turns", type=int, default=1000, help="turns per run (1000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--port", type=int, default=8971, help="the simulator's port")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    sim = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "simulate", "--port", str(args.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    contenders = {
        "unnamed": (ROOT, 0, "-"),
        "unnamed_beside_20": (ROOT, 20, "-"),
        "named_of_20": (ROOT, 20, "c7"),
    }
    if args.before is not None:
        contenders["before_unnamed"] = (args.before.resolve(), 0, "-")
    figures: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        import time

        time.sleep(2)
        for round_ in range(args.repeats):
            for name, (tree, chains, named) in contenders.items():
                figures[name].append(_run(tree, url, chains, named, args.turns))
                print(f"round {round_} {name} {figures[name][-1]:.0f} us", file=sys.stderr)
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    base = statistics.median(figures["unnamed"])
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"FIGURE {name}_cpu_per_turn {median:.0f} us")
        print(f"FIGURE {name}_vs_unnamed {median / base:.3f} ratio")


if __name__ == "__main__":
    main()
