"""Sending turns from async code (a web app) and awaiting what became of them.

    async with Producer.from_settings(settings) as producer:
        handle = await producer.enqueue(request)   # checked here, then sent
        async for text in handle.stream():         # the streamed text, as it arrives
            ...
        result = await handle.result(timeout_s=60)  # TurnResult, or TurnTimeout

Waiting blocks no thread: a waiter polls the turn's stored result on the producer's
one redis.asyncio client, and the polls of all waiters in one loop iteration share
one round trip (`AutoPipeline`). Publishing goes through Celery's `send_task`, so its
signals fire (`before_task_publish`), on a few threads of the producer's own: a slow
broker holds up the caller that enqueues, never the event loop.

Redis commands used: GET on turn results and claims, XREAD on turn streams.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

from celery import Celery
from pydantic import TypeAdapter, ValidationError
from redis.asyncio import Redis

from worker.errors import InputError, RelevoError
from worker.fleet.app import make_app
from worker.fleet.sending import send_turn
from worker.fleet.turnstore import TurnStore
from worker.settings import LimitsSettings, Settings
from worker.turn.intake import checked_turn
from worker.types import TurnId, TurnRequest, TurnResult

__all__ = ["AsyncTurnHandle", "Producer", "TurnTimeout"]

DEFAULT_WAIT_S = 300.0
# How often a waiter asks for the result. Many waiters cost one round trip per poll.
_POLL_S = 0.1
# One XREAD waits this long for text before the stream's reader asks for the result
# (less on a client whose read timeout is shorter: Redis holds the reply that long).
_BLOCK_S = 0.5
_READ_TIMEOUT_S = 2.0
# send_task takes well under a millisecond when the broker answers: a few threads suffice.
_PUBLISH_THREADS = 4
_TURN_ID: TypeAdapter[str] = TypeAdapter(TurnId)


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


class Producer:
    """Sends turns to the fleet and hands back `AsyncTurnHandle`s; use with `async with`.

    `redis` is where the workers keep results (bytes replies, as `RedisSettings.connect`
    makes them); `limits` should be the workers'.
    """

    def __init__(
        self,
        app: Celery,
        redis: Redis,
        *,
        namespace: str = "relevo",
        limits: LimitsSettings | None = None,
    ) -> None:
        self.app = app
        self.redis = redis
        self.limits = limits or LimitsSettings()
        self.store = TurnStore(redis, namespace=namespace)
        self._publisher: ThreadPoolExecutor | None = None
        self._owned = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Producer:
        """A producer on the fleet `settings` describe; it owns its Celery app and client."""
        timeout_s = max(settings.redis.timeout_s, _READ_TIMEOUT_S)
        producer = cls(
            make_app(settings),
            settings.redis.connect(timeout_s=timeout_s),
            namespace=settings.redis.namespace,
            limits=settings.limits,
        )
        producer._owned = True
        return producer

    async def enqueue(self, request: TurnRequest | dict[str, Any] | str | bytes) -> AsyncTurnHandle:
        """Check the turn (`InputError` before anything is sent) and send it.

        A caller cancelled while the turn is being published does not stop the publish.
        """
        turn = checked_turn(request, self.limits)
        if self._publisher is None:
            self._publisher = ThreadPoolExecutor(_PUBLISH_THREADS, "relevo-publish")
        # ignore_result: otherwise Celery subscribes this long-lived process to each turn's
        # result channel and nothing here ever reads it (results come from the turn store).
        send = functools.partial(send_turn, self.app, turn, ignore_result=True)
        # The caller's context goes along (run_in_executor alone drops it): a
        # before_task_publish handler reads the caller's trace context there.
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._publisher, context.run, send)
        return AsyncTurnHandle(turn.turn_id, self.store, streaming=turn.stream)

    def turn(self, turn_id: str) -> AsyncTurnHandle:
        """A handle on a turn sent earlier (by any process); `InputError` if no turn has
        such an id."""
        try:
            _TURN_ID.validate_python(turn_id)
        except ValidationError:
            # As parse_turn_request: name the field, never echo the value.
            raise InputError(
                "turn_id: not a turn id (1 to 128 letters, digits, '_', '.' or '-', "
                "the first a letter, digit or '_')"
            ) from None
        return AsyncTurnHandle(turn_id, self.store)

    async def aclose(self) -> None:
        """Finish the publishes under way; close what `from_settings` opened."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            await asyncio.to_thread(publisher.shutdown)
        if self._owned:
            await asyncio.to_thread(self.app.close)
            await self.redis.aclose()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
