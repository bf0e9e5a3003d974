"""The fleet the demo drives: embedded in this process, with the parts it needs to do so.

`InProcessRedis` serves fakeredis (with Lua) over real TCP on loopback, so
Celery, kombu, breakers and budgets talk to it exactly as to a Redis server.
`InProcessWorker` runs a real Celery worker (threads pool) in a daemon thread.
`embedded_fleet` puts them together with simulated providers.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from celery import Celery
from fakeredis import TcpFakeServer

from worker.demo.plan import render_config
from worker.settings import Settings, load_settings
from worker.simulator import Simulator

__all__ = ["Fleet", "InProcessRedis", "InProcessWorker", "embedded_fleet"]

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
            target=server.serve_forever, name="relevo-demo-redis", daemon=True
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
        self._controller = self.app.WorkController(
            hostname=f"relevo-demo@{socket.gethostname()}",
            pool="threads",
            concurrency=self.concurrency,
            loglevel="WARNING",
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready_callback=lambda consumer: ready.set(),
        )
        self._thread = threading.Thread(
            target=self._controller.start, name="relevo-demo-worker", daemon=True
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
class Fleet:
    """What the demo drives: where to send turns, the simulator, the settings, a description."""

    mode: str
    app: Celery
    sim: Simulator
    settings: Settings
    header: str


@contextmanager
def embedded_fleet(concurrency: int) -> Iterator[Fleet]:
    """Redis, simulated providers and a Celery worker, all in this process.

    Ignores RELEVO_* environment variables: nothing may point it elsewhere.
    """
    for name in [n for n in os.environ if n.startswith("RELEVO_")]:
        del os.environ[name]
    with (
        InProcessRedis() as redis_url,
        Simulator() as sim,
        tempfile.TemporaryDirectory(prefix="relevo-demo-") as tmp,
    ):
        path = Path(tmp) / "demo.toml"
        path.write_text(render_config(sim_url=sim.url, redis_url=redis_url), encoding="utf-8")
        settings = load_settings(path)
        from worker.fleet.app import make_app
        from worker.fleet.runner import TurnRunner

        runner = TurnRunner(settings)
        app = make_app(settings, runner=lambda: runner)
        # The threads pool runs each task on Celery's current app.
        app.set_current()
        app.set_default()
        header = (
            f"embedded: Redis (fakeredis) and a Celery worker (threads x{concurrency}) "
            "in this process, simulated providers"
        )
        try:
            with InProcessWorker(app, concurrency=concurrency):
                yield Fleet("embedded", app, sim, settings, header)
        finally:
            runner.close()
