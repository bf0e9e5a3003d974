"""Client CPU per LLM call: httpx's own pool vs httpx over aiohttp vs plain aiohttp.

Why relevo's adapters use ``httpx.AsyncClient(transport=httpx_aiohttp.AiohttpTransport())``:
httpx's own async pool (httpcore) costs more client CPU per request the more
requests are in flight, while aiohttp's pool stays flat and httpx's API on top of
it keeps most of that. This script reproduces those rows of
``shared/MEASURED.md`` side by side in one run.

A fake OpenAI-compatible server (aiohttp.web, fixed latency) runs in its own
process pinned to one core; the contenders run in this process, pinned to the
other core, and only this process's CPU time is counted. Each run is a fresh
client sending N requests (at least two per connection), opening its connections
included, as ``MEASURED.md`` did; httpcore's cost is not steady (it is worst
while many connections open or sit idle), so a fixed, cold workload is the
comparable one. Runs are interleaved (A B C A B C ...) and medians reported.
Only 127.0.0.1 is spoken to, and ``--budget-s`` bounds the whole run.

    .venv/bin/python bench/http_clients.py          # ~3 min: 1,000 requests, 10/100/1,000 in flight
    .venv/bin/python bench/http_clients.py --quick  # ~25 s: 300 requests, 10/100 in flight

Output: ``FIGURE <name> <value> <unit>`` lines on stdout, then a table; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import httpx
import httpx_aiohttp
from aiohttp import web
from rich.console import Console
from rich.table import Table

HOST = "127.0.0.1"
PATH = "/v1/chat/completions"
REQUEST_TIMEOUT_S = 120.0
PAYLOAD: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Say hello."}],
    "max_tokens": 16,
}
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }
).encode()

Post = Callable[[], Awaitable[None]]
ClientFactory = Callable[[str, int], contextlib.AbstractAsyncContextManager[Post]]


# --- the fake provider (runs in its own process) ----------------------------------------


def serve(conn: Connection, latency_s: float, core: int | None, lifetime_s: float) -> None:
    """Run the fake server until the parent says stop, goes away, or ``lifetime_s`` passes."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    asyncio.run(_serve(conn, latency_s, lifetime_s))


async def _serve(conn: Connection, latency_s: float, lifetime_s: float) -> None:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(latency_s)
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_post(PATH, chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0, backlog=4096)
    await site.start()
    conn.send(runner.addresses[0][1])
    # The pipe becomes readable on a stop message and on EOF (parent died).
    stop = asyncio.Event()
    asyncio.get_running_loop().add_reader(conn.fileno(), stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), lifetime_s)
    await runner.cleanup()


# --- the contenders ---------------------------------------------------------------------


def pool_limits(concurrency: int) -> httpx.Limits:
    """A pool that keeps one connection per call in flight."""
    return httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)


@contextlib.asynccontextmanager
async def httpx_calls(url: str, client: httpx.AsyncClient) -> AsyncIterator[Post]:
    """Calls through an ``httpx.AsyncClient``, closed on exit."""
    async with client:

        async def post() -> None:
            response = await client.post(url, json=PAYLOAD)
            response.raise_for_status()
            response.json()

        yield post


def httpx_pool(url: str, concurrency: int) -> contextlib.AbstractAsyncContextManager[Post]:
    """``httpx.AsyncClient`` with its own (httpcore) pool sized to the concurrency."""
    limits = pool_limits(concurrency)
    client = httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT_S, trust_env=False)
    return httpx_calls(url, client)


def aiohttp_transport(url: str, concurrency: int) -> contextlib.AbstractAsyncContextManager[Post]:
    """``httpx.AsyncClient`` over ``httpx_aiohttp.AiohttpTransport`` (relevo's choice)."""
    transport = httpx_aiohttp.AiohttpTransport(limits=pool_limits(concurrency))
    client = httpx.AsyncClient(transport=transport, timeout=REQUEST_TIMEOUT_S, trust_env=False)
    return httpx_calls(url, client)


@contextlib.asynccontextmanager
async def aiohttp_session(url: str, concurrency: int) -> AsyncIterator[Post]:
    """Plain ``aiohttp.ClientSession`` with a connector limited to the concurrency."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def post() -> None:
            async with session.post(url, json=PAYLOAD) as response:
                response.raise_for_status()
                await response.json()

        yield post


CONTENDERS: dict[str, ClientFactory] = {
    "httpx_pool": httpx_pool,
    "aiohttp_transport": aiohttp_transport,
    "aiohttp": aiohttp_session,
}
# (numerator, denominator): how much each layer costs relative to the one under it.
RATIOS: tuple[tuple[str, str], ...] = (
    ("httpx_pool", "aiohttp_transport"),
    ("aiohttp_transport", "aiohttp"),
    ("httpx_pool", "aiohttp"),
)


# --- measuring --------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One measured run: client CPU and wall seconds for ``requests`` calls."""

    requests: int
    cpu_s: float
    wall_s: float


@dataclass
class Results:
    """Runs per (contender, concurrency), and notes about what was cut short."""

    runs: dict[tuple[str, int], list[Run]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def drive(post: Post, requests: int, concurrency: int) -> None:
    """Send ``requests`` calls with ``concurrency`` of them in flight."""
    remaining = requests

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await post()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, requests)):
            group.create_task(lane())


def requests_per_run(requests: int, concurrency: int) -> int:
    """At least two calls per connection, so no row measures only connection set-up."""
    return max(requests, 2 * concurrency)


async def measure(factory: ClientFactory, url: str, requests: int, concurrency: int) -> Run:
    """Time ``requests`` calls through a fresh client, opening its connections included."""
    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with factory(url, concurrency) as post:
        await drive(post, requests, concurrency)
        cpu1, wall1 = time.process_time(), time.perf_counter()
    return Run(requests, cpu1 - cpu0, wall1 - wall0)


async def run_all(url: str, args: argparse.Namespace, deadline: float) -> Results:
    """Interleave the contenders per concurrency, ``repeats`` times, until the deadline."""
    results = Results()
    for concurrency in args.concurrency:
        requests = requests_per_run(args.requests, concurrency)
        for repeat in range(args.repeats):
            for name, factory in CONTENDERS.items():
                left = deadline - time.monotonic()
                if left <= 0:
                    results.notes.append(f"budget spent before {name} c{concurrency} #{repeat}")
                    return results
                try:
                    run = await asyncio.wait_for(measure(factory, url, requests, concurrency), left)
                except TimeoutError:
                    results.notes.append(f"budget spent during {name} c{concurrency} #{repeat}")
                    return results
                results.runs.setdefault((name, concurrency), []).append(run)
                print(
                    f"# {name:<18} c{concurrency:<5} #{repeat}  {run.requests:5d} req  "
                    f"{run.cpu_s / run.requests * 1e6:8.0f} us/req  {run.wall_s:6.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return results


# --- reporting --------------------------------------------------------------------------


def cpu_us(runs: Sequence[Run]) -> float:
    """Median client CPU microseconds per request."""
    return statistics.median(r.cpu_s / r.requests * 1e6 for r in runs)


def figures(results: Results) -> list[tuple[str, float, str]]:
    """Every figure as (name, value, unit): per contender and concurrency, then ratios."""
    out: list[tuple[str, float, str]] = []
    for (name, concurrency), runs in results.runs.items():
        prefix = f"{name}_c{concurrency}"
        out.append((f"{prefix}_cpu_per_req", round(cpu_us(runs)), "us"))
        out.append((f"{prefix}_wall", round(statistics.median(r.wall_s for r in runs), 3), "s"))
        rps = statistics.median(r.requests / r.wall_s for r in runs)
        out.append((f"{prefix}_throughput", round(rps), "req/s"))
    concurrencies = sorted({c for _, c in results.runs})
    for top, bottom in RATIOS:
        for concurrency in concurrencies:
            a, b = results.runs.get((top, concurrency)), results.runs.get((bottom, concurrency))
            if a and b:
                ratio = round(cpu_us(a) / cpu_us(b), 2)
                out.append((f"ratio_{top}_over_{bottom}_c{concurrency}", ratio, "x"))
    return out


def table(results: Results, args: argparse.Namespace) -> Table:
    """CPU per request (median, min-max) per contender and concurrency."""
    concurrencies = sorted({c for _, c in results.runs})
    grid = Table(
        title=f"client CPU per request, us: median (min-max) of <= {args.repeats} fresh clients; "
        f"server latency {args.latency_ms:g} ms",
    )
    grid.add_column("client")
    for concurrency in concurrencies:
        requests = requests_per_run(args.requests, concurrency)
        grid.add_column(f"{concurrency:,} in flight\n({requests:,} requests)", justify="right")
    for name in CONTENDERS:
        cells = []
        for concurrency in concurrencies:
            runs = results.runs.get((name, concurrency), [])
            per = [r.cpu_s / r.requests * 1e6 for r in runs]
            cells.append(f"{cpu_us(runs):,.0f} ({min(per):,.0f}-{max(per):,.0f})" if runs else "-")
        grid.add_row(name, *cells)
    return grid


# --- entry point ------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Flags; ``--quick`` changes the defaults for a run of well under 40 s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 requests, 10/100 in flight")
    parser.add_argument("--requests", type=int, help="requests per run, >= 2 per connection (1000)")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(c) for c in s.split(",")], help="e.g. 10,100,1000"
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per row (3)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency (20)")
    parser.add_argument("--budget-s", type=float, help="hard stop for measuring (230; 34)")
    args = parser.parse_args(argv)
    quick = {"requests": 300, "concurrency": [10, 100], "budget_s": 34.0}
    full = {"requests": 1000, "concurrency": [10, 100, 1000], "budget_s": 230.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def pin_cores() -> tuple[int | None, int | None]:
    """Pin this process to one core and return (client core, core for the server)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    os.sched_setaffinity(0, {cores[0]})
    return cores[0], cores[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Start the server, measure, print figures and the table."""
    args = parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    client_core, server_core = pin_cores()
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=serve,
        args=(theirs, args.latency_ms / 1000, server_core, args.budget_s + 60),
        daemon=True,
    )
    server.start()
    try:
        if not ours.poll(30):
            raise RuntimeError("the fake server did not start within 30 s")
        url = f"http://{HOST}:{ours.recv()}{PATH}"
        print(
            f"# {url} latency={args.latency_ms:g}ms requests={args.requests} "
            f"concurrency={args.concurrency} repeats={args.repeats} "
            f"client_core={client_core} server_core={server_core}",
            file=sys.stderr,
        )
        deadline = time.monotonic() + args.budget_s
        results = asyncio.run(run_all(url, args, deadline))
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        server.join(10)
        if server.is_alive():
            server.kill()
    for name, value, unit in figures(results):
        print(f"FIGURE {name} {value} {unit}")
    for note in results.notes:
        print(f"NOTE partial run: {note}")
    Console().print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
