"""AWS Bedrock Converse and ConverseStream, signed with botocore's SigV4.

botocore is an optional extra (`pip install 'relevo[bedrock]'`), imported here and only
when a Bedrock provider is used. Credentials come from botocore's standard chain
(environment, shared config and credentials files, container or instance role); looking
them up, and refreshing them when they are about to expire, may block on files or the
network, so it runs in a thread, never on the event loop. Signing itself is a few HMACs.

ConverseStream answers in AWS event-stream framing (binary messages with headers and a
CRC each), read with botocore's own parser. An error before the stream is an HTTP status
with `x-amzn-ErrorType`; one inside it is an event whose `:message-type` is `exception`.
Both are classified in `worker.adapters.classify`. The secret key and session token never
appear in an error: every message leaving here is scrubbed of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import httpx

from worker.adapters.anthropic import may_think
from worker.adapters.base import Completion, Event, ProviderCall, TextDelta, ToolCallDelta
from worker.adapters.classify import classify_response, classify_stream_error
from worker.adapters.finish import normalize_finish
from worker.adapters.http import (
    MAX_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    MAX_STREAM_BYTES,
    HttpRequest,
    _capped,
    _read_capped,
    _translate,
    as_int,
    as_object,
    as_str,
    parse_arguments,
)
from worker.errors import AuthFailed, ConnectionFailed, MalformedResponse, ProviderError
from worker.observability.redact import redact_text
from worker.settings import ProviderSettings
from worker.types import Message, Reasoning, Tool, ToolCall, Usage

if TYPE_CHECKING:
    from botocore.credentials import Credentials, ReadOnlyCredentials

__all__ = ["EVENT_STREAM", "BedrockAdapter", "reasoning_origin"]

EVENT_STREAM = "application/vnd.amazon.eventstream"
_SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime


def reasoning_origin(model_id: str) -> str:
    """Whose reasoning a Bedrock model can take back: Claude's is Anthropic's own."""
    return "anthropic" if "anthropic." in model_id else "bedrock"


class BedrockAdapter:
    """POST /model/{modelId}/converse (or /converse-stream), SigV4-signed for `bedrock`."""

    kind = "bedrock"

    def __init__(self, provider: ProviderSettings, client: httpx.AsyncClient) -> None:
        region = provider.region or ""
        self._region = region
        self._endpoint = (
            provider.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        ).rstrip("/")
        self._client = client
        self._credentials = _CredentialChain()
        self._timeout = httpx.Timeout(
            provider.total_timeout_s, connect=min(10.0, provider.first_byte_timeout_s)
        )

    def request(self, call: ProviderCall) -> HttpRequest:
        """The Converse request for `call`, before it is signed."""
        # `:` and `@` stay as they are: the transport would unescape them, and the path
        # that is signed must be the path that is sent. `/` (in ARNs) is escaped.
        model = quote(call.model_id, safe=":@")
        operation = "converse-stream" if call.stream else "converse"
        body: dict[str, Any] = {
            "messages": _messages(call.messages, reasoning_origin(call.model_id)),
            "inferenceConfig": {"maxTokens": call.max_tokens},
        }
        system = "\n\n".join(m.content for m in call.messages if m.role == "system" and m.content)
        if system:
            body["system"] = [{"text": system}]
        if call.tools:
            body["toolConfig"] = {"tools": [_tool(tool) for tool in call.tools]}
        budget = call.thinking_budget_tokens
        thinks = reasoning_origin(call.model_id) == "anthropic" and may_think(call.messages)
        if budget is not None and budget < call.max_tokens and thinks:
            # Claude's own request field, passed through Converse as the model's.
            thinking = {"type": "enabled", "budget_tokens": budget}
            body["additionalModelRequestFields"] = {"thinking": thinking}
        return HttpRequest(
            url=f"{self._endpoint}/model/{model}/{operation}",
            headers={
                "content-type": "application/json",
                "accept": EVENT_STREAM if call.stream else "application/json",
            },
            body=body,
        )

    async def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`."""
        request = self.request(call)
        data = json.dumps(request.body, ensure_ascii=False).encode()
        started = False
        secrets: tuple[str, ...] = ()
        try:
            credentials = await self._credentials.frozen()
            secrets = tuple(s for s in (credentials.secret_key, credentials.token) if s)
            headers = _signed(credentials, self._region, request, data)
            async with self._client.stream(
                "POST", request.url, headers=headers, content=data, timeout=self._timeout
            ) as response:
                await _check(response, request.headers["accept"])
                if not call.stream:
                    body = await _read_capped(response, MAX_BODY_BYTES)
                    with _malformed():
                        completion = parse_response(json.loads(body), call.model_id)
                else:
                    from botocore.eventstream import EventStreamBuffer

                    decoder = StreamDecoder(reasoning_origin(call.model_id))
                    buffer = EventStreamBuffer()
                    async with contextlib.aclosing(_capped(response, MAX_STREAM_BYTES)) as chunks:
                        async for chunk in chunks:
                            buffer.add_data(chunk)
                            with _malformed():
                                messages = list(buffer)
                            for message in messages:
                                with _malformed():
                                    events = decoder.feed(message.headers, message.payload)
                                for event in events:
                                    started = True
                                    yield event
                    with _malformed():
                        completion = decoder.completion()
        except ProviderError as exc:
            raise _scrubbed(exc, secrets) from None
        except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
            raise _scrubbed(_translate(exc, started=started), secrets) from None
        yield completion


class _CredentialChain:
    """botocore's credential chain, looked up once and re-read when it is due to expire."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # adapters are shared by threads with their own loops
        self._source: Credentials | None = None
        self._frozen: ReadOnlyCredentials | None = None

    async def frozen(self) -> ReadOnlyCredentials:
        """Credentials to sign one request with."""
        frozen, source = self._frozen, self._source
        # refresh_needed() only compares the expiry with the clock; the refresh may block.
        if frozen is None or (source is not None and _refresh_needed(source)):
            frozen = await asyncio.to_thread(self._load)
        return frozen

    def _load(self) -> ReadOnlyCredentials:
        import botocore.exceptions
        import botocore.session

        with self._lock:
            try:
                if self._source is None:
                    self._source = botocore.session.Session().get_credentials()
                if self._source is None:
                    raise AuthFailed(
                        "no AWS credentials found (environment, shared config or credentials "
                        "file, container or instance role)"
                    )
                self._frozen = self._source.get_frozen_credentials()
            except botocore.exceptions.BotoCoreError as exc:
                # The chain's own errors name a profile or a provider, never a secret.
                raise AuthFailed(f"AWS credentials unavailable: {type(exc).__name__}") from None
            return self._frozen


def _refresh_needed(source: Credentials) -> bool:
    check = getattr(source, "refresh_needed", None)
    return bool(check()) if callable(check) else False


def _signed(
    credentials: ReadOnlyCredentials, region: str, request: HttpRequest, data: bytes
) -> dict[str, str]:
    """`request`'s headers plus SigV4's: X-Amz-Date, X-Amz-Security-Token, Authorization."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    signed = AWSRequest(method="POST", url=request.url, data=data, headers=dict(request.headers))
    SigV4Auth(credentials, _SERVICE, region).add_auth(signed)
    return dict(signed.headers.items())


async def _check(response: httpx.Response, wanted: str) -> None:
    if not response.is_success:
        body = await _read_capped(response, MAX_ERROR_BODY_BYTES, truncate=True)
        raise classify_response("bedrock", response.status_code, response.headers, body)
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != wanted:
        raise MalformedResponse(f"expected {wanted}, got content type {media or 'none'!r}")


@contextlib.contextmanager
def _malformed() -> Iterator[None]:
    """An untrusted body or frame of the wrong shape becomes `MalformedResponse`."""
    from botocore.eventstream import ParserError

    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ParserError) as exc:
        raise MalformedResponse(f"unexpected bedrock response: {type(exc).__name__}") from None


def _scrubbed(exc: ProviderError, secrets: tuple[str, ...]) -> ProviderError:
    exc.message = redact_text(exc.message, secrets)
    exc.args = (exc.message,)
    if exc.provider_code is not None:
        exc.provider_code = redact_text(exc.provider_code, secrets)
    return exc


def _messages(messages: tuple[Message, ...], origin: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the open user message of tool results
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            result = {"toolUseId": message.tool_call_id, "content": [{"text": message.content}]}
            results.append({"toolResult": result})
            continue
        results = None
        # Reasoning goes back first, and only what this model's family wrote.
        blocks = [_reasoning_block(r) for r in message.reasoning if r.origin == origin]
        if message.content or not message.tool_calls:
            blocks.append({"text": message.content})
        blocks.extend(
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}}
            for c in message.tool_calls
        )
        out.append({"role": message.role, "content": blocks})
    return out


def _reasoning_block(reasoning: Reasoning) -> dict[str, Any]:
    if reasoning.redacted is not None:
        return {"reasoningContent": {"redactedContent": reasoning.redacted}}
    text: dict[str, str] = {"text": reasoning.text}
    if reasoning.signature is not None:
        text["signature"] = reasoning.signature
    return {"reasoningContent": {"reasoningText": text}}


def _tool(tool: Tool) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": tool.parameters}}
    if tool.description:
        spec["description"] = tool.description  # Bedrock refuses an empty one
    return {"toolSpec": spec}


def _usage(raw: Any) -> Usage:
    usage = as_object(raw or {})
    # inputTokens already leaves the cache out; outputTokens includes any reasoning.
    return Usage(
        input_tokens=as_int(usage.get("inputTokens")),
        output_tokens=as_int(usage.get("outputTokens")),
        cache_read_tokens=as_int(usage.get("cacheReadInputTokens")),
        cache_write_tokens=as_int(usage.get("cacheWriteInputTokens")),
    )


def _finish(raw: Any) -> str | None:
    reason = normalize_finish("bedrock", as_str(raw) or None)
    return None if reason is None else reason.value


def _reasoning(origin: str, block: Mapping[str, Any]) -> Reasoning:
    if block.get("redactedContent") is not None:
        return Reasoning(origin=origin, redacted=as_str(block["redactedContent"]))
    text = as_object(block.get("reasoningText") or {})
    return Reasoning(
        origin=origin,
        text=as_str(text.get("text")),
        signature=as_str(text.get("signature")) or None,
    )


def parse_response(body: Any, model_id: str) -> Completion:
    """The `Completion` in a Converse response's decoded JSON."""
    document = as_object(body)
    message = as_object(as_object(document["output"])["message"])
    origin = reasoning_origin(model_id)
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for raw in message["content"]:
        block = as_object(raw)
        if "text" in block:
            text.append(as_str(block["text"]))
        elif "toolUse" in block:
            use = as_object(block["toolUse"])
            calls.append(
                ToolCall(
                    id=as_str(use["toolUseId"]),
                    name=as_str(use["name"]),
                    arguments=as_object(use.get("input") or {}),
                )
            )
        elif "reasoningContent" in block:
            reasoning.append(_reasoning(origin, as_object(block["reasoningContent"])))
    return Completion(
        text="".join(text),
        tool_calls=tuple(calls),
        usage=_usage(document.get("usage")),
        finish_reason=_finish(document.get("stopReason")),
        reasoning=tuple(reasoning),
    )


class StreamDecoder:
    """ConverseStream events: messageStart, content block start/delta/stop, messageStop,
    then metadata with the usage."""

    def __init__(self, origin: str) -> None:
        self._origin = origin
        self._stopped = False
        self._text: list[str] = []
        self._tools: dict[int, int] = {}  # content block index -> tool-call index
        self._calls: list[tuple[str, str, list[str]]] = []  # id, name, input pieces
        self._thinking: dict[int, dict[str, list[str]]] = {}  # block index -> its pieces
        self._usage = Usage()
        self._stop_reason: str | None = None

    def feed(self, headers: Mapping[str, Any], payload: bytes) -> list[Event]:
        """The content deltas of one event-stream message; raises for an exception event."""
        kind = headers.get(":message-type")
        if kind == "exception":
            name = as_str(headers.get(":exception-type")) or "exception"
            raise classify_stream_error("bedrock", {name: json.loads(payload or b"{}")})
        if kind == "error":
            code = as_str(headers.get(":error-code")) or "error"
            message = as_str(headers.get(":error-message"))
            raise classify_stream_error("bedrock", {code: {"message": message}})
        data = as_object(json.loads(payload))
        event = headers.get(":event-type")
        if event == "contentBlockStart":
            start = as_object(data.get("start") or {})
            if "toolUse" in start:
                return self._tool_start(as_int(data["contentBlockIndex"]), start["toolUse"])
        elif event == "contentBlockDelta":
            return self._delta(as_int(data["contentBlockIndex"]), as_object(data["delta"]))
        elif event == "messageStop":
            self._stopped = True
            self._stop_reason = _finish(data.get("stopReason"))
        elif event == "metadata":
            self._usage = _usage(data.get("usage"))
        return []

    def _tool_start(self, index: int, raw: Any) -> list[Event]:
        use = as_object(raw)
        name = as_str(use["name"])
        self._tools[index] = len(self._calls)
        self._calls.append((as_str(use["toolUseId"]), name, []))
        return [ToolCallDelta(index=self._tools[index], name=name)]

    def _delta(self, index: int, delta: dict[str, Any]) -> list[Event]:
        if "text" in delta:
            text = as_str(delta["text"])
            self._text.append(text)
            return [TextDelta(text)] if text else []
        if "toolUse" in delta and index in self._tools:
            piece = as_str(as_object(delta["toolUse"]).get("input"))
            self._calls[self._tools[index]][2].append(piece)
            return [ToolCallDelta(index=self._tools[index], arguments=piece)] if piece else []
        if "reasoningContent" in delta:
            pieces = self._thinking.setdefault(index, {})
            for key, value in as_object(delta["reasoningContent"]).items():
                pieces.setdefault(key, []).append(as_str(value))
        return []  # reasoning is returned with the completion, never as content

    def completion(self) -> Completion:
        """The whole answer; raises `ConnectionFailed` if the stream ended before messageStop."""
        if not self._stopped:
            raise ConnectionFailed("stream ended before messageStop")
        calls = tuple(
            ToolCall(id=id_, name=name, arguments=parse_arguments("".join(pieces)))
            for id_, name, pieces in self._calls
        )
        reasoning = []
        for _, pieces in sorted(self._thinking.items()):
            joined = {key: "".join(values) for key, values in pieces.items()}
            if "redactedContent" in joined:
                block: dict[str, Any] = {"redactedContent": joined["redactedContent"]}
            else:
                block = {"reasoningText": joined}
            reasoning.append(_reasoning(self._origin, block))
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            usage=self._usage,
            finish_reason=self._stop_reason,
            reasoning=tuple(reasoning),
        )
