"""Lua scripts: read from ``.lua`` files, called by SHA1, NOSCRIPT recognised here only.

`LuaScripts` reads ``<package>/<folder>/*.lua``. A set with a library (the default)
prepends ``rediskit/lua/clock.lua`` and the folder's ``lib.lua`` to each script, and ARGV[1]
of each is the clock: "" for the Redis server's TIME, or epoch milliseconds from a test's
`ManualClock`. A set without one sends each file as written, with the caller's ARGV.

Each script's header names its KEYS and ARGV in order (tests/test_lua_keys.py holds the
callers to it). A script is sent one of three ways, and each handles NOSCRIPT once:

- `call` / `call_sync`: alone, async or blocking; on NOSCRIPT, sent again as EVAL (which
  loads it). A client that may only run scripts by SHA (deploy/redis/users.acl.in's
  producer) gets `NoPermissionError` from that EVAL.
- `queue`: on a caller's pipeline; `reloading` sends that pipeline again once, after
  `load`, when a reply is NOSCRIPT (`run` does it all for a pipeline of its own).
- `queue_whole`: on a caller's pipeline as EVAL, for one-off commands (no NOSCRIPT).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from rediskit.replies import Parse

__all__ = ["LuaScripts"]

T = TypeVar("T")
_LIBRARIES = ("clock", "lib")  # prepended, not scripts of their own


def _folder(package: str, folder: str) -> Traversable:
    return resources.files(package).joinpath(*folder.split("/"))


def _read(package: str, folder: str, name: str) -> str:
    return _folder(package, folder).joinpath(f"{name}.lua").read_text(encoding="utf-8")


class LuaScripts:
    """One folder's Lua scripts, called by SHA1; reading them never touches Redis."""

    def __init__(self, package: str, folder: str = "lua", *, library: bool = True) -> None:
        """`library`: prepend the clock and the folder's ``lib.lua``, ARGV[1] the clock."""
        self.package, self.folder, self.clocked = package, folder, library
        self.lib = ""
        if library:
            self.lib = _read("rediskit", "lua", "clock") + "\n" + _read(package, folder, "lib")
            self.lib += "\n"
        names = sorted(
            entry.name.removesuffix(".lua")
            for entry in _folder(package, folder).iterdir()
            if entry.name.endswith(".lua")
        )
        self.bodies = {
            n: self.lib + _read(package, folder, n)
            for n in names
            if not (library and n in _LIBRARIES)
        }
        self._shas = {
            name: hashlib.sha1(body.encode(), usedforsecurity=False).hexdigest()
            for name, body in self.bodies.items()
        }

    def sha(self, name: str) -> str:
        """The SHA1 an EVALSHA of `name` is sent with."""
        return self._shas[name]

    def header(self, name: str) -> str:
        """The script's own text as written (its header first), without the library."""
        return _read(self.package, self.folder, name)

    def _args(self, name: str, keys: list[str], args: list[Any], now_ms: int | None) -> list[Any]:
        """EVALSHA's arguments: the SHA, the keys, then (with a library) the clock first."""
        clock: list[Any] = ["" if now_ms is None else now_ms] if self.clocked else []
        return [self._shas[name], len(keys), *keys, *clock, *args]

    def queue(
        self,
        pipe: Any,
        name: str,
        keys: list[str],
        args: list[Any],
        now_ms: int | None = None,
    ) -> None:
        """Queue one EVALSHA of `name` on `pipe`: ARGV[1] is `now_ms` (None: server TIME)."""
        # As a raw command: redis-py's cluster pipeline blocks its `evalsha` method, yet
        # routes a raw EVALSHA by its keys (one slot per script, as every key is tagged).
        pipe.execute_command("EVALSHA", *self._args(name, keys, args, now_ms))

    def queue_whole(self, pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Queue `name` as EVAL, the script sent whole: for a one-off command (a migration)
        that should not depend on what Redis has loaded."""
        pipe.execute_command("EVAL", self.bodies[name], *self._args(name, keys, args, None)[1:])

    async def call(
        self, redis: Any, name: str, keys: list[str], args: list[Any], now_ms: int | None = None
    ) -> Any:
        """Run `name` alone, and its reply; on NOSCRIPT, once more as EVAL (which loads it)."""
        sent = self._args(name, keys, args, now_ms)
        try:
            return await redis.execute_command("EVALSHA", *sent)
        except NoScriptError:
            return await redis.execute_command("EVAL", self.bodies[name], *sent[1:])

    def call_sync(
        self, client: Any, name: str, keys: list[str], args: list[Any], now_ms: int | None = None
    ) -> Any:
        """`call` on a blocking client (a broker channel's)."""
        sent = self._args(name, keys, args, now_ms)
        try:
            return client.execute_command("EVALSHA", *sent)
        except NoScriptError:
            return client.execute_command("EVAL", self.bodies[name], *sent[1:])

    async def load(self, redis: Redis) -> None:
        """SCRIPT LOAD every script in one round trip (after a restart or SCRIPT FLUSH);
        on a Redis Cluster, one call per script, each sent to every primary."""
        if isinstance(redis, RedisCluster):
            for body in self.bodies.values():
                await redis.script_load(body)
            return
        async with redis.pipeline(transaction=False) as pipe:
            for body in self.bodies.values():
                pipe.script_load(body)
            await pipe.execute()

    async def keep_loaded(self, redis: Redis, names: tuple[str, ...]) -> int:
        """SCRIPT LOAD those of `names` the server lacks, for users who may run them by SHA
        and not load them (deploy/redis/users.acl.in); how many were missing."""
        if isinstance(redis, RedisCluster):  # per primary: load them all, each everywhere
            for name in names:
                await redis.script_load(self.bodies[name])
            return len(names)
        there = await redis.script_exists(*(self._shas[n] for n in names))
        missing = [name for name, known in zip(names, there, strict=True) if not known]
        if missing:
            async with redis.pipeline(transaction=False) as pipe:
                for name in missing:
                    pipe.script_load(self.bodies[name])
                await pipe.execute()
        return len(missing)

    @staticmethod
    def lost(replies: list[Any]) -> bool:
        """Whether Redis had forgotten a script of these pipelined replies (NOSCRIPT)."""
        return any(isinstance(r, NoScriptError) for r in replies)

    @classmethod
    async def reloading(
        cls, send: Callable[[], Awaitable[list[Any]]], load: Callable[[], Awaitable[object]]
    ) -> list[Any]:
        """The replies of `send()` (one pipeline, queued and sent); when Redis had forgotten
        a script of them (a restart, SCRIPT FLUSH), `load()` and `send()` once more."""
        replies = await send()
        if cls.lost(replies):
            await load()
            replies = await send()
        return replies

    async def run(self, redis: Redis, queue: Callable[[Pipeline], Parse[T]]) -> T:
        """Send what `queue` queues on a pipeline of its own; reload once on NOSCRIPT.

        `parse` gets the first reply: that of the script (what `queue` queues after it is
        bookkeeping, such as the ledger's tenants set)."""
        parses: list[Parse[T]] = []

        async def send() -> list[Any]:
            async with redis.pipeline(transaction=False) as pipe:
                parses.append(queue(pipe))
                return await pipe.execute(raise_on_error=False)

        replies = await self.reloading(send, lambda: self.load(redis))
        return await parses[-1](replies[0])
