"""Point 3: provider responses are untrusted. Each hostile answer, run through the whole chain,
ends in classified attempts within the turn's deadline: never a hang, never a crash.

A small aiohttp server on loopback plays every provider of a three-model chain
(OpenAI, Anthropic and Gemini APIs), one hostile behaviour per URL prefix.
`tests/test_adapters.py` checks the adapters one call at a time; here the chain
runs: retries, fallbacks, timeouts and the deadline all take part.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

import worker.adapters.http
from worker.adapters import make_client
from worker.settings import Settings, load_settings
from worker.turn.chain import Chain
from worker.types import AttemptOutcome, Message, Status, TurnRequest, TurnResult

DEADLINE_S = 3.0
FIRST_BYTE_S = 0.8
CAP = 256 * 1024  # the body caps, lowered so the tests stay fast
SENT_AT_MOST = 64 * 1024 * 1024  # what an endless body would send if nobody stopped reading
JSON, SSE = "application/json", "text/event-stream"

Handler = Callable[[web.Request, str, bool], Awaitable[web.StreamResponse]]


def fixed(status: int, content_type: str | None, body: bytes, **headers: str) -> Handler:
    async def answer(request: web.Request, api: str, stream: bool) -> web.StreamResponse:
        response = web.Response(status=status, body=body, headers=headers)
        if content_type is not None:
            response.content_type = content_type
        return response

    return answer


def per_api(answers: dict[str, tuple[str, bytes]]) -> Handler:
    async def answer(request: web.Request, api: str, stream: bool) -> web.StreamResponse:
        content_type, body = answers[api]
        return web.Response(status=200, body=body, headers={"content-type": content_type})

    return answer


def endless(status: int, content_type: str, line: bytes, **headers: str) -> Handler:
    """Writes `line` until the client goes away (or SENT_AT_MOST); records the bytes sent."""

    async def answer(request: web.Request, api: str, stream: bool) -> web.StreamResponse:
        response = web.StreamResponse(
            status=status, headers={"content-type": content_type, **headers}
        )
        await response.prepare(request)
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < SENT_AT_MOST:
                await response.write(line)
                sent += len(line)
        request.app[SENT].append(sent)
        return response

    return answer


def drip(content_type: str, head: bytes | dict[str, bytes], byte: bytes) -> Handler:
    """Sends `head`, then one byte a second for as long as the client listens."""

    async def answer(request: web.Request, api: str, stream: bool) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"content-type": content_type})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            await response.write(head[api] if isinstance(head, dict) else head)
            for _ in range(120):
                await response.write(byte)
                await asyncio.sleep(1.0)
        return response

    return answer


def sse(*payloads: Any) -> bytes:
    return b"".join(f"data: {json.dumps(p)}\n\n".encode() for p in payloads)


FIRST_CONTENT: dict[str, bytes] = {
    "openai": sse({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}),
    "anthropic": b"event: message_start\n"
    + sse({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})
    + b"event: content_block_delta\n"
    + sse(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "H"}}
    ),
    "gemini": sse({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]}),
}
BAD_ARGUMENTS: dict[str, tuple[str, bytes]] = {
    "openai": (
        JSON,
        json.dumps(
            {
                "choices": [
                    {
                        "message": {
                            "tool_calls": [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{oops"},
                                }
                            ]
                        },
                        "finish_reason": "tool_calls",
                    }
                ]
            }
        ).encode(),
    ),
    "anthropic": (
        JSON,
        json.dumps(
            {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{oops"}]}
        ).encode(),
    ),
    "gemini": (
        JSON,
        json.dumps(
            {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": 7}}]}}]}
        ).encode(),
    ),
}


def gzip_bomb() -> Handler:
    """32 MiB of JSON whitespace, gzipped to ~150 KiB: only the decoded size counts."""
    # Made here, not in the handler: compressing inside it blocked the server's loop, and
    # on a loaded machine the attempt could end on the first-byte timeout instead.
    bomb = gzip.compress(b"{" + b" " * (32 * 1024 * 1024) + b"}", 1)

    async def answer(request: web.Request, api: str, stream: bool) -> web.StreamResponse:
        headers = {"content-type": JSON, "content-encoding": "gzip"}
        return web.Response(status=200, body=bomb, headers=headers)

    return answer


# scenario -> (stream the turn?, the handler, the error classes its attempts may end with)
MALFORMED = {"malformed_response"}
SCENARIOS: dict[str, tuple[bool, Handler, set[str]]] = {
    "endless JSON body": (False, endless(200, JSON, b" " * 4096), MALFORMED),
    "endless SSE stream": (True, endless(200, SSE, b": " + b"x" * 4094 + b"\n"), MALFORMED),
    "SSE line past the line cap": (True, endless(200, SSE, b"x" * 4096), MALFORMED),
    "endless error body": (False, endless(500, "text/plain", b"e" * 4096), {"server_error"}),
    "gzip bomb": (False, gzip_bomb(), MALFORMED),
    "invalid JSON": (False, fixed(200, JSON, b'{"choices": [{"mess'), MALFORMED),
    "JSON of the wrong shape": (False, fixed(200, JSON, b"[1, 2, 3]"), MALFORMED),
    "empty 200 body": (False, fixed(200, JSON, b""), MALFORMED),
    "HTML instead of JSON": (False, fixed(200, "text/html", b"<html>login</html>"), MALFORMED),
    "no content type": (False, fixed(200, None, b"{}"), MALFORMED),
    "JSON where a stream was asked": (True, fixed(200, JSON, b"{}"), MALFORMED),
    "SSE that is not UTF-8": (True, fixed(200, SSE, b"data: \xff\xfe\xfa\n\n"), MALFORMED),
    "SSE data that is not JSON": (True, fixed(200, SSE, b"data: {broken\n\n"), MALFORMED),
    "SSE without any event": (
        True,
        fixed(200, SSE, b"retry: 10\nid: 1\n: hi\n\n"),
        {
            "connection_error",
            "malformed_response",
        },
    ),
    "tool-call arguments not JSON": (False, per_api(BAD_ARGUMENTS), MALFORMED),
    "huge header": (False, fixed(200, JSON, b"{}", **{"x-junk": "j" * 100_000}), MALFORMED),
    "absurd Retry-After": (
        False,
        fixed(429, JSON, b"{}", **{"retry-after": "9" * 30}),
        {"rate_limited"},
    ),
    "redirect to a metadata address": (
        False,
        fixed(302, "text/plain", b"", location="http://169.254.169.254/latest/meta-data/"),
        {"malformed_response", "invalid_request", "server_error"},
    ),
    "JSON dripping a byte a second": (False, drip(JSON, b"{", b" "), {"first_byte_timeout"}),
    "SSE comments dripping a byte a second": (
        True,
        drip(SSE, b": keep-alive\n", b":"),
        {"first_byte_timeout"},
    ),
}
SENT = web.AppKey("sent", list[int])


def api_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "openai"
    return "anthropic" if path.endswith("/v1/messages") else "gemini"


async def hostile(request: web.Request) -> web.StreamResponse:
    scenario = request.match_info["scenario"]
    path = "/" + request.match_info["tail"]
    stream = (await request.json()).get("stream") is True or "streamGenerateContent" in path
    if scenario == "drip-content":
        return await drip(SSE, FIRST_CONTENT, b" ")(request, api_of(path), stream)
    return await SCENARIOS[_names[scenario]][1](request, api_of(path), stream)


_names = {f"s{i}": name for i, name in enumerate(SCENARIOS)}
_slugs = {name: slug for slug, name in _names.items()}


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, web.Application]]:
    app = web.Application(handler_args={"max_field_size": 200_000, "max_line_size": 200_000})
    app[SENT] = []
    app.router.add_post("/{scenario}/{tail:.*}", hostile)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", app
    finally:
        await runner.cleanup()


def chain_settings(base: str, *, total_timeout_s: float = 10.0) -> Settings:
    timeouts = {"first_byte_timeout_s": FIRST_BYTE_S, "total_timeout_s": total_timeout_s}
    serve = {
        "openai/a": ("oa", "openai"),
        "anthropic/b": ("an", "anthropic"),
        "google/c": ("gg", "google"),
    }
    return load_settings(
        data={
            "turn_deadline_s": DEADLINE_S,
            "chain": {"models": list(serve)},
            "retry": {"base_delay_s": 0.01, "retry_after_cap_s": 1.0},
            "providers": {
                "oa": {"kind": "openai", "base_url": f"{base}/v1", **timeouts},
                "an": {"kind": "anthropic", "base_url": base, **timeouts},
                "gg": {"kind": "gemini", "base_url": base, **timeouts},
            },
            "models": {
                slug: {
                    "vendor": vendor,
                    "context_window": 100_000,
                    "serve": [{"provider": provider, "model_id": "m"}],
                }
                for slug, (provider, vendor) in serve.items()
            },
        }
    )


def request(stream: bool) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme",
        messages=(Message(role="user", content="Hello?"),),
        stream=stream,
        deadline_s=DEADLINE_S,
    )


async def run_chain(settings: Settings, stream: bool) -> tuple[TurnResult, float]:
    async with make_client() as client:
        chain = Chain.from_settings(settings, client)
        started = time.monotonic()
        # Far past the deadline: a hang fails the test instead of blocking it.
        async with asyncio.timeout(DEADLINE_S + 10):
            result = await chain.run(request(stream))
        return result, time.monotonic() - started


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.adapters.http, "MAX_RESPONSE_BYTES", CAP)
    monkeypatch.setattr(worker.adapters.http, "MAX_STREAM_BYTES", CAP)
    monkeypatch.setattr(worker.adapters.http, "MAX_ERROR_BODY_BYTES", CAP // 4)


@pytest.mark.usefixtures("small_caps")
@pytest.mark.parametrize(
    "scenario",
    # The drips take the chain's first-byte timeouts in full: about 2.4 s each.
    [pytest.param(s, marks=pytest.mark.slow) if "dripping" in s else s for s in SCENARIOS],
    ids=list(SCENARIOS),
)
async def test_a_hostile_answer_ends_in_classified_attempts_within_the_deadline(
    scenario: str, server: tuple[str, web.Application]
) -> None:
    url, app = server
    stream, _, expected = SCENARIOS[scenario]
    result, elapsed = await run_chain(chain_settings(f"{url}/{_slugs[scenario]}"), stream)
    assert result.status is Status.FAILED
    called = [a for a in result.attempts if a.outcome is AttemptOutcome.ERROR]
    assert called, result.attempts
    assert {a.error_class for a in called} <= expected, result.attempts
    assert {a.model for a in called} == {"openai/a", "anthropic/b", "google/c"}
    assert elapsed < DEADLINE_S + 0.5
    # What the server sent before the client stopped reading: nowhere near the whole body.
    assert all(sent < 16 * 1024 * 1024 for sent in app[SENT]), app[SENT]


@pytest.mark.slow
@pytest.mark.usefixtures("small_caps")
async def test_a_stream_that_drips_after_its_first_content_ends_by_the_turns_deadline(
    server: tuple[str, web.Application],
) -> None:
    url, _ = server
    result, elapsed = await run_chain(chain_settings(f"{url}/drip-content"), True)
    assert result.status is Status.FAILED
    assert result.reason == "deadline_exceeded"
    assert [a.model for a in result.attempts] == ["openai/a"]  # locked to the first model
    assert DEADLINE_S - 0.2 < elapsed < DEADLINE_S + 0.5
