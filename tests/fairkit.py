"""Release 0.1.0's fair-queue scripts, called as that release calls them.

Its wheel (`tests/releases/relevo-0.1.0-py3-none-any.whl`) holds its Lua. `Release010`
runs its enqueue, dispatch and release on the keys of a `FairQueue` of this release (the
layout both share during a rolling upgrade), with the KEYS and ARGV that 0.1.0's
`worker/fleet/fairqueue.py` sends, spelled out here so that a change on this side cannot
move them. `tests/test_fair_mixed.py` interleaves them with this release's scripts on one
Redis; `bench/fair_queue_cost.py` measures both.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from worker.fleet.fairqueue import DispatchRound, FairQueue
from worker.fleet.turnstore import TurnKeys

__all__ = ["WHEEL", "Release010", "bodies"]

WHEEL = Path(__file__).resolve().parent / "releases" / "relevo-0.1.0-py3-none-any.whl"
_COMMON = ("pending", "msgs", "index", "ready", "parked", "vtime", "clock", "queued")


def bodies() -> dict[str, str]:
    """Each script as 0.1.0 sends it: its clock and library prepended."""
    with zipfile.ZipFile(WHEEL) as wheel:

        def read(path: str) -> str:
            return wheel.read(path).decode()

        lib = read("breakers/lua/clock.lua") + "\n" + read("worker/fleet/lua/lib.lua") + "\n"
        return {
            name: lib + read(f"worker/fleet/lua/{name}.lua")
            for name in ("enqueue", "dispatch", "release")
        }


class Release010:
    """0.1.0's three calls on the fair queue `fair` uses (namespace, broker's queue, the
    default share, the lease's length)."""

    def __init__(self, fair: FairQueue) -> None:
        self.fair = fair
        self.bodies = bodies()
        self.shas: dict[str, str] = {}
        n = fair.keys.namespace

        def keys(*names: str) -> list[str]:
            return [f"{{{n}}}:fair:{name}" for name in (*_COMMON, *names)]

        self.enqueue_keys = keys("seq", "wake")
        self.dispatch_keys = keys("leases", "inflight", "buckets", "expired")
        self.dispatch_keys += [f"{{{n}}}:budget:shares", TurnKeys(n).sent, fair.queue]
        self.release_keys = keys("leases", "inflight", "wake")

    def enqueue(
        self,
        client: redis.Redis,
        tenant: str,
        turn_id: str,
        *,
        deadline_ms: int = 60_000,
        input_tokens: int = 10,
        message: str,
    ) -> bool:
        """As 0.1.0's broker channel queues a turn, on a blocking client."""
        args = ["", tenant, turn_id, deadline_ms, input_tokens, message]
        sha = self.shas.get("enqueue") or client.script_load(self.bodies["enqueue"])
        self.shas["enqueue"] = sha
        keys = self.enqueue_keys
        return bool(client.evalsha(sha, len(keys), *keys, *args))

    async def dispatch(self, *, most: int, depth: int, drain: bool = False) -> DispatchRound:
        fair = self.fair
        args = ["", most, depth, fair.lease_ms, fair.default.packed(), int(drain)]
        return DispatchRound.from_reply(await self._call("dispatch", self.dispatch_keys, args))

    async def release(self, tenant: str, turn_id: str) -> bool:
        return bool(await self._call("release", self.release_keys, ["", tenant, turn_id]))

    async def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        client: Redis = self.fair.redis
        if name not in self.shas:
            self.shas[name] = await client.script_load(self.bodies[name])
        return await client.evalsha(self.shas[name], len(keys), *keys, *args)
