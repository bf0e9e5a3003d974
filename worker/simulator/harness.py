"""`Simulator`: the simulated providers on a loopback port, served from a background thread."""

from __future__ import annotations

import asyncio
import ssl
import threading
from types import TracebackType

from aiohttp import web

from worker.simulator.faults import CallOutcome, Fault
from worker.simulator.server import SHUTDOWN_GRACE_S, build_app
from worker.simulator.state import RequestRecord, SimState

__all__ = ["Simulator"]

_START_TIMEOUT_S = 10.0


class Simulator:
    """Simulated provider APIs on `host` (an ephemeral port by default), over TLS when
    given a server context (`tls`).

    The server runs on its own event loop in a daemon thread, so sync and async
    callers alike can use it; `stop()` ends stalled calls at once.

        with Simulator() as sim:
            sim.set_faults("claude-x", Fault(status=529, times=1))
            ...  # point a client at sim.url
            assert sim.calls("claude-x", "error") == 1
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._host = host
        self._tls = tls
        self._port = port
        self._state = SimState(seed)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The base URL, like `http://127.0.0.1:PORT` (`https` over TLS; no trailing slash)."""
        if self._url is None:
            raise RuntimeError("the simulator is not running")
        return self._url

    def start(self) -> Simulator:
        """Start serving; returns once the port is listening."""
        if self._thread is not None:
            raise RuntimeError("the simulator was already started")
        self._thread = threading.Thread(target=self._run, name="relevo-simulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S):
            raise RuntimeError("the simulator did not start in time")
        if self._error is not None:
            self._thread.join()
            raise RuntimeError(f"the simulator could not start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        """Stop serving; calls in flight, stalled ones too, end within a fraction of a second."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._url = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_faults(self, model: str, *faults: Fault) -> None:
        """Replace `model`'s fault queue; no faults makes it healthy."""
        self._state.set_faults(model, faults)

    def clear(self) -> None:
        """Forget every model's faults (counts and requests stay)."""
        self._state.clear()

    def set_token_lifetime(self, seconds: float) -> None:
        """How long the OAuth tokens issued from now on are good for (an hour by default)."""
        self._state.tokens.lifetime_s = seconds

    def reset(self) -> None:
        """Forget faults, counts and recorded requests."""
        self._state.reset()

    def calls(self, model: str | None = None, outcome: CallOutcome | str | None = None) -> int:
        """Calls that arrived (outcome None) or ended with `outcome`, for `model` or all models."""
        return self._state.calls(model, outcome)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per model: `calls` and one count per outcome seen."""
        return self._state.counts()

    def requests(self, model: str) -> list[RequestRecord]:
        """`model`'s recent requests, oldest first."""
        return self._state.requests(model)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            try:
                loop.run_until_complete(self._open())
            except Exception as exc:  # reported to start()
                self._error = exc
                return
            finally:
                self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
        finally:
            _finish_tasks(loop)
            loop.close()

    async def _open(self) -> None:
        runner = web.AppRunner(
            build_app(self._state),
            handler_cancellation=True,
            shutdown_timeout=SHUTDOWN_GRACE_S,
            access_log=None,
        )
        await runner.setup()
        self._runner = runner
        site = web.TCPSite(runner, self._host, self._port, ssl_context=self._tls)
        await site.start()
        host, port = runner.addresses[0][:2]
        self._url = f"{'http' if self._tls is None else 'https'}://{host}:{port}"

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _finish_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
