"""OpenAI's Responses API (`POST /responses`), and Azure OpenAI's.

The body is `worker.adapters.responses_body`'s. An answer is a list of output items:
`message` (its `output_text`, or a `refusal`), `function_call`, and a reasoning model's
`reasoning` items, which come back as `Reasoning` (origin `openai`: id, encrypted
content, summary) for the next call to OpenAI to send again. A stream is typed events:
text and function-call argument deltas are content; `response.completed` and
`response.incomplete` end it; `response.failed` and `error` are errors, classified by
the same table as Chat Completions' (`worker.adapters.classify`), before or after
content (the chain then decides: fall back, or fail the turn locked to this model).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any
from urllib.parse import quote

from worker.adapters.base import Completion, Event, ProviderCall, TextDelta, ToolCallDelta
from worker.adapters.classify import classify_stream_error
from worker.adapters.finish import FinishReason, normalize_finish
from worker.adapters.http import (
    HttpRequest,
    SseAdapter,
    StreamDecoder,
    as_int,
    as_object,
    as_str,
    parse_arguments,
)
from worker.adapters.responses_body import ORIGIN, responses_body
from worker.adapters.sse import SseEvent
from worker.adapters.stop_cut import cut_at_stops
from worker.errors import ConnectionFailed
from worker.types import Reasoning, ToolCall, Usage

__all__ = ["OpenAIResponsesAdapter"]


class OpenAIResponsesAdapter(SseAdapter):
    """The Responses API; Azure OpenAI's when the provider has an `azure_api_version`."""

    wire = "openai-responses"  # its errors: Chat Completions' table (`classify`)

    def request(self, call: ProviderCall) -> HttpRequest:
        base = self._provider.base_url.rstrip("/")
        headers = {"accept": "text/event-stream" if call.stream else "application/json"}
        version = self._provider.azure_api_version
        if version is not None:
            # Azure names the deployment in the body's `model`, not in the URL.
            url = f"{base}/responses?api-version={quote(version, safe='')}"
            if self._secret:
                headers["api-key"] = self._secret
        else:
            url = f"{base}/responses"
            if self._secret:
                headers["authorization"] = f"Bearer {self._secret}"
        return HttpRequest(url=url, headers=headers, body=responses_body(call))

    def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """As `HttpAdapter.send`; the answer cut at the turn's stop sequences (the API
        has no `stop`)."""
        events = super().send(call)
        return cut_at_stops(events, call.stop) if call.stop else events

    def parse(self, body: Any) -> Completion:
        response = as_object(body)
        if response.get("status") == "failed":
            raise classify_stream_error(
                "openai-responses", {"type": "response.failed", "response": response}
            )
        return _completion(response, streamed_text=None)

    def decoder(self) -> StreamDecoder[SseEvent]:
        return _EventDecoder()


def _completion(response: Mapping[str, Any], *, streamed_text: str | None) -> Completion:
    """The answer in a `response` object; `streamed_text` is the text already streamed
    (the response's own is then not read again)."""
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for raw in response.get("output") or ():
        item = as_object(raw)
        kind = item.get("type")
        if kind == "message":
            for part in (as_object(p) for p in item.get("content") or ()):
                if part.get("type") == "output_text":
                    texts.append(as_str(part.get("text")))
                elif part.get("type") == "refusal":
                    refusals.append(as_str(part.get("refusal")))
        elif kind == "function_call":
            calls.append(_tool_call(item))
        elif kind == "reasoning":
            reasoning.append(_reasoning(item))
    refusal = "".join(refusals) or None
    return Completion(
        text="".join(texts) if streamed_text is None else streamed_text,
        tool_calls=tuple(calls),
        usage=_usage(response.get("usage")),
        finish_reason=_finish(response, refusal, bool(calls)),
        reasoning=tuple(reasoning),
        refusal=refusal,
        model=as_str(response.get("model")) or None,
    )


def _tool_call(item: Mapping[str, Any]) -> ToolCall:
    return ToolCall(
        id=as_str(item.get("call_id")) or f"call_{uuid.uuid4().hex[:24]}",
        name=as_str(item["name"]),
        arguments=parse_arguments(as_str(item.get("arguments"))),
    )


def _reasoning(item: Mapping[str, Any]) -> Reasoning:
    summary = (as_object(s) for s in item.get("summary") or ())
    return Reasoning(
        origin=ORIGIN,
        id=as_str(item.get("id")) or None,
        text="\n\n".join(as_str(s.get("text")) for s in summary),
        encrypted=as_str(item.get("encrypted_content")) or None,
    )


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    usage = as_object(raw)
    read = as_int(as_object(usage.get("input_tokens_details") or {}).get("cached_tokens"))
    output = as_object(usage.get("output_tokens_details") or {})
    return Usage(
        # input_tokens counts the cached ones; output_tokens counts the reasoning.
        input_tokens=max(0, as_int(usage.get("input_tokens")) - read),
        cache_read_tokens=read,
        output_tokens=as_int(usage.get("output_tokens")),
        reasoning_tokens=as_int(output.get("reasoning_tokens")),
    )


def _finish(response: Mapping[str, Any], refusal: str | None, called: bool) -> FinishReason | None:
    if refusal is not None:
        return FinishReason.REFUSAL
    status = as_str(response.get("status"))
    if status == "incomplete":
        details = as_object(response.get("incomplete_details") or {})
        return normalize_finish("openai-responses", as_str(details.get("reason")) or "other")
    if called:
        return FinishReason.TOOL_CALLS
    return normalize_finish("openai-responses", status)


class _EventDecoder:
    """Typed events (`event: <type>`, the same `type` in the data) until the response
    completes, ends incomplete, or fails."""

    def __init__(self) -> None:
        self.finished = False
        self._text: list[str] = []
        self._calls: dict[int, int] = {}  # output_index -> tool-call index
        self._response: Mapping[str, Any] | None = None

    def feed(self, event: SseEvent) -> list[Event]:
        data = as_object(json.loads(event.data))
        kind = as_str(data.get("type")) or event.event
        if kind == "response.output_text.delta":
            text = as_str(data.get("delta"))
            self._text.append(text)
            return [TextDelta(text)] if text else []
        if kind == "response.output_item.added":
            item = as_object(data.get("item") or {})
            if item.get("type") != "function_call":
                return []
            index = self._calls.setdefault(as_int(data.get("output_index")), len(self._calls))
            return [ToolCallDelta(index=index, name=as_str(item.get("name")))]
        if kind == "response.function_call_arguments.delta":
            found = self._calls.get(as_int(data.get("output_index")))
            if found is None:
                return []
            return [ToolCallDelta(index=found, arguments=as_str(data.get("delta")))]
        if kind in ("response.completed", "response.incomplete"):
            self._response = as_object(data.get("response"))
            self.finished = True
        elif kind in ("response.failed", "error"):
            raise classify_stream_error("openai-responses", data)
        return []

    def completion(self) -> Completion:
        if self._response is None:
            raise ConnectionFailed("stream ended before response.completed")
        # The final response holds every output item whole: the calls' arguments, the
        # reasoning items with their encrypted content, the usage.
        return _completion(self._response, streamed_text="".join(self._text))
