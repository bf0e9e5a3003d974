"""Answering one provider call: healthy, or misbehaving as its `Fault` says.

On a stream, content pieces (see `worker.simulator.wire`) are what the token
counts of `stall_after_tokens` and `error_after_tokens` count. A non-streaming
call has no pieces: its stalls come after the headers, before the body, and
`error_after_tokens` tears the body half-way and drops the connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from worker.simulator.faults import API_KEY_PLACEHOLDER, Body, CallOutcome, Fault
from worker.simulator.state import CallTicket
from worker.simulator.wire import CannedReply, Dialect, Inspection, build_reply

__all__ = ["Call"]


class Call:
    """One provider call, answered as its fault says; counts its outcome on its ticket."""

    def __init__(
        self,
        request: web.Request,
        dialect: Dialect,
        *,
        ticket: CallTicket,
        fault: Fault,
        model: str,
        stream: bool,
        api_key: str,
    ) -> None:
        """`api_key` is the request's key when the fault echoes it, else empty."""
        self.request = request
        self.api_key = api_key
        self.dialect = dialect
        self.ticket = ticket
        self.fault = fault
        self.model = model
        self.stream = stream
        self.silent = False
        self.status: int | None = None
        self.response: web.StreamResponse | None = None

    async def run(self, inspection: Inspection) -> web.StreamResponse:
        """Answer the call; cancellation (client gone, server stopping) is the caller's to count."""
        fault = self.fault
        await self._silence(fault.latency_s + fault.stall_first_byte_s)
        if fault.status is not None:
            self.status = fault.status
            response = self._error_response(fault.status)
            self.ticket.finish(CallOutcome.ERROR, fault.status)
            return response
        reply = build_reply(self.ticket.seq, self.model, fault, inspection)
        if self.stream:
            return await self._stream(reply)
        return await self._json(reply)

    async def _silence(self, seconds: float) -> None:
        if seconds > 0:
            self.silent = True
            await asyncio.sleep(seconds)
            self.silent = False

    async def _open(self, content_type: str) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = content_type
        response.headers["Cache-Control"] = "no-cache"
        self.response = response
        self.status = 200
        await response.prepare(self.request)
        # aiohttp holds headers back until the first body bytes; a stall must follow an open stream.
        self.request.writer.send_headers()
        return response

    async def _json(self, reply: CannedReply) -> web.StreamResponse:
        fault = self.fault
        data = json.dumps(self.dialect.reply_body(reply)).encode()
        if fault.error_after_tokens is not None:
            # A whole body has no "after N tokens": tear it half-way instead.
            response = await self._open("application/json")
            await response.write(data[: len(data) // 2])
            return self._drop(response)
        if fault.stall_before_content_s or fault.stall_after_tokens is not None:
            response = await self._open("application/json")
            await self._silence(fault.stall_before_content_s + fault.stall_after_s)
            await response.write(data)
        else:
            response = web.Response(body=data, content_type="application/json")
            self.status = 200
        self.ticket.finish(CallOutcome.OK, 200)
        return response

    async def _stream(self, reply: CannedReply) -> web.StreamResponse:
        fault, dialect = self.fault, self.dialect
        # Server-sent events, but for Bedrock's binary event stream.
        response = await self._open(getattr(dialect, "stream_content_type", "text/event-stream"))
        for chunk in dialect.preamble(reply):
            await response.write(chunk)
        await self._silence(fault.stall_before_content_s)
        pieces = dialect.pieces(reply)
        error_at = _clamp(fault.error_after_tokens, len(pieces))
        stall_at = _clamp(fault.stall_after_tokens, len(pieces))
        for i in range(len(pieces) + 1):
            if i == stall_at:
                await self._silence(fault.stall_after_s)
            if i == error_at:
                if fault.drop:
                    return self._drop(response)
                await response.write(dialect.stream_error(fault.stream_error))
                # Counted before the stream ends, so a client that read it all sees the count.
                self.ticket.finish(CallOutcome.STREAM_ERROR, 200)
                await response.write_eof()
                return response
            if i == len(pieces):
                break
            if i and fault.token_interval_s:
                await asyncio.sleep(fault.token_interval_s)
            await response.write(pieces[i])
        for chunk in dialect.ending(reply):
            await response.write(chunk)
        self.ticket.finish(CallOutcome.OK, 200)
        await response.write_eof()
        return response

    def _drop(self, response: web.StreamResponse) -> web.StreamResponse:
        self.ticket.finish(CallOutcome.DROPPED, self.status)
        transport = self.request.transport
        if transport is not None:
            transport.close()
        return response

    def _error_response(self, status: int) -> web.Response:
        fault = self.fault
        key = self.api_key if fault.echo_key else None
        body: Body = fault.body if fault.body is not None else self._default_error(status, key)
        headers: CIMultiDict[str] = CIMultiDict(fault.headers)
        headers.popall("Content-Length", None)  # aiohttp counts the body itself
        if isinstance(body, str | bytes):
            data = body.encode() if isinstance(body, str) else body
            default_type = "text/html" if data.lstrip().startswith(b"<") else "text/plain"
            escaped = key
        else:
            data = json.dumps(body).encode()
            default_type = "application/json"
            escaped = None if key is None else json.dumps(key)[1:-1]
        headers.setdefault("Content-Type", fault.content_type or default_type)
        if escaped is not None:
            data = data.replace(API_KEY_PLACEHOLDER.encode(), escaped.encode())
        return web.Response(status=status, body=data, headers=headers)

    def _default_error(self, status: int, key: str | None) -> dict[str, Any]:
        if key is not None:
            message = f"Incorrect API key provided: {API_KEY_PLACEHOLDER}."
        else:
            message = f"Simulated error {status} from {self.model}."
        return self.dialect.error_body(status, message)


def _clamp(position: int | None, length: int) -> int | None:
    return None if position is None else min(position, length)
