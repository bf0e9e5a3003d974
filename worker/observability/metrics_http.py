"""The HTTP endpoint both metrics servers share: their series at `/metrics`, behind a token.

With a token configured (`[observability] metrics_token_file`, or `RELEVO_METRICS_TOKEN`),
every path but `/healthz` wants `Authorization: Bearer <token>` (compared in constant
time) and answers 401 otherwise. `/healthz` answers `ok` to anyone and reads nothing: a
liveness probe needs no secret. The token is never logged, echoed or put in an error.
"""

from __future__ import annotations

import hmac
import re
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from worker.errors import ConfigError
from worker.settings import environment

__all__ = ["TOKEN_ENV", "MetricsServer", "load_token", "serve_body"]

TOKEN_ENV = "RELEVO_METRICS_TOKEN"  # noqa: S105 - a variable's name, not a secret
# Printable, no blanks, long enough not to be guessed: a pasted secret.
_TOKEN = re.compile(r"^[\x21-\x7e]{24,256}$")

StartResponse = Callable[..., Any]
Environ = dict[str, Any]


def load_token(token_file: Path | None) -> str | None:
    """The token of `token_file` (surrounding blanks dropped), else of `RELEVO_METRICS_TOKEN`;
    None when neither is set. A token of the wrong shape raises `ConfigError` naming where
    it came from, never the token."""
    if token_file is not None:
        try:
            token, where = token_file.read_text(encoding="utf-8").strip(), str(token_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"observability.metrics_token_file: cannot read {token_file}: {type(exc).__name__}"
            ) from None
    else:
        token, where = (environment.value(TOKEN_ENV) or "").strip(), TOKEN_ENV
        if not token:
            return None
    if not _TOKEN.match(token):
        raise ConfigError(
            f"the metrics token in {where} must be 24-256 printable characters without "
            "blanks; make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    # A client that connects and sends nothing holds a thread this long, not for ever.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: every 15 s from every Prometheus."""


def _scrape(body: Callable[[], bytes]) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    def scrape(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        data = body()
        start_response(
            "200 OK",
            [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4), ("Content-Length", str(len(data)))],
        )
        return [data]

    return scrape


def _guarded(
    app: Callable[[Environ, StartResponse], Iterable[bytes]],
    token: str | None,
    health: Callable[[], tuple[bool, str]],
) -> Any:
    wanted = None if token is None else f"Bearer {token}".encode()

    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            healthy, said = health()
            status = "200 OK" if healthy else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain")])
            return [f"{said}\n".encode()]
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if wanted is not None and not hmac.compare_digest(given, wanted):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
            )
            return [b"a bearer token is needed\n"]
        return app(environ, start_response)

    return guarded


class MetricsServer:
    """A running endpoint; `close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server, self.thread = server, thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_body(
    addr: str,
    port: int,
    body: Callable[[], bytes],
    token: str | None,
    health: Callable[[], tuple[bool, str]] = lambda: (True, "ok"),
) -> MetricsServer:
    """Serve what `body` returns (Prometheus' text format) at each scrape, on
    `addr`:`port` in a daemon thread (raises `OSError` when the port cannot be bound).
    `/healthz` answers 200 or 503 as `health` says, with its words."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]

    class Server(_Server):
        address_family = family

    app = _guarded(_scrape(body), token, health)
    server = make_server(addr, port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
