"""AWS Bedrock Converse and ConverseStream, on the shared HTTP path, signed with SigV4.

The request is signed by `worker.adapters.sigv4.SigV4` (botocore's signer and credential
chain, the optional extra `pip install 'relevo[bedrock]'`), passed to `HttpAdapter` as
its `httpx.Auth`; the secret key and session token are redacted from every error, as an
API key is. ConverseStream answers in AWS event-stream framing (binary messages with
headers and a CRC each), read with botocore's own parser. An error before the stream is
an HTTP status with `x-amzn-ErrorType`; one inside it is a message whose `:message-type`
is `exception`. Both are classified in `worker.adapters.classify`.

Which family wrote a reasoning block decides where it may go back (`reasoning_origin`),
so a provider holds one Converse adapter per family, chosen by the model id. The request
body is `worker.adapters.converse_body`'s; an answer it asks for as a forced tool (a
`json_object`, or a JSON schema for a Claude before 4.5) comes back here as the
completion's text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any, ClassVar, NamedTuple
from urllib.parse import quote

import httpx

from worker.adapters.base import Completion, Event, ProviderCall, TextDelta, ToolCallDelta
from worker.adapters.classify import classify_stream_error
from worker.adapters.claude_options import AnswerTool
from worker.adapters.converse_body import answer_tool, converse_body
from worker.adapters.finish import normalize_finish
from worker.adapters.http import (
    HttpAdapter,
    HttpRequest,
    as_int,
    as_object,
    as_str,
    parse_arguments,
)
from worker.adapters.sigv4 import SigV4
from worker.errors import ConnectionFailed, MalformedResponse
from worker.settings import ProviderSettings
from worker.types import Reasoning, ToolCall, Usage

__all__ = ["EVENT_STREAM", "BedrockAdapter", "reasoning_origin"]

EVENT_STREAM = "application/vnd.amazon.eventstream"
_SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime
_ORIGINS = ("anthropic", "bedrock")


def reasoning_origin(model_id: str) -> str:
    """Whose reasoning a Bedrock model can take back: Claude's is Anthropic's own."""
    return "anthropic" if "anthropic." in model_id else "bedrock"


class BedrockAdapter:
    """One Bedrock provider (a region): every model, one credential chain."""

    wire: ClassVar[str] = "bedrock"

    def __init__(self, provider: ProviderSettings, client: httpx.AsyncClient) -> None:
        auth = SigV4(service=_SERVICE, region=provider.region or "")
        self._converse = {
            origin: _Converse(provider, client, auth, origin=origin) for origin in _ORIGINS
        }

    def request(self, call: ProviderCall) -> HttpRequest:
        """The Converse request for `call`, before it is signed."""
        return self._converse[reasoning_origin(call.model_id)].request(call)

    def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`."""
        origin = reasoning_origin(call.model_id)
        events = self._converse[origin].send(call)
        answer = answer_tool(call, origin)
        return events if answer is None else _answered(events, answer)


async def _answered(
    events: AsyncGenerator[Event, None], answer: AnswerTool
) -> AsyncGenerator[Event, None]:
    """The events of a call whose answer is `answer`'s input: that input is text (streamed
    as it comes; a wrapped answer, unwrapped, as one delta at the end), the other tool
    calls stay tool calls."""
    tool = answer.name
    answers: set[int] = set()  # the tool-call indexes of `tool`
    streamed: list[str] = []
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, ToolCallDelta) and (event.name == tool or event.index in answers):
                answers.add(event.index)
                if event.arguments and not answer.wrapped:
                    streamed.append(event.arguments)
                    yield TextDelta(event.arguments)
            elif isinstance(event, Completion):
                kept = "".join(streamed) if answers and not answer.wrapped else None
                done = _answer_as_text(event, answer, kept)
                if answer.wrapped and answers and done.text:
                    yield TextDelta(done.text)
                yield done
            else:
                yield event


def _answer_as_text(completion: Completion, answer: AnswerTool, streamed: str | None) -> Completion:
    """`completion` with the answer tool's input as text: what streamed of it, or its JSON
    (inside `answer` when the tool wraps it)."""
    tool = answer.name
    calls = tuple(c for c in completion.tool_calls if c.name != tool)
    answers = [c for c in completion.tool_calls if c.name == tool]
    if not answers:
        return completion
    given = answers[0].arguments
    if answer.wrapped:
        text = json.dumps(given.get("answer")) if isinstance(given, dict) else json.dumps(given)
    else:
        text = streamed if streamed is not None else json.dumps(given)
    finish = completion.finish_reason
    if not calls and finish == "tool_calls":
        finish = "stop"
    return dataclasses.replace(
        completion, text=completion.text + text, tool_calls=calls, finish_reason=finish
    )


class EventMessage(NamedTuple):
    """One AWS event-stream message: its headers and its payload."""

    headers: Mapping[str, Any]
    payload: bytes


class _Converse(HttpAdapter[EventMessage]):
    """POST /model/{modelId}/converse (or /converse-stream) for one family's models."""

    wire = "bedrock"
    stream_media_type = EVENT_STREAM

    def __init__(
        self, provider: ProviderSettings, client: httpx.AsyncClient, auth: SigV4, *, origin: str
    ) -> None:
        super().__init__(provider, client, auth=auth)
        self._sigv4 = auth
        self._origin = origin
        region = provider.region or ""
        self._endpoint = (
            provider.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        ).rstrip("/")

    def request(self, call: ProviderCall) -> HttpRequest:
        # `:` and `@` stay as they are: the transport would unescape them, and the path
        # that is signed must be the path that is sent. `/` (in ARNs) is escaped.
        model = quote(call.model_id, safe=":@")
        operation = "converse-stream" if call.stream else "converse"
        return HttpRequest(
            url=f"{self._endpoint}/model/{model}/{operation}",
            headers={
                "content-type": "application/json",
                "accept": EVENT_STREAM if call.stream else "application/json",
            },
            body=converse_body(call, self._origin),
        )

    def parse(self, body: Any) -> Completion:
        return _parse(body, self._origin)

    def framing(self) -> _EventStream:
        return _EventStream()

    def decoder(self) -> _StreamDecoder:
        return _StreamDecoder(self._origin)

    def _redacted(self) -> tuple[str, ...]:
        return self._sigv4.secrets


class _EventStream:
    """botocore's event-stream parser: bytes in, whole messages out, each CRC checked."""

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> list[EventMessage]:
        from botocore.eventstream import ParserError

        self._buffer.add_data(chunk)
        try:
            return [EventMessage(m.headers, m.payload) for m in self._buffer]
        except ParserError as exc:
            raise MalformedResponse(
                f"unexpected bedrock event stream: {type(exc).__name__}"
            ) from None


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


def _parse(body: Any, origin: str) -> Completion:
    """The `Completion` in a Converse response's decoded JSON."""
    document = as_object(body)
    message = as_object(as_object(document["output"])["message"])
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


class _StreamDecoder:
    """ConverseStream events: messageStart, content block start/delta/stop, messageStop,
    then metadata with the usage, the last event."""

    def __init__(self, origin: str) -> None:
        self._origin = origin
        self.finished = False
        self._stopped = False
        self._text: list[str] = []
        self._tools: dict[int, int] = {}  # content block index -> tool-call index
        self._calls: list[tuple[str, str, list[str]]] = []  # id, name, input pieces
        self._thinking: dict[int, dict[str, list[str]]] = {}  # block index -> its pieces
        self._usage = Usage()
        self._stop_reason: str | None = None

    def feed(self, frame: EventMessage) -> list[Event]:
        """The content deltas of one event-stream message; raises for an exception event."""
        headers, payload = frame
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
            self.finished = True
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
