"""The Lua scripts in ``breakers/lua``, registered on a client, and the one-command call pattern.

Every operation is one EVALSHA. Its ``*_on(pipe, ...)`` form queues that command on a
caller's pipeline and returns a `Parse`: an async function taking the raw reply (or the
exception in its place, from ``pipe.execute(raise_on_error=False)`` or from a failed
``execute``) and returning the result. The plain async form runs the same command on a
pipeline of its own (still one round trip) and loads the scripts once if Redis lost them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources
from typing import Any, TypeAlias, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

__all__ = ["Parse", "Scripts", "raise_if_error", "run_one", "text"]

T = TypeVar("T")
Parse: TypeAlias = Callable[[object], Awaitable[T]]

_NAMES = ("acquire", "check", "force", "inspect", "kill_off", "kill_on", "record", "take_held")


@cache
def _source(name: str) -> str:
    return resources.files("breakers").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The scripts registered (``register_script``) on one client."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._by_name: dict[str, AsyncScript] = {
            name: redis.register_script(_source(name)) for name in _NAMES
        }

    def queue(self, pipe: Pipeline, name: str, keys: list[str], args: list[str | int]) -> None:
        """Queue one EVALSHA of script `name` on `pipe`."""
        script = self._by_name[name]
        pipe.evalsha(script.sha, len(keys), *keys, *args)

    async def load(self) -> None:
        """SCRIPT LOAD every script (after a Redis restart or SCRIPT FLUSH)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for script in self._by_name.values():
                pipe.script_load(script.script)
            await pipe.execute()


async def run_one(redis: Redis, scripts: Scripts, queue: Callable[[Pipeline], Parse[T]]) -> T:
    """Run one queued command in its own pipeline; reload the scripts once on NOSCRIPT."""
    for attempt in range(2):
        async with redis.pipeline(transaction=False) as pipe:
            parse = queue(pipe)
            (reply,) = await pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError) and attempt == 0:
            await scripts.load()
            continue
        return await parse(reply)
    raise AssertionError("unreachable")  # pragma: no cover


def raise_if_error(reply: object) -> Any:
    """Return `reply` unless it is the exception that took its place."""
    if isinstance(reply, BaseException):
        raise reply
    return reply


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
