"""Serving the console: in the foreground (`relevo console`) or beside a demo (a thread)."""

from __future__ import annotations

import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
import uvicorn
from redis.asyncio import Redis

from worker.console.app import Clients, build_app
from worker.console.auth import Principal, Role, Tokens, load_tokens
from worker.console.gate import exposure_warnings
from worker.errors import ConfigError
from worker.fleet.operations import OperatorFleet
from worker.settings import ConsoleSettings, RedisSettings

__all__ = ["RunningConsole", "console_settings", "running_console", "serve_console"]

log = structlog.get_logger("relevo.console")

# People wait for a page; the workers' control path keeps its own short timeout.
_PAGE_TIMEOUT_S = 2.0
_START_TIMEOUT_S = 15.0


def console_settings(fleet: OperatorFleet) -> ConsoleSettings:
    """The file's `[console]` with the environment's overrides."""
    if fleet.settings is not None:
        return fleet.settings.console
    return fleet.config.section("console", ConsoleSettings)


def _client(where: RedisSettings, url: str | None) -> Redis:
    if url is not None:  # the role's own user: one server, no Sentinel
        where = where.model_copy(update={"url": url, "sentinel_master": None})
    return where.connect(timeout_s=max(where.timeout_s, _PAGE_TIMEOUT_S))


def _one_store(fleet: OperatorFleet) -> None:
    # One client per role reads both the turns and the shared state: with the shared
    # state on a store of its own, the pages would show an empty fleet.
    if fleet.config.redis.shared_url is not None:
        raise ConfigError(
            "redis.shared_url: relevo console reads breakers, budgets and the kill switch "
            "from redis.url; it cannot serve a fleet whose shared state is elsewhere yet"
        )


def _server(fleet: OperatorFleet, console: ConsoleSettings, tokens: Tokens) -> uvicorn.Server:
    where = fleet.config.redis
    clients = Clients(
        viewer=_client(where, console.viewer_redis_url),
        operator=_client(where, console.operator_redis_url),
    )
    app = build_app(fleet, console, tokens, clients)
    config = uvicorn.Config(
        app,
        host=console.host,
        port=console.port,
        log_level="warning",
        access_log=False,  # the audit trail and the console's own logs say who did what
        lifespan="on",
        server_header=False,
        # uvicorn trusts X-Forwarded-* from loopback by default: only `trusted_proxies`
        # (worker/console/gate.py) may decide whose address and scheme a request has.
        proxy_headers=False,
        forwarded_allow_ips="",
    )
    return uvicorn.Server(config)


def serve_console(fleet: OperatorFleet, console: ConsoleSettings) -> None:
    """Serve until interrupted; the URL is printed once the port listens."""
    _one_store(fleet)
    server = _server(fleet, console, load_tokens(console.tokens_file))
    for warning in exposure_warnings(console):
        log.warning("console.exposed", warning=warning)
        print(f"relevo console: warning: {warning}", file=sys.stderr, flush=True)
    print(f"relevo console: http://{_shown(console.host)}:{console.port}/", flush=True)
    server.run()


@dataclass(frozen=True)
class RunningConsole:
    """A console serving from a thread: where, and the operator token to log in with."""

    url: str
    token: str


@contextmanager
def running_console(fleet: OperatorFleet, *, port: int = 0) -> Iterator[RunningConsole]:
    """The console on loopback, in a thread, with a fresh operator token for this run."""
    _one_store(fleet)
    token = secrets.token_urlsafe(24)
    tokens = Tokens(((Principal("demo", Role.OPERATOR), token),))
    console = console_settings(fleet).model_copy(update={"host": "127.0.0.1", "port": port})
    server = _server(fleet, console, tokens)
    thread = threading.Thread(target=server.run, name="relevo-console", daemon=True)
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(int(_START_TIMEOUT_S / 0.05)):
            if server.started or not thread.is_alive():
                break
            deadline.wait(0.05)
        if not server.started:
            raise RuntimeError("the console did not start")
        bound = server.servers[0].sockets[0].getsockname()
        yield RunningConsole(f"http://127.0.0.1:{bound[1]}/", token)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _shown(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - naming it, not binding it
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host
