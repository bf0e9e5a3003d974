"""One Redis round trip for the commands that concurrent turns send together.

A worker holds hundreds of turns on one event loop; many of them reach the
guard in the same loop iteration (their HTTP replies arrived together).
`AutoPipeline` puts the commands they queue during one iteration into a single
pipeline, sent once when the loop gets to it, and hands each caller the replies
to its own commands. A lone caller pays one task switch; a busy process sends
far fewer, larger round trips (the per-trip cost is mostly fixed: a pooled
connection, a socket write, a read). The same idea as ioredis' auto-pipelining.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from worker.errors import STORE_DOWN

__all__ = ["AutoPipeline", "Slot"]

# A loop that runs a due timer this late was busy, not waiting on Redis.
_LATE_S = 0.01


@dataclass(slots=True)
class _Batch:
    pipe: Pipeline
    waiting: list[tuple[int, int, asyncio.Future[list[object]]]] = field(default_factory=list)


@dataclass(slots=True)
class Slot:
    """One caller's place in the batch: queue commands on `pipe`, then `send()`."""

    _batch: _Batch
    _start: int

    @property
    def queued(self) -> int:
        """How many commands this caller has queued so far: the index of its next reply."""
        return len(self._batch.pipe) - self._start

    @property
    def pipe(self) -> Pipeline:
        """The shared pipeline; queue this caller's commands on it before `send()`."""
        return self._batch.pipe

    def send(self) -> asyncio.Future[list[object]]:
        """The replies to the commands queued since `open()`, in order.

        A command that failed has its exception in its place; when the whole round
        trip failed, every place holds that exception.
        """
        end = len(self._batch.pipe)
        future: asyncio.Future[list[object]] = asyncio.get_running_loop().create_future()
        self._batch.waiting.append((self._start, end, future))
        return future


class AutoPipeline:
    """Coalesces the pipelines opened in one loop iteration into one round trip."""

    def __init__(self, redis: Redis, *, timeout_s: float | None = None) -> None:
        """`timeout_s` bounds each round trip as a whole (a client made with
        `breakers.connect(..., timed_by_caller=True)` has no other timeout)."""
        self.redis = redis
        self.timeout_s = timeout_s
        self._open: _Batch | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def open(self) -> Slot:
        """A slot in the batch this loop iteration sends (queue, then send, no await between)."""
        batch = self._open
        if batch is None:
            batch = self._open = _Batch(self.redis.pipeline(transaction=False))
            # A task's first step runs after the callbacks already due in this
            # iteration: every turn ready now gets to join before the batch leaves.
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return Slot(batch, len(batch.pipe))

    async def drain(self) -> None:
        """Wait until the batches already open have been sent."""
        await asyncio.gather(*self._sending, return_exceptions=True)

    async def _send(self, batch: _Batch) -> None:
        if self._open is batch:
            self._open = None
        size = len(batch.pipe)
        try:
            async with asyncio.timeout(None) as limit:
                watch = _Deadline(limit, self.timeout_s) if self.timeout_s is not None else None
                try:
                    replies: list[object] = await batch.pipe.execute(raise_on_error=False)
                finally:
                    if watch is not None:
                        watch.cancel()
        except STORE_DOWN as exc:
            replies = [exc] * size
        except BaseException as exc:  # cancelled or a bug: no caller may wait forever
            replies = [exc] * size
            raise
        finally:  # (execute() itself gives the connection back)
            for start, end, future in batch.waiting:
                if not future.done():
                    future.set_result(replies[start:end])


class _Deadline:
    """Expires a round trip `timeout_s` after it left, unless the loop itself was late.

    A loop that ran nothing else for a while (a long callback, a burst of turns) sees
    a reply that came in time and the deadline in the same iteration, and asyncio
    runs the timeout first: the reply is dropped and Redis looks slow when it was
    not. A deadline noticed more than `_LATE_S` late gets one more `timeout_s`.
    """

    def __init__(self, limit: asyncio.Timeout, timeout_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.limit = limit
        self.timeout_s = timeout_s
        self.extended = False
        self.deadline = self.loop.time() + timeout_s
        self.handle = self.loop.call_at(self.deadline, self._expire)

    def _expire(self) -> None:
        now = self.loop.time()
        if now - self.deadline > _LATE_S and not self.extended:
            self.extended = True
            self.deadline = now + self.timeout_s
            self.handle = self.loop.call_at(self.deadline, self._expire)
        else:
            self.limit.reschedule(now)  # expires the `asyncio.timeout` at once

    def cancel(self) -> None:
        self.handle.cancel()
