"""An example web app in front of the fleet: send turns, read results, stream text (SSE).

    pip install -e '.[web]'    # from a checkout: examples/ is not in the package
    RELEVO_CONFIG=examples/chain.toml uvicorn examples.webapp:app
    RELEVO_CONFIG=examples/chain.toml python examples/webapp.py --port 8000

    POST /turns              a TurnRequest (JSON) -> 202 {"turn_id": ...}
                             422 {"error": "messages: ..."} if it is not a valid turn
    GET  /turns/{id}         200 the result; 202 {"status": "pending"}; 404 unknown
    GET  /turns/{id}/stream  text/event-stream: "text" events (data: a JSON string),
                             then one "result" event (data: the result), or "error"

The app sends and reads through one `worker.fleet.Producer`: waiting requests hold
no thread. A turn counts as pending once a worker holds it, or when this process
sent it; a still-queued turn sent by another process reads as unknown until then.
The app calls no model, so it needs none of the providers' API keys.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from kombu.exceptions import OperationalError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from worker.errors import STORE_DOWN, ConfigError, InputError
from worker.fleet import AsyncTurnHandle, Producer, TurnTimeout
from worker.settings import Settings, load_settings

__all__ = ["app", "create_app"]

# Turns this process sent that may still be queued (no worker holds them yet).
_REMEMBERED = 10_000
# A stream waits for the turn's deadline, plus time in the queue.
_QUEUE_SLACK_S = 60.0


class TurnsApi:
    """The endpoints, on the producer the app's lifespan opens."""

    def __init__(self, settings: Settings | None) -> None:
        self._settings = settings
        self._producer: Producer | None = None
        self._sent: dict[str, None] = {}  # insertion-ordered: the oldest go first
        self.stream_timeout_s = _QUEUE_SLACK_S

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        settings = self._settings or _settings_from_env()
        self.stream_timeout_s = settings.turn_deadline_s + _QUEUE_SLACK_S
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
        body = await _body(request, self.producer.limits.max_request_bytes)
        if body is None:
            limit = self.producer.limits.max_request_bytes
            return _error(413, f"(root): the request is over limits.max_request_bytes ({limit})")
        try:
            handle = await self.producer.enqueue(body)
        except InputError as exc:
            return _error(422, str(exc))
        self._remember(handle.turn_id)
        where = f"/turns/{handle.turn_id}"
        return JSONResponse(
            {"turn_id": handle.turn_id, "result": where, "stream": f"{where}/stream"},
            status_code=202,
            headers={"Location": where},
        )

    async def result(self, request: Request) -> Response:
        handle = self._handle(request)
        if handle is None:
            return _unknown()
        found = await handle.peek()
        if found is not None:
            return JSONResponse(found.model_dump(mode="json"))
        if await self._pending(handle):
            return JSONResponse({"turn_id": handle.turn_id, "status": "pending"}, status_code=202)
        return _unknown()

    async def stream(self, request: Request) -> Response:
        handle = self._handle(request)
        if handle is None or (await handle.peek() is None and not await self._pending(handle)):
            return _unknown()
        return StreamingResponse(
            self._events(handle),
            media_type="text/event-stream",
            # Proxies must pass each event on as it comes, not buffer the response.
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _events(self, handle: AsyncTurnHandle) -> AsyncIterator[str]:
        try:
            async for text in handle.stream(timeout_s=self.stream_timeout_s):
                # JSON keeps newlines and carriage returns of the text inside one data line.
                yield _event("text", json.dumps(text, ensure_ascii=False))
            found = await handle.result(timeout_s=self.stream_timeout_s)
        except TurnTimeout as exc:
            yield _event("error", json.dumps({"error": str(exc)}))
            return
        except STORE_DOWN:
            yield _event("error", json.dumps({"error": "the turn store did not answer"}))
            return
        yield _event("result", found.to_json())

    def _handle(self, request: Request) -> AsyncTurnHandle | None:
        try:
            return self.producer.turn(request.path_params["turn_id"])
        except InputError:
            return None  # no turn has such an id

    async def _pending(self, handle: AsyncTurnHandle) -> bool:
        return handle.turn_id in self._sent or await handle.running()

    def _remember(self, turn_id: str) -> None:
        self._sent[turn_id] = None
        if len(self._sent) > _REMEMBERED:
            del self._sent[next(iter(self._sent))]


def create_app(settings: Settings | None = None) -> Starlette:
    """The app; without `settings`, it reads the file `RELEVO_CONFIG` names when it starts."""
    api = TurnsApi(settings)
    unavailable = dict.fromkeys((*STORE_DOWN, OperationalError), _unavailable)
    return Starlette(
        routes=[
            Route("/turns", api.send, methods=["POST"]),
            Route("/turns/{turn_id}", api.result, methods=["GET"]),
            Route("/turns/{turn_id}/stream", api.stream, methods=["GET"]),
        ],
        lifespan=api.lifespan,
        exception_handlers=unavailable,
    )


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


def _event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _unknown() -> JSONResponse:
    return _error(404, "no such turn (unknown, expired, or still queued elsewhere)")


async def _unavailable(request: Request, exc: Exception) -> Response:
    # Redis or the broker did not answer. Retrying a turn with its turn_id is safe: the
    # fleet runs a turn id once, however often it is sent.
    return _error(503, f"the fleet's Redis or broker failed ({type(exc).__name__}); try again")


def _settings_from_env() -> Settings:
    path = os.environ.get("RELEVO_CONFIG")
    if not path:
        raise ConfigError("RELEVO_CONFIG must name the chain configuration (TOML)")
    # The web app calls no model: its own settings need no provider keys.
    return load_settings(path, require_secrets=False)


app = create_app()


def main() -> None:
    parser = argparse.ArgumentParser(description="relevo's example web app")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
