"""What became of a sent turn: its result and its streamed text.

`TurnHandle` (from `enqueue_turn`) waits through Celery's result backend, blocking;
`AsyncTurnHandle` (from `Producer`) reads the turn store without holding a thread: a
waiter polls the turn's stored result on the producer's one redis.asyncio client, and
the polls of all waiters in one loop iteration share one round trip (`AutoPipeline`).

Redis commands used: GET on turn results and claims, XREAD on turn streams, and ZSCORE
and EXISTS once per wait, and once a second while it waits, to tell an unknown turn
(`UnknownTurn`; `lost` when the store forgot it meanwhile) from one still queued.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from redis.asyncio import Redis

from rediskit import BLIPS
from worker.fleet.errors import (
    StreamRestarted,
    TurnTimeout,
    UnknownTurn,
    check_timeout,
    fleet_errors,
    where,
)
from worker.fleet.results import TurnResults
from worker.fleet.schema import read_result
from worker.fleet.streams import StreamEvent, StreamReader
from worker.fleet.turnstore import TurnStore
from worker.types import TurnResult

__all__ = ["DEFAULT_WAIT_S", "AsyncTurnHandle", "TurnHandle"]

DEFAULT_WAIT_S = 300.0
# A waiter asks this often whether the store still knows the turn, and calls it lost once
# it has not for this long: a worker running a turn writes its claim again with every
# heartbeat (5 s), so a store emptied under a running turn knows it again by then.
_KNOWN_EVERY_S = 1.0
_LOST_AFTER_S = 7.0


@dataclass
class _Known:
    """When a waiter last asked whether the store knows its turn, and since when it has not."""

    asked_at: float
    unknown_since: float | None = None

    def due(self, now: float) -> bool:
        if now - self.asked_at < _KNOWN_EVERY_S:
            return False
        self.asked_at = now
        return True

    def lost(self, known: bool, now: float) -> bool:
        if known:
            self.unknown_since = None
            return False
        if self.unknown_since is None:
            self.unknown_since = now
        return now - self.unknown_since >= _LOST_AFTER_S


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
        """Wait for the turn's result, up to `timeout_s` (None: as long as it takes).

        Raises `UnknownTurn` at once if nothing knows the turn id (never sent, or its
        result expired), `celery.exceptions.TimeoutError` if no result came in time (the
        turn may still finish), `FleetUnavailable` if the fleet's Redis does not answer or
        refuses this client, `Unreadable` if this release cannot read the stored result (a
        newer release wrote it, or it is damaged), and `ValueError` for a negative
        `timeout_s`.
        """
        check_timeout(timeout_s)
        backend = self.result.backend
        with fleet_errors(backend.url):
            if not isinstance(backend, TurnResults):
                raw = self.result.get(timeout=timeout_s, disable_sync_subtasks=False)
                return read_result(raw, self.turn_id)
            if not backend.known(self.turn_id):
                raise UnknownTurn(self.turn_id)
            raw = self._wait(backend, timeout_s)
        return read_result(raw, self.turn_id)

    def _wait(self, backend: TurnResults, timeout_s: float | None) -> Any:
        """The result, asking now and then whether the store still knows the turn."""
        until = None if timeout_s is None else time.monotonic() + timeout_s
        known = _Known(time.monotonic())
        while True:
            step = (
                _KNOWN_EVERY_S if until is None else min(_KNOWN_EVERY_S, until - time.monotonic())
            )
            try:
                # The caller may itself run inside a worker (the embedded demo): waiting
                # here is on purpose, not a task waiting on a subtask.
                return self.result.get(timeout=max(step, 0.0), disable_sync_subtasks=False)
            except CeleryTimeout:
                now = time.monotonic()
                if until is not None and now >= until:
                    raise
                if known.due(now) and known.lost(backend.known(self.turn_id), now):
                    raise UnknownTurn(self.turn_id, lost=True) from None


@dataclass(frozen=True, slots=True)
class AsyncTurnHandle:
    """A turn on its way through the fleet, read from the turn store.

    `streaming` is whether the turn asked to stream: known for a turn this process
    sent, None for a handle made from a turn id (`Producer.turn`). Every method raises
    `FleetUnavailable` when the turn store does not answer or refuses this client (at
    once: a failed read is not retried), `Unreadable` for a stored result or piece of
    stream this release cannot read, and `ValueError` for a negative `timeout_s`.
    """

    turn_id: str
    store: TurnStore
    streaming: bool | None = None

    async def peek(self) -> TurnResult | None:
        """The turn's result if it has finished, now."""
        raw = await self._get(self.store.keys.result(self.turn_id))
        return None if raw is None else read_result(cast(bytes, raw), self.turn_id)

    async def running(self) -> bool:
        """Whether a worker holds the turn now (taken off the queue, no result yet)."""
        return await self._get(self.store.keys.claim(self.turn_id)) is not None

    async def _get(self, key: str) -> object:
        # On the store's AutoPipeline: the GETs of all waiters polling now, one round trip.
        with fleet_errors(where(self.store.redis)):
            slot = self.store.pipes.open()
            slot.pipe.get(key)
            (raw,) = await slot.send()
            if isinstance(raw, BaseException):
                raise raw
        return raw

    async def known(self) -> bool:
        """Whether the turn is queued, running or finished (`TurnStore.known`)."""
        with fleet_errors(where(self.store.redis)):
            return await self.store.known(self.turn_id)

    async def result(self, timeout_s: float = DEFAULT_WAIT_S) -> TurnResult:
        """Wait for the turn's result; `UnknownTurn` at once if nothing knows the turn id
        (never sent, or its result expired), `TurnTimeout` (naming the turn) if no result
        came in time."""
        check_timeout(timeout_s)
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        found = await self.peek()
        if found is None and not await self.known():
            raise UnknownTurn(self.turn_id)
        known = _Known(loop.time())
        while found is None:
            left = until - loop.time()
            if left <= 0:
                raise TurnTimeout(self.turn_id, timeout_s)
            await asyncio.sleep(min(_POLL_S, left))
            found = await self.peek()
            now = loop.time()
            if found is None and known.due(now) and known.lost(await self.known(), now):
                raise UnknownTurn(self.turn_id, lost=True)
        return found

    async def stream(self, *, timeout_s: float = DEFAULT_WAIT_S) -> AsyncIterator[str]:
        """The turn's streamed text, in order, from the start, until the turn ends.

        It ends as `events` does, and raises what it raises. `StreamRestarted` if the
        turn runs again (its worker died) after some text came: drop that text and read
        the stream again, which gives the new run's text from its start (`events`
        carries restarts instead).
        """
        async with aclosing(self.events(timeout_s=timeout_s)) as events:
            async for event in events:
                if event.restart:
                    raise StreamRestarted(self.turn_id)
                yield event.text

    async def events(
        self, *, after: str | None = None, timeout_s: float = DEFAULT_WAIT_S
    ) -> AsyncGenerator[StreamEvent]:
        """The turn's stream as events: its text, and a restart each time a new run of the
        turn begins after text was handed out (drop the text shown so far). `after`
        resumes after that event's `id` (a reconnecting client's Last-Event-ID).

        It ends at the stream's end marker, or once the turn's result is stored (a turn
        that did not stream, or whose stream was cut short), after what the stream holds
        by then: the worker ends a stream no later than it stores the result. A held turn
        being replayed streams over its stored "rejected" result: while its run has not
        ended, the stream is read on.
        `UnknownTurn` at once if nothing knows the turn id, `TurnTimeout` if neither
        happened in `timeout_s`; `Unreadable`, after the events before it, for a piece of
        text this release cannot read (not UTF-8, or a run a newer release streams): the
        text read so far lacks it.
        """
        check_timeout(timeout_s)
        if self.streaming is False:
            await self.result(timeout_s)
            return
        if not await self.known():
            raise UnknownTurn(self.turn_id)
        # Not `TurnStore.tail`, which waits for the end marker alone: a turn that never
        # streamed would keep it waiting for ever.
        redis = self.store.redis
        reader = StreamReader(redis, self.store.keys.chunks(self.turn_id), after=after)
        wait_s, url = _block_s(redis), where(redis)
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        while not reader.ended:
            before = reader.last
            block_ms = max(1, int(min(wait_s, until - loop.time()) * 1000))
            events = await _waited(reader, block_ms, url)
            for event in events:
                yield event.readable(self.turn_id)
            if reader.last != before:
                continue
            if await self.peek() is not None:
                with fleet_errors(url):
                    events = await reader.drain()
                for event in events:
                    yield event.readable(self.turn_id)
                if not reader.running:
                    return
            if loop.time() >= until:
                raise TurnTimeout(self.turn_id, timeout_s)


async def _waited(reader: StreamReader, block_ms: int, url: str) -> list[StreamEvent]:
    """A blocking read, then once more without blocking if its answer came back past the
    client's read timeout: on a loaded machine a wait that ends late is not Redis gone.
    `FleetUnavailable` when the second read fails too."""
    try:
        return await reader.read(block_ms)
    except BLIPS:
        pass
    with fleet_errors(url):
        return await reader.read()


def _block_s(redis: Redis) -> float:
    timeout_s = redis.connection_pool.connection_kwargs.get("socket_timeout")
    return _BLOCK_S if timeout_s is None else min(_BLOCK_S, timeout_s / 2)
