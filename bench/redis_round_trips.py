"""Redis round trips and commands per turn, healthy and with one fallback.

Runs the real chain with its Redis guard against simulated providers and a
private redis-server started for the run (so nothing else's traffic is
counted). Round trips are counted on the client (one per packet of commands
sent and answered); scripts and the commands they run are counted on the server
(INFO commandstats). Turns run one at a time, and the healthy ones also 50 at
a time (their round trips are shared: see `worker/guard/autopipeline.py`).

    python bench/redis_round_trips.py [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from worker.adapters import make_client
from worker.demo.run import demo_settings
from worker.guard.redis_guard import open_guard
from worker.settings import BreakerSettings, RedisSettings, Settings
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Message, TurnRequest


class CountingConnection(Connection):
    """A connection that counts how many times it sends (one round trip each)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


@contextmanager
def private_redis() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def server_counts(client: aioredis.Redis) -> tuple[int, int]:
    """(scripts run, every command run, those inside scripts included), minus INFO."""
    stats: dict[str, Any] = await client.info("commandstats")
    scripts = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    scripts += int(stats.get("cmdstat_eval", {}).get("calls", 0))
    every = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return scripts, every


async def measure(
    chain: Chain, client: aioredis.Redis, turns: int, in_flight: int = 1
) -> tuple[float, ...]:
    before_rt = CountingConnection.sent
    before_scripts, before_every = await server_counts(client)
    numbers = iter(range(turns))

    async def lane() -> None:
        for i in numbers:
            request = TurnRequest(
                tenant_id="bench",
                messages=(Message(role="user", content=f"question {i}"),),
            )
            await chain.run(request)

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    round_trips = CountingConnection.sent - before_rt
    scripts, every = await server_counts(client)
    return (
        round_trips / turns,
        (scripts - before_scripts) / turns,
        (every - before_every) / turns,
    )


async def main(turns: int) -> None:
    with Simulator() as sim, private_redis() as url:
        base = demo_settings(sim.url)
        settings: Settings = base.model_copy(
            update={
                "redis": RedisSettings(url=url, namespace="bench"),
                # Keep the breaker closed so every turn of the second run falls back.
                "breakers": BreakerSettings(
                    min_calls_in_window=10**6, consecutive_failures_threshold=10**6
                ),
            }
        )
        pool = aioredis.ConnectionPool.from_url(url, connection_class=CountingConnection)
        counted = aioredis.Redis(connection_pool=pool)
        admin = aioredis.Redis.from_url(url)
        guard = open_guard(settings, counted)
        async with make_client() as http:
            chain = Chain.from_settings(settings, http, guard=guard)
            await measure(chain, admin, 5)  # warm up: scripts loaded, connections open
            healthy = await measure(chain, admin, turns)
            # Turns ready in the same loop iteration share their round trips.
            crowded = await measure(chain, admin, turns, in_flight=50)
            sim.set_faults("claude-sim", Fault(status=529))  # overloaded: next, no retry
            fallback = await measure(chain, admin, turns)
        await counted.aclose()
        await admin.aclose()
    for name, figures in (
        ("healthy_turn", healthy),
        ("healthy_turn_50_in_flight", crowded),
        ("turn_one_fallback", fallback),
    ):
        round_trips, scripts, every = figures
        print(f"FIGURE redis_round_trips_per_{name} {round_trips:.2f} round_trips")
        print(f"FIGURE redis_scripts_per_{name} {scripts:.2f} scripts")
        print(f"FIGURE redis_commands_incl_in_scripts_per_{name} {every:.2f} commands")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
