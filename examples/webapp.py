"""An example web app in front of the fleet: send turns, read results, stream text (SSE).

    pip install -e '.[web]'    # from a checkout: examples/ is not in the package
    export WEBAPP_TOKENS="change-me=acme"    # bearer token = tenant, comma-separated
    RELEVO_CONFIG=examples/chain.toml uvicorn examples.webapp:app
    RELEVO_CONFIG=examples/chain.toml python examples/webapp.py --port 8000

    POST /turns              a TurnRequest (JSON) -> 202 {"turn_id": ...}
                             422 {"error": "messages: ..."} if it is not a valid turn
                             503 if the fleet did not answer before recording it (it
                             will not run; a recorded turn whose publish failed is a 202)
    GET  /turns/{id}         200 the result; 202 {"status": "pending"}; 404 unknown
    GET  /turns/{id}/stream  text/event-stream: "text" events (data: a JSON string),
                             then one "result" event (data: the result), or "error"

Every request carries `Authorization: Bearer <token>` (401 without a known one). The
tenant is the server's to set: `authenticate` maps the caller to a tenant (here a token
table; a real app asks its own sessions or identity provider), a turn naming another
tenant is refused (403), and the turn id is made here (a client's is refused: ids
chosen by clients could claim another tenant's turn). A caller sees only its tenant's
turns; the ids are random, so a turn still on its way is found only by who sent it.

Streams survive a dropped connection and a turn that runs again. Each event has an
`id:` (the stream entry's); a client reconnecting sends the last one it got as
`Last-Event-ID` (a browser's EventSource does by itself) and the stream goes on after
it. A turn whose worker died runs again from the start: a "restart" event tells the
client to drop the text it has, and the new run's text follows (`follow` below is
such a client). While the stream is quiet a comment (": keep-alive") goes out every
`KEEPALIVE_S`, so proxies that close idle connections leave it open; a stream waits
as long as a turn can take when its worker dies (`stream_timeout_s`).

The app sends and reads through one `worker.fleet.Producer`: waiting requests hold
no thread. The app calls no model, so it needs none of the providers' API keys.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from worker.errors import ConfigError, InputError
from worker.fleet import (
    AsyncTurnHandle,
    FleetUnavailable,
    Producer,
    StreamEvent,
    TurnRecorded,
    TurnTimeout,
    UnknownTurn,
)
from worker.settings import Settings, load_settings
from worker.types import TurnResult

__all__ = ["KEEPALIVE_S", "app", "create_app", "follow", "stream_timeout_s", "token_tenants"]

# Turns this process sent that may still be queued (no worker holds them yet).
_REMEMBERED = 10_000
# Time a turn may wait in the queue before a worker takes it.
_QUEUE_SLACK_S = 60.0
# Below the idle timeouts of common proxies and load balancers (60 s and up).
KEEPALIVE_S = 15.0
_EVENT_ID = re.compile(r"\d{1,20}-\d{1,20}")

Authenticate = Callable[[Request], str | None]


def stream_timeout_s(settings: Settings) -> float:
    """How long a stream waits for its turn: a turn whose worker died goes back on the
    queue after the visibility timeout (looked for every restore interval) and then runs
    for up to its deadline again; before all that it may wait in the queue."""
    redelivered_s = settings.visibility_timeout_s + settings.worker.restore_interval_s
    return _QUEUE_SLACK_S + redelivered_s + settings.turn_deadline_s


def token_tenants(spec: str) -> Authenticate:
    """An `authenticate` for "token=tenant,token=tenant": a bearer token names a tenant."""
    table = dict(pair.split("=", 1) for pair in spec.split(",") if "=" in pair)

    def tenant_of(request: Request) -> str | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        # Every entry compared, in constant time: no timing tells a near miss.
        found = [t for known, t in table.items() if hmac.compare_digest(known, token)]
        return found[0] if found else None

    return tenant_of


class TurnsApi:
    """The endpoints, on the producer the app's lifespan opens."""

    def __init__(
        self, settings: Settings | None, authenticate: Authenticate, keepalive_s: float
    ) -> None:
        self._settings = settings
        self._authenticate = authenticate
        self._keepalive_s = keepalive_s
        self._producer: Producer | None = None
        self._sent: dict[str, str] = {}  # turn id -> tenant, oldest first
        self.stream_timeout_s = _QUEUE_SLACK_S

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        settings = self._settings or _settings_from_env()
        self.stream_timeout_s = stream_timeout_s(settings)
        async with Producer.from_settings(settings) as producer:
            self._producer = producer
            yield
        self._producer = None

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("the app is not started (its lifespan opens the producer)")
        return self._producer

    async def send(self, request: Request) -> Response:
        tenant = self._authenticate(request)
        if tenant is None:
            return _unauthorized()
        turn = await self._turn(request, tenant)
        if isinstance(turn, Response):
            return turn
        try:
            handle = await self.producer.enqueue(turn)
        except InputError as exc:
            return _error(422, str(exc))
        except TurnRecorded as exc:
            # Recorded, its publish failed: a worker's sweeper sends it, so it is accepted
            # like any other (a 503 would have the client send it again, under a new id).
            handle = self.producer.turn(exc.turn_id)
        self._remember(handle.turn_id, tenant)
        where = f"/turns/{handle.turn_id}"
        return JSONResponse(
            {"turn_id": handle.turn_id, "result": where, "stream": f"{where}/stream"},
            status_code=202,
            headers={"Location": where},
        )

    async def _turn(self, request: Request, tenant: str) -> dict[str, Any] | Response:
        """The request's turn with the tenant and turn id the server sets, or the error."""
        limit = self.producer.limits.max_request_bytes
        body = await _body(request, limit)
        if body is None:
            return _error(413, f"(root): the request is over limits.max_request_bytes ({limit})")
        try:
            turn = json.loads(body)
        except ValueError as exc:
            return _error(422, f"(root): not JSON ({exc})")
        if not isinstance(turn, dict):
            return _error(422, "(root): a turn request is a JSON object")
        if turn.get("tenant_id", tenant) != tenant:
            return _error(403, "tenant_id: the server sets it from your credentials")
        if "turn_id" in turn:
            return _error(422, "turn_id: the server makes it")
        return turn | {"tenant_id": tenant, "turn_id": uuid.uuid4().hex}

    async def result(self, request: Request) -> Response:
        found = await self._find(request)
        if isinstance(found, Response):
            return found
        handle, result = found
        if result is not None:
            return JSONResponse(result.model_dump(mode="json"))
        return JSONResponse({"turn_id": handle.turn_id, "status": "pending"}, status_code=202)

    async def stream(self, request: Request) -> Response:
        after = request.headers.get("last-event-id") or None
        if after is not None and not _EVENT_ID.fullmatch(after):
            return _error(400, "Last-Event-ID: not an event id of this stream")
        found = await self._find(request)
        if isinstance(found, Response):
            return found
        return StreamingResponse(
            self._events(found[0], after),
            media_type="text/event-stream",
            # Proxies must pass each event on as it comes, not buffer the response.
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _events(self, handle: AsyncTurnHandle, after: str | None) -> AsyncIterator[str]:
        events = handle.events(after=after, timeout_s=self.stream_timeout_s)
        try:
            async for event in _beating(events, self._keepalive_s):
                if event is None:
                    yield ": keep-alive\n\n"
                elif event.restart:
                    yield _event("restart", "{}", event.id)
                else:
                    # JSON keeps newlines and carriage returns of the text inside one data line.
                    yield _event("text", json.dumps(event.text, ensure_ascii=False), event.id)
            found = await handle.result(timeout_s=self.stream_timeout_s)
        except (TurnTimeout, UnknownTurn) as exc:  # unknown: its result expired meanwhile
            yield _event("error", json.dumps({"error": str(exc)}))
            return
        except FleetUnavailable:
            yield _event("error", json.dumps({"error": "the turn store did not answer"}))
            return
        yield _event("result", found.to_json())

    async def _find(self, request: Request) -> tuple[AsyncTurnHandle, TurnResult | None] | Response:
        """The caller's turn and its result if finished; else the error to answer."""
        tenant = self._authenticate(request)
        if tenant is None:
            return _unauthorized()
        try:
            handle = self.producer.turn(request.path_params["turn_id"])
        except InputError:
            return _unknown()  # no turn has such an id
        result = await handle.peek()
        if result is not None:
            return (handle, result) if result.tenant_id == tenant else _unknown()
        sender = self._sent.get(handle.turn_id)
        # Sent by another replica of this app and running: the random id is the key to it.
        if sender == tenant or (sender is None and await handle.running()):
            return handle, None
        return _unknown()

    def _remember(self, turn_id: str, tenant: str) -> None:
        self._sent[turn_id] = tenant
        if len(self._sent) > _REMEMBERED:
            del self._sent[next(iter(self._sent))]


def create_app(
    settings: Settings | None = None,
    *,
    authenticate: Authenticate | None = None,
    keepalive_s: float | None = None,
) -> Starlette:
    """The app; without `settings`, it reads the file `RELEVO_CONFIG` names when it starts.

    `authenticate` names the caller's tenant (None: not a caller); without it, bearer
    tokens from `WEBAPP_TOKENS` ("token=tenant,..."). `keepalive_s`: else
    `WEBAPP_KEEPALIVE_S`, else `KEEPALIVE_S`.
    """
    who = authenticate or token_tenants(os.environ.get("WEBAPP_TOKENS", ""))
    quiet_s = keepalive_s or float(os.environ.get("WEBAPP_KEEPALIVE_S") or KEEPALIVE_S)
    api = TurnsApi(settings, who, quiet_s)
    return Starlette(
        routes=[
            Route("/turns", api.send, methods=["POST"]),
            Route("/turns/{turn_id}", api.result, methods=["GET"]),
            Route("/turns/{turn_id}/stream", api.stream, methods=["GET"]),
        ],
        lifespan=api.lifespan,
        exception_handlers={FleetUnavailable: _unavailable},
    )


async def _beating(
    events: AsyncGenerator[StreamEvent], every_s: float
) -> AsyncIterator[StreamEvent | None]:
    """`events`, with a None after each `every_s` without one."""
    pending = asyncio.ensure_future(anext(events))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            yield event
            pending = asyncio.ensure_future(anext(events))
    finally:
        # The client went away, or the stream ended: stop reading it.
        pending.cancel()
        await asyncio.wait({pending})
        await events.aclose()


async def _body(request: Request, limit: int) -> bytes | None:
    """The request body, or None past `limit` bytes (read no further than that)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _event(name: str, data: str, event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {name}\ndata: {data}\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _unauthorized() -> JSONResponse:
    return _error(401, "unknown caller: send Authorization: Bearer <token>")


def _unknown() -> JSONResponse:
    return _error(404, "no such turn (unknown, expired, or still queued elsewhere)")


async def _unavailable(request: Request, exc: Exception) -> Response:
    # Redis or the broker did not answer before the turn was recorded (TurnNotSent): it
    # will not run, so the client may send it again.
    return _error(503, "the fleet's Redis or broker did not answer; try again")


def _settings_from_env() -> Settings:
    path = os.environ.get("RELEVO_CONFIG")
    if not path:
        raise ConfigError("RELEVO_CONFIG must name the chain configuration (TOML)")
    # The web app calls no model: its own settings need no provider keys.
    return load_settings(path, require_secrets=False)


app = create_app()


async def follow(
    client: httpx.AsyncClient, turn_id: str, *, attempts: int = 5
) -> tuple[str, dict[str, Any]]:
    """A client of `GET /turns/{id}/stream`: the turn's text and its result.

    A dropped connection is resumed after the last event id seen (`Last-Event-ID`); a
    "restart" event drops the text so far. `client` carries the base URL and credentials.
    """
    text, last = "", None
    for _ in range(attempts):
        headers = {"Last-Event-ID": last} if last else {}
        try:
            async with client.stream("GET", f"/turns/{turn_id}/stream", headers=headers) as got:
                got.raise_for_status()
                async for event_id, name, data in _sse(got.aiter_lines()):
                    last = event_id or last
                    if name == "restart":
                        text = ""
                    elif name == "text":
                        text += json.loads(data)
                    elif name == "result":
                        return text, json.loads(data)
                    elif name == "error":
                        raise RuntimeError(json.loads(data)["error"])
        except httpx.TransportError:
            continue  # connection lost: resume after `last`
    raise RuntimeError(f"turn {turn_id}: the stream kept breaking")


async def _sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str | None, str, str]]:
    """(id, event, data) of each Server-Sent Event; comments (keep-alives) are skipped."""
    event_id, name, data = None, "message", []
    async for line in lines:
        if not line:
            if data:
                yield event_id, name, "\n".join(data)
            event_id, name, data = None, "message", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                event_id = value
            elif field == "event":
                name = value
            elif field == "data":
                data.append(value)


def main() -> None:
    parser = argparse.ArgumentParser(description="relevo's example web app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
