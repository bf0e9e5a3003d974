"""What became of a sent turn: its result and its streamed text.

`TurnHandle` (from `enqueue_turn`) waits through Celery's result backend, blocking;
`AsyncTurnHandle` (from `Producer`) reads the turn store without holding a thread: a
waiter polls the turn's stored result on the producer's one redis.asyncio client, and
the polls of all waiters in one loop iteration share one round trip (`AutoPipeline`).

Redis commands used: GET on turn results and claims, XREAD on turn streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from celery.result import AsyncResult
from redis.asyncio import Redis

from worker.errors import RelevoError
from worker.fleet.turnstore import TurnStore
from worker.types import TurnResult

__all__ = ["DEFAULT_WAIT_S", "AsyncTurnHandle", "TurnHandle", "TurnTimeout"]

DEFAULT_WAIT_S = 300.0
# How often a waiter asks for the result. Many waiters cost one round trip per poll.
_POLL_S = 0.1
# One XREAD waits this long for text before the stream's reader asks for the result
# (less on a client whose read timeout is shorter: Redis holds the reply that long).
_BLOCK_S = 0.5


@dataclass(frozen=True)
class TurnHandle:
    """A turn on its way through the fleet; `result` is Celery's AsyncResult."""

    turn_id: str
    result: AsyncResult

    def get(self, timeout_s: float | None = None) -> TurnResult:
        """Wait for the turn's result."""
        # The caller may itself run inside a worker (the embedded demo): waiting
        # here is on purpose, not a task waiting on a subtask.
        raw = self.result.get(timeout=timeout_s, disable_sync_subtasks=False)
        return TurnResult.model_validate(raw)


class TurnTimeout(RelevoError, TimeoutError):
    """No result for the turn in time: still queued or running, lost, or never sent."""

    def __init__(self, turn_id: str, waited_s: float) -> None:
        super().__init__(
            f"turn {turn_id!r}: no result after {waited_s:g} s "
            "(still queued or running, or unknown)"
        )
        self.turn_id = turn_id
        self.waited_s = waited_s


@dataclass(frozen=True, slots=True)
class AsyncTurnHandle:
    """A turn on its way through the fleet, read from the turn store.

    `streaming` is whether the turn asked to stream: known for a turn this process
    sent, None for a handle made from a turn id (`Producer.turn`).
    """

    turn_id: str
    store: TurnStore
    streaming: bool | None = None

    async def peek(self) -> TurnResult | None:
        """The turn's result if it has finished, now."""
        raw = await self._get(self.store.keys.result(self.turn_id))
        return None if raw is None else TurnResult.model_validate_json(cast(bytes, raw))

    async def running(self) -> bool:
        """Whether a worker holds the turn now (taken off the queue, no result yet)."""
        return await self._get(self.store.keys.claim(self.turn_id)) is not None

    async def _get(self, key: str) -> object:
        # On the store's AutoPipeline: the GETs of all waiters polling now, one round trip.
        slot = self.store.pipes.open()
        slot.pipe.get(key)
        (raw,) = await slot.send()
        if isinstance(raw, BaseException):
            raise raw
        return raw

    async def result(self, timeout_s: float = DEFAULT_WAIT_S) -> TurnResult:
        """Wait for the turn's result; `TurnTimeout` (naming the turn) if none in time."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        while (found := await self.peek()) is None:
            left = until - loop.time()
            if left <= 0:
                raise TurnTimeout(self.turn_id, timeout_s)
            await asyncio.sleep(min(_POLL_S, left))
        return found

    async def stream(self, *, timeout_s: float = DEFAULT_WAIT_S) -> AsyncIterator[str]:
        """The turn's streamed text, in order, from the start, until the turn ends.

        It ends at the stream's end marker, or once the turn's result is stored (a turn
        that did not stream, or whose stream was cut short), after what the stream holds
        by then: the worker ends a stream before it stores the result. `TurnTimeout` if
        neither happened in `timeout_s`.
        """
        if self.streaming is False:
            await self.result(timeout_s)
            return
        # Read with our own cursor rather than `TurnStore.tail`, which waits for the end
        # marker alone: a turn that never streamed would keep it waiting for ever.
        redis, key, last = self.store.redis, self.store.keys.chunks(self.turn_id), "0-0"
        wait_s = _block_s(redis)
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        finished = False
        while True:
            # Once finished, only what is there already: block=None reads without waiting.
            block = None if finished else max(1, int(min(wait_s, until - loop.time()) * 1000))
            batches: Any = await redis.xread({key: last}, block=block, count=100)
            for _, entries in batches or ():
                for entry_id, fields in entries:
                    last = entry_id
                    if b"end" in fields:
                        return
                    yield bytes(fields[b"text"]).decode()
            if batches:
                continue
            if finished:
                return
            finished = await self.peek() is not None
            if not finished and loop.time() >= until:
                raise TurnTimeout(self.turn_id, timeout_s)


def _block_s(redis: Redis) -> float:
    timeout_s = redis.connection_pool.connection_kwargs.get("socket_timeout")
    return _BLOCK_S if timeout_s is None else min(_BLOCK_S, timeout_s / 2)
