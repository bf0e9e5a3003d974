"""The event loop a worker process runs its turns on, in a thread of its own: Celery's
threads hand each turn to it and wait for the answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

__all__ = ["LoopThread", "new_event_loop"]

log = structlog.get_logger("relevo.runner")
T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's where it installs (Linux, macOS), asyncio's otherwise (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    # The loop's own bookkeeping was a fifth of a worker's CPU per turn under asyncio's.
    return uvloop.new_event_loop()


class LoopThread:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self, name: str = "relevo-loop") -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the loop and wait for it from this (another) thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        """End what still runs on the loop (as `asyncio.run` does), then the loop itself."""
        try:
            self.run(_cancel_the_rest(), timeout_s=5)
        except (TimeoutError, RuntimeError) as exc:
            log.warning("loop.tasks_left_running", error=type(exc).__name__)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            return  # closing a loop that still runs raises: the process's exit ends it
        # uvloop's close waits for every transport to close, and a connection some client
        # never closed keeps it waiting for ever: give it a few seconds, off this thread.
        closer = threading.Thread(target=self.loop.close, name="relevo-loop-close", daemon=True)
        closer.start()
        closer.join(timeout=5)
        if closer.is_alive():
            log.warning("loop.close_abandoned")


async def _cancel_the_rest() -> None:
    loop = asyncio.get_running_loop()
    rest = [task for task in asyncio.all_tasks(loop) if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    await loop.shutdown_asyncgens()
