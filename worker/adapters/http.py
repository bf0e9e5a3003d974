"""The shared HTTP client and the one POST every adapter makes.

`HttpAdapter.send` owns everything the provider APIs have in common: the request
timeout backstop, status and content-type checks, capped reads of untrusted
bodies, the stream loop, and the one place where httpx and aiohttp exceptions
become `ProviderError`s, with the secrets and anything shaped like a key redacted
(from an error body before it is classified). Subclasses only map requests and
responses: how a stream is framed (`SseAdapter`: Server-Sent Events; Bedrock: AWS
event-stream messages) and what each frame means. A provider that signs its requests
(Bedrock's SigV4) passes an `httpx.Auth`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from worker.adapters.base import Completion, Event, ProviderCall
from worker.adapters.body import encode_body
from worker.adapters.classify import MAX_ERROR_BODY_BYTES, classify_response
from worker.adapters.sse import SseEvent, SseParser
from worker.errors import (
    ConnectionFailed,
    FirstByteTimeout,
    MalformedResponse,
    ProviderError,
    ResponseCutOff,
)
from worker.observability.redact import redact_exact, redact_text
from worker.settings import HttpSettings, ProviderSettings

__all__ = [
    "MAX_RESPONSE_BYTES",
    "MAX_STREAM_BYTES",
    "Framing",
    "HttpAdapter",
    "HttpRequest",
    "SseAdapter",
    "StreamDecoder",
    "as_int",
    "as_object",
    "as_str",
    "make_client",
    "parse_arguments",
]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a whole non-streaming answer
MAX_STREAM_BYTES = 64 * 1024 * 1024  # a whole streamed answer, frames and keep-alives included
_DRAIN_S = 0.5  # how long a finished stream may take to reach EOF before we drop the connection

_FrameT = TypeVar("_FrameT")
_FrameT_contra = TypeVar("_FrameT_contra", contravariant=True)


def make_client(
    http: HttpSettings | None = None, *, max_connections: int = 1000
) -> httpx.AsyncClient:
    """An httpx client over aiohttp's connection pool, sized for ~1,000 turns in flight,
    reaching providers as `http` says (the environment's proxy and CAs by default).

    No retries anywhere: httpx has none by default, the transport ignores its
    `retries`, and aiohttp only re-sends idempotent methods (we only POST).
    Timeouts here are a backstop; each request passes its provider's own.
    """
    http = http or HttpSettings()
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=30.0,
    )
    if http.ca_bundle is not None:
        context = ssl.create_default_context(cafile=str(http.ca_bundle))
    else:
        context = httpx.create_ssl_context(trust_env=http.trust_env)

    def session() -> aiohttp.ClientSession:
        # aiohttp reads the proxy variables per request, NO_PROXY included.
        connector = aiohttp.TCPConnector(
            limit=max_connections, keepalive_timeout=limits.keepalive_expiry, ssl=context
        )
        return aiohttp.ClientSession(connector=connector, trust_env=http.trust_env)

    proxy = None if http.proxy_url is None else _proxy(http.proxy_url)
    return httpx.AsyncClient(
        transport=AiohttpTransport(limits=limits, retries=0, proxy=proxy, client=session),
        timeout=httpx.Timeout(300.0, connect=10.0),
        follow_redirects=False,
        headers={"user-agent": "relevo"},
        # httpx would mount a pool of its own per environment proxy, beside aiohttp's.
        trust_env=False,
    )


def _proxy(url: str) -> httpx.Proxy:
    """The proxy, its credentials sent as a header (the transport would pass them to
    aiohttp's deprecated `BasicAuth`)."""
    parts = httpx.URL(url)
    if not (parts.username or parts.password):
        return httpx.Proxy(parts)
    token = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
    bare = parts.copy_with(username=None, password=None)
    return httpx.Proxy(bare, headers={"proxy-authorization": f"Basic {token}"})


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """What an adapter sends: a JSON POST."""

    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]


class Framing(Protocol[_FrameT]):
    """Splits a streaming body into the API's frames; raises `MalformedResponse` for bytes
    that cannot be framed."""

    def feed(self, chunk: bytes) -> list[_FrameT]:
        """The frames `chunk` completes, in order."""
        ...


class StreamDecoder(Protocol[_FrameT_contra]):
    """Turns one API's stream frames into content events and, at the end, a `Completion`."""

    @property
    def finished(self) -> bool:
        """The API's end-of-stream marker was seen."""
        ...

    def feed(self, frame: _FrameT_contra) -> list[Event]:
        """The content deltas in `frame`; raises `ProviderError` for an error event."""
        ...

    def completion(self) -> Completion:
        """The whole answer; raises `ProviderError` if the stream ended too early."""
        ...


class HttpAdapter(ABC, Generic[_FrameT]):
    """One provider API over a shared `httpx.AsyncClient`, its stream made of frames."""

    wire: ClassVar[str]  # the API it speaks (`ProviderSettings.wire`)
    stream_media_type: ClassVar[str]

    def __init__(
        self,
        provider: ProviderSettings,
        client: httpx.AsyncClient,
        *,
        auth: httpx.Auth | None = None,
    ) -> None:
        self._provider = provider
        self._client = client
        self._auth = auth
        self._secret = provider.api_key()
        self._secrets: tuple[str, ...] = (self._secret,) if self._secret else ()
        self._timeout = httpx.Timeout(
            provider.total_timeout_s, connect=min(10.0, provider.first_byte_timeout_s)
        )

    @abstractmethod
    def request(self, call: ProviderCall) -> HttpRequest:
        """The HTTP request for `call`."""

    @abstractmethod
    def parse(self, body: Any) -> Completion:
        """The `Completion` in a non-streaming response's decoded JSON."""

    @abstractmethod
    def framing(self) -> Framing[_FrameT]:
        """A fresh framer for one streaming response's bytes."""

    @abstractmethod
    def decoder(self) -> StreamDecoder[_FrameT]:
        """A fresh decoder for one streaming response's frames."""

    def _redacted(self) -> tuple[str, ...]:
        """The secrets no error may show: the API key, or what the subclass signs with."""
        return self._secrets

    async def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`."""
        request = self.request(call)
        started = False
        answered = False  # a success status arrived: the provider may bill what follows
        try:
            async with self._client.stream(
                "POST",
                request.url,
                headers={**request.headers, "content-type": "application/json"},
                content=encode_body(request.body, spliced=_attached(call)),
                timeout=self._timeout,
                auth=self._auth,
            ) as response:
                await self._check(response, streaming=call.stream)
                answered = True
                if not call.stream:
                    body = await _read_capped(response, MAX_RESPONSE_BYTES)
                    with self._malformed():
                        completion = self.parse(json.loads(body))
                else:
                    decoder = self.decoder()
                    framing = self.framing()
                    async with contextlib.aclosing(_capped(response, MAX_STREAM_BYTES)) as chunks:
                        async for chunk in chunks:
                            for frame in framing.feed(chunk):
                                with self._malformed():
                                    events = decoder.feed(frame)
                                for event in events:
                                    started = True
                                    yield event
                            if decoder.finished:
                                await _drain(chunks)
                                break
                    with self._malformed():
                        completion = decoder.completion()
        except ProviderError as exc:
            raise self._scrubbed(_cut_off(exc) if answered else exc) from None
        except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
            error = _translate(exc, started=started)
            raise self._scrubbed(_cut_off(error) if answered else error) from None
        yield completion

    async def _check(self, response: httpx.Response, *, streaming: bool) -> None:
        if not response.is_success:
            body = await _read_capped(response, MAX_ERROR_BODY_BYTES, truncate=True)
            secrets = self._redacted()
            if secrets:
                # Before parsing: the message is cut short later, and a cut key is no longer
                # the key `_scrubbed` looks for.
                body = redact_exact(body.decode("utf-8", "replace"), secrets).encode()
            raise classify_response(self.wire, response.status_code, response.headers, body)
        media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        wanted = self.stream_media_type if streaming else "application/json"
        if media != wanted and not (wanted == "application/json" and media.endswith("+json")):
            raise MalformedResponse(f"expected {wanted}, got content type {media or 'none'!r}")

    @contextlib.contextmanager
    def _malformed(self) -> Iterator[None]:
        """Untrusted JSON of the wrong shape becomes `MalformedResponse`, nothing else."""
        try:
            yield
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            detail = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise MalformedResponse(
                f"unexpected {self.wire} response: {type(exc).__name__} {detail}".rstrip()
            ) from None

    def _scrubbed(self, exc: ProviderError) -> ProviderError:
        secrets = self._redacted()
        exc.message = redact_text(exc.message, secrets)
        exc.args = (exc.message,)
        if exc.provider_code is not None:
            exc.provider_code = redact_text(exc.provider_code, secrets)
        return exc


class SseAdapter(HttpAdapter[SseEvent]):
    """An API that streams Server-Sent Events (OpenAI, Anthropic, Gemini)."""

    stream_media_type = "text/event-stream"

    def framing(self) -> SseParser:
        return SseParser()


async def _read_capped(response: httpx.Response, limit: int, *, truncate: bool = False) -> bytes:
    """At most `limit` bytes of the body; past it, cut (`truncate`) or `MalformedResponse`."""
    declared = response.headers.get("content-length", "")
    if not truncate and declared.isdigit() and int(declared) > limit:
        raise MalformedResponse(f"response body of {declared} bytes exceeds {limit}")
    buffer = bytearray()
    async for chunk in response.aiter_bytes():
        buffer += chunk
        if len(buffer) > limit:
            if truncate:
                return bytes(buffer[:limit])
            raise MalformedResponse(f"response body larger than {limit} bytes")
    return bytes(buffer)


async def _capped(response: httpx.Response, limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > limit:
            raise MalformedResponse(f"stream larger than {limit} bytes")
        yield chunk


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read to EOF after the end marker so the connection goes back to the pool."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError, aiohttp.ClientError, OSError):
        async with asyncio.timeout(_DRAIN_S):
            async for _ in chunks:
                pass


def _root(exc: BaseException) -> BaseException:
    # httpx-aiohttp re-raises aiohttp errors as httpx ones chosen oddly (a refused
    # connection becomes ConnectTimeout); the original is the cause, so judge by it.
    while isinstance(exc, httpx.HTTPError) and isinstance(
        exc.__cause__, (aiohttp.ClientError, OSError)
    ):
        exc = exc.__cause__
    return exc


_CONNECT_TIMEOUTS = (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout, httpx.PoolTimeout)
_READ_TIMEOUTS = (TimeoutError, httpx.TimeoutException)
_MALFORMED = (httpx.DecodingError, aiohttp.ClientResponseError)


def _cut_off(error: ProviderError) -> ProviderError:
    """A connection that failed after a success status is a response cut off, which the
    provider may bill (`worker.turn.policy`); any other error stays as it is."""
    if type(error) is not ConnectionFailed:
        return error
    return ResponseCutOff(error.message, status=error.status, provider_code=error.provider_code)


def _translate(exc: BaseException, *, started: bool) -> ProviderError:
    root = _root(exc)
    detail = " ".join(f"{type(root).__name__}: {root}".split())[:300]
    if isinstance(root, _CONNECT_TIMEOUTS):
        return ConnectionFailed(f"connect timed out ({detail})")
    if isinstance(root, _READ_TIMEOUTS):
        if started:
            return ConnectionFailed(f"stream went silent ({detail})")
        return FirstByteTimeout(f"no response before the read timeout ({detail})")
    if isinstance(root, aiohttp.ClientPayloadError):
        return ConnectionFailed(f"response cut off ({detail})")
    if isinstance(root, _MALFORMED):
        return MalformedResponse(f"invalid HTTP response ({detail})")
    return ConnectionFailed(detail)


def as_str(value: Any) -> str:
    """A JSON string field (`null` reads as empty); anything else is malformed."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def as_int(value: Any) -> int:
    """A JSON token count (`null` reads as 0); anything else is malformed."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def as_object(value: Any) -> dict[str, Any]:
    """A JSON object field; anything else is malformed."""
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def parse_arguments(text: str) -> dict[str, Any]:
    """Tool-call arguments streamed as JSON text; they must be one JSON object."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise MalformedResponse("tool-call arguments are not valid JSON") from None
    if not isinstance(value, dict):
        raise MalformedResponse("tool-call arguments are not a JSON object")
    return value


def _attached(call: ProviderCall) -> bool:
    """Whether the call carries images or documents (only then can its body hold any
    `Verbatim` base64)."""
    return any(not isinstance(m.content, str) for m in call.messages)
