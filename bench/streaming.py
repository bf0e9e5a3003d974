"""Streaming: time to first token through relevo vs straight to the simulated provider.

The same streamed turn (the primary, OpenAI Chat Completions, SSE) three ways:
relevo's chain with its Redis guard (first `on_text` call), a bare streaming POST on
relevo's HTTP client (`make_client()`; first SSE line carrying content), and
LiteLLM's Router with `stream=True` (first chunk with content). Each turn is read to
its end. Timed in this process, pinned to one core (the simulator and a private
Redis on the other); contenders alternate per round; medians and p99 over all turns.
Run at one turn in flight with an instant provider, then at `--concurrency` in
flight with the provider answering after `--latency-ms`.

    .venv/bin/python bench/streaming.py           # ~80 s
    .venv/bin/python bench/streaming.py --quick   # ~40 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault
from worker.turn.chain import Chain

Ttft = Callable[[int], Awaitable[float]]  # one streamed turn; ms to its first content
CONTENDERS = ("relevo", "httpx", "litellm")
SETTLE_S = 0.3


@contextlib.asynccontextmanager
async def contender(name: str, rig: kit.Rig) -> AsyncIterator[Ttft]:
    if name == "relevo":
        settings = kit.relevo_settings(rig.sim_url, rig.redis_url, namespace=f"st{time.time_ns()}")
        guard = open_guard(settings)
        async with make_client() as client:
            chain = Chain.from_settings(settings, client, guard=guard)

            async def relevo_ttft(i: int) -> float:
                first: list[float] = []

                def on_text(text: str) -> None:
                    if not first:
                        first.append(time.perf_counter())

                started = time.perf_counter()
                result = await chain.run(kit.turn_request(i, stream=True), on_text=on_text)
                if result.status != "ok" or result.step != 0 or not first:
                    raise RuntimeError(f"relevo streamed turn {result.status} {result.step}")
                return (first[0] - started) * 1000

            yield relevo_ttft
        await guard.aclose()
    elif name == "httpx":
        url, headers, body = kit.bare_request(rig.sim_url, stream=True)
        async with make_client() as client:

            async def httpx_ttft(i: int) -> float:
                started, first = time.perf_counter(), 0.0
                async with client.stream("POST", url, headers=headers, content=body) as response:
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        if first or not line.startswith("data: {"):
                            continue
                        choices = json.loads(line[6:]).get("choices") or [{}]
                        if choices[0].get("delta", {}).get("content"):
                            first = time.perf_counter()
                if not first:
                    raise RuntimeError("no content streamed")
                return (first - started) * 1000

            yield httpx_ttft
    else:
        router = kit.litellm_router(rig.sim_url)
        messages = kit.litellm_messages()

        async def litellm_ttft(i: int) -> float:
            return await kit.litellm_first_token_s(router, messages) * 1000

        yield litellm_ttft


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


async def measure(args: argparse.Namespace, rig: kit.Rig) -> dict[int, dict[str, list[float]]]:
    out: dict[int, dict[str, list[float]]] = {}
    async with contextlib.AsyncExitStack() as stack:
        ttfts = {n: await stack.enter_async_context(contender(n, rig)) for n in CONTENDERS}
        for ttft in ttfts.values():
            await lanes(ttft, 50, 5)
        for concurrency in (1, args.concurrency):
            latency = 0.0 if concurrency == 1 else args.latency_ms / 1000
            rig.sim.set_faults(kit.PRIMARY, *([Fault(latency_s=latency)] if latency else []))
            per: dict[str, list[float]] = {n: [] for n in CONTENDERS}
            chunk = max(concurrency, args.turns // args.rounds)
            for r in range(args.rounds):
                for name in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
                    per[name] += await lanes(ttfts[name], chunk, concurrency)
                    # Let work a contender deferred (LiteLLM's logging) finish before the next.
                    await asyncio.sleep(SETTLE_S)
            out[concurrency] = per
            shown = {
                n: (round(kit.pct(v, 50), 2), round(kit.pct(v, 99), 2)) for n, v in per.items()
            }
            kit.say(f"# c{concurrency}: ttft p50/p99 ms {shown}")
    return out


def report(out: dict[int, dict[str, list[float]]]) -> None:
    for concurrency, per in out.items():
        for q in (50, 99):
            values = {name: kit.pct(times, q) for name, times in per.items()}
            for name, value in values.items():
                kit.figure(f"ttft_p{q}_{name}_c{concurrency}", round(value, 3), "ms")
            for name in ("relevo", "litellm"):
                added = values[name] - values["httpx"]
                kit.figure(f"ttft_added_p{q}_{name}_c{concurrency}", round(added, 3), "ms")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer turns (~40 s)")
    parser.add_argument("--turns", type=int, help="turns per contender and load (2000; 400)")
    parser.add_argument("--rounds", type=int, default=10, help="alternations (10)")
    parser.add_argument("--concurrency", type=int, default=10, help="the loaded run (10)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="latency when loaded")
    args = parser.parse_args(argv)
    if args.turns is None:
        args.turns = 400 if args.quick else 2000
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return kit.run_pinned(lambda rig: measure(args, rig), report)


if __name__ == "__main__":
    sys.exit(main())
