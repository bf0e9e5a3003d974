"""A whole fleet in this process, for tests of code that enqueues turns (and for the demo).

    with stub_fleet(settings) as fleet:
        handle = enqueue_turn(request, app=fleet.app, limits=fleet.settings.limits)
        result = handle.get(timeout_s=10)

`InProcessRedis` serves fakeredis (with Lua) over real TCP on loopback, so Celery,
kombu, breakers and budgets talk to it exactly as to a Redis server; `InProcessWorker`
runs a real Celery worker (threads pool) in a daemon thread. Nothing is mocked: the
turn goes through the broker, the runner, the guard's Lua scripts and the result
store. The providers are whatever `settings` names (`relevo simulate`, say).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from celery import Celery
from fakeredis import TcpFakeServer

from worker.fleet.app import make_app
from worker.fleet.runner import TurnRunner
from worker.settings import Settings

__all__ = ["InProcessRedis", "InProcessWorker", "StubFleet", "stub_fleet"]

_HOST = "127.0.0.1"


class _NoDelayServer(TcpFakeServer):
    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        # The handler writes each reply of a pipeline separately: without this,
        # Nagle's algorithm holds every one back for the client's delayed ACK (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address


class InProcessRedis:
    """A Redis server (fakeredis) in this process, on an ephemeral loopback port.

    `start()` returns its URL; the server runs until `stop()`.
    """

    def __init__(self) -> None:
        self._server: _NoDelayServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        server = _NoDelayServer((_HOST, 0), server_type="redis")
        # One thread per client connection; none of them may keep the process alive.
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="relevo-stub-redis", daemon=True
        )
        self._thread.start()
        return f"redis://{_HOST}:{server.server_address[1]}/0"

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()  # also ends every connection's handler loop
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class InProcessWorker:
    """A real Celery worker for `app` (threads pool), consuming from a daemon thread."""

    def __init__(self, app: Celery, *, concurrency: int, start_timeout_s: float = 15.0) -> None:
        self.app = app
        self.concurrency = concurrency
        self.start_timeout_s = start_timeout_s
        self._controller: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start consuming; returns once the worker takes tasks."""
        ready = threading.Event()
        # Celery sends `worker_ready` from its command-line worker only: do what a worker of
        # this app does once it consumes (re-send lost turns, dispatch the fair queue).
        on_ready = getattr(self.app, "relevo_on_ready", None)

        def consuming(consumer: Any) -> None:
            if on_ready is not None:
                on_ready(sender=consumer)
            ready.set()

        self._controller = self.app.WorkController(
            hostname=f"relevo-stub@{socket.gethostname()}",
            pool="threads",
            concurrency=self.concurrency,
            loglevel="WARNING",
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready_callback=consuming,
        )
        self._thread = threading.Thread(
            target=self._controller.start, name="relevo-stub-worker", daemon=True
        )
        self._thread.start()
        if not ready.wait(self.start_timeout_s):
            raise RuntimeError("the in-process Celery worker did not start in time")

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Warm shutdown: stop consuming, let running turns finish. False if it hung."""
        if self._controller is None or self._thread is None:
            return True
        self._controller.stop(in_sighandler=False)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def __enter__(self) -> InProcessWorker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(frozen=True, slots=True)
class StubFleet:
    """The app to enqueue on, and the settings its worker runs with (Redis in-process)."""

    app: Celery
    settings: Settings


@contextmanager
def stub_fleet(settings: Settings, *, concurrency: int = 8) -> Iterator[StubFleet]:
    """Redis and a Celery worker in this process, running turns with `settings`.

    The Redis URL of `settings` is replaced by the in-process server's; everything
    else (chain, providers, budgets) is used as given.
    """
    with InProcessRedis() as url:
        redis = settings.redis.model_copy(update={"url": url})
        settings = settings.model_copy(update={"redis": redis})
        runner = TurnRunner(settings)
        app = make_app(settings, runner=lambda: runner)
        # The threads pool runs each task on Celery's current app.
        app.set_current()
        app.set_default()
        try:
            with InProcessWorker(app, concurrency=concurrency):
                yield StubFleet(app, settings)
        finally:
            runner.close()
