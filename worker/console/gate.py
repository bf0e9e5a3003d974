"""What every request passes before a page: proxies, Host, headers, bounded forms.

- `X-Forwarded-Proto/-For/-Host` count only from `[console] trusted_proxies`: behind a
  TLS proxy the Origin check and the cookies' `Secure` flag then see https and the
  browser's own address, and nobody else can claim either.
- The Host header must be one of `[console] hosts` (default: the loopback names and
  the address it listens on): a page served under a name the operator did not give
  is refused before any handler runs (DNS rebinding).
- Every response carries the security headers (a strict CSP among them).
- A form is read only as `application/x-www-form-urlencoded` and only up to a small
  size, checked on the header and again on the bytes received: no multipart, no
  spooled file, no 100 MB body parsed.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qsl

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worker.errors import InputError
from worker.settings import ConsoleSettings

__all__ = [
    "FormRefused",
    "allowed_hosts",
    "client_address",
    "exposure_warnings",
    "gated",
    "read_form",
]

_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Origin "null"
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
    (b"cache-control", b"no-store"),
]  # fmt: skip
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_FORM = "application/x-www-form-urlencoded"


class FormRefused(InputError):
    """A body the console will not parse: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def allowed_hosts(console: ConsoleSettings) -> frozenset[str]:
    """The host names (no port) a request may name."""
    if console.hosts:
        return frozenset(h.lower().strip("[]") for h in console.hosts)
    return frozenset({*_LOOPBACK, console.host.lower().strip("[]")})


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warnings(console: ConsoleSettings) -> list[str]:
    """What a person should know about how this console is exposed, said at start."""
    warnings = []
    if not _is_loopback(console.host) and not console.trusted_proxies:
        warnings.append(
            f"serving plain HTTP on {console.host}: tokens and session cookies cross the "
            "network unencrypted; listen on 127.0.0.1 behind a TLS proxy "
            "([console] trusted_proxies)"
        )
    if console.viewer_redis_url is None:
        warnings.append(
            "viewers read through [redis] url, a user that may write: set "
            "[console] viewer_redis_url to the read-only viewer user"
        )
    return warnings


def _last(value: str) -> str:
    return value.rsplit(",", 1)[-1].strip()


def _forwarded_client(chain: str, trusted: tuple[object, ...]) -> str | None:
    """The nearest address in X-Forwarded-For that is not one of our proxies."""
    for hop in reversed([h.strip() for h in chain.split(",") if h.strip()]):
        try:
            address = ipaddress.ip_address(hop)
        except ValueError:
            return None
        if not any(address in net for net in trusted):  # type: ignore[operator]
            return hop
    return None


def _headers(scope: Scope) -> dict[bytes, str]:
    return {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[1 : host.find("]")].lower() if "]" in host else host.lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


def gated(app: ASGIApp, console: ConsoleSettings) -> ASGIApp:
    """`app` behind the trusted-proxy rewrite, the Host check and the security headers."""
    trusted = tuple(console.trusted_proxies)
    hosts = allowed_hosts(console)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        scope = _through_proxy(scope, trusted)
        if _host_name(_headers(scope).get(b"host", "")) not in hosts:
            await _refuse(with_headers, 421, "unknown host: add it to [console] hosts")
            return
        await app(scope, receive, with_headers)

    return wrapped


def _through_proxy(scope: Scope, trusted: tuple[object, ...]) -> Scope:
    peer = scope.get("client")
    if not trusted or peer is None:
        return scope
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return scope
    if not any(address in net for net in trusted):  # type: ignore[operator]
        return scope
    headers = _headers(scope)
    scope = dict(scope)
    if (proto := _last(headers.get(b"x-forwarded-proto", ""))) in ("http", "https"):
        scope["scheme"] = proto
    if chain := headers.get(b"x-forwarded-for"):
        client = _forwarded_client(chain, trusted)
        if client is not None:
            scope["client"] = (client, 0)
    if host := _last(headers.get(b"x-forwarded-host", "")):
        kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"host"]
        scope["headers"] = [*kept, (b"host", host.encode("latin-1"))]
    return scope


async def _refuse(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode())],
        }
    )  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def client_address(request: Request) -> str:
    """The browser's address (the proxy's, unless it is trusted and said whose)."""
    return request.client.host if request.client is not None else "-"


async def read_form(request: Request, limit: int) -> FormData:
    """The urlencoded form of `request`, at most `limit` bytes; `FormRefused` otherwise."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != _FORM:
        raise FormRefused(415, f"a form must be sent as {_FORM}")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise FormRefused(413, f"a form is at most {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise FormRefused(413, f"a form is at most {limit} bytes")
    try:
        pairs: list[tuple[str, str | UploadFile]] = []
        pairs += parse_qsl(body.decode("ascii"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(400, "a form must be URL-encoded UTF-8") from None
    return FormData(pairs)
