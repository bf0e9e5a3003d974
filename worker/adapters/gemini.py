"""Google Gemini generateContent / streamGenerateContent.

Gemini 3 signs its function calls (`thoughtSignature`) and refuses the next request of
a tool loop without them: a call's signature rides on `ToolCall.signature`, a text
part's on `Completion.reasoning`, and both go back on the model's turn as received.
The request body is `worker.adapters.gemini_body`'s. Gemini has no refusal of its own:
a blocked prompt (`promptFeedback.blockReason`) and a stop for safety are its filters
(`content_filter`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

from worker.adapters.base import (
    Completion,
    Event,
    ProviderCall,
    TextDelta,
    ToolCallDelta,
    UsageSoFar,
)
from worker.adapters.classify import classify_stream_error
from worker.adapters.finish import FinishReason, normalize_finish
from worker.adapters.gemini_body import ORIGIN, SKIP_SIGNATURE, request_body
from worker.adapters.http import (
    HttpRequest,
    SseAdapter,
    StreamDecoder,
    as_int,
    as_object,
    as_str,
)
from worker.adapters.sse import SseEvent
from worker.errors import ConnectionFailed
from worker.types import Reasoning, ToolCall, Usage

__all__ = ["ORIGIN", "SKIP_SIGNATURE", "GeminiAdapter"]


class GeminiAdapter(SseAdapter):
    """POST /v1beta/models/{model}:generateContent (or :streamGenerateContent?alt=sse)."""

    wire = "gemini"
    # Vertex AI's fileData needs a mimeType; the Gemini API's does not.
    _vertex = False

    def request(self, call: ProviderCall) -> HttpRequest:
        base = self._provider.base_url.rstrip("/")
        method = "streamGenerateContent?alt=sse" if call.stream else "generateContent"
        url = f"{base}/v1beta/models/{quote(call.model_id, safe='')}:{method}"
        headers = {"accept": "text/event-stream" if call.stream else "application/json"}
        if self._secret:
            headers["x-goog-api-key"] = self._secret
        return HttpRequest(url=url, headers=headers, body=request_body(call, vertex=self._vertex))

    def parse(self, body: Any) -> Completion:
        response = as_object(body)
        if "candidates" not in response and "promptFeedback" not in response:
            raise KeyError("candidates")
        decoder = _ChunkDecoder()
        decoder.absorb(response)
        decoder.finished = True
        return decoder.completion()

    def decoder(self) -> StreamDecoder[SseEvent]:
        return _ChunkDecoder()


def _usage(meta: dict[str, Any]) -> Usage:
    # promptTokenCount includes the cached content; thoughtsTokenCount is not in
    # candidatesTokenCount but is billed as output. A cache is written by its own call
    # (cachedContents.create, billed apart), never by a generation.
    read = as_int(meta.get("cachedContentTokenCount"))
    thoughts = as_int(meta.get("thoughtsTokenCount"))
    return Usage(
        input_tokens=max(0, as_int(meta.get("promptTokenCount")) - read),
        cache_read_tokens=read,
        output_tokens=as_int(meta.get("candidatesTokenCount")) + thoughts,
        reasoning_tokens=thoughts,
    )


class _ChunkDecoder:
    """Each `data:` is a whole GenerateContentResponse; the last one carries finishReason."""

    def __init__(self) -> None:
        self.finished = False
        self._text: list[str] = []
        self._calls: list[ToolCall] = []
        self._usage = Usage()
        self._finish_reason: FinishReason | None = None
        self._signature: str | None = None  # the last signature on a part that is no call
        self._model: str | None = None

    def feed(self, event: SseEvent) -> list[Event]:
        data = json.loads(event.data)
        if isinstance(data, list) and data and isinstance(data[0], dict) and "error" in data[0]:
            raise classify_stream_error("gemini", data)  # a Status in Google's one-element list
        return self.absorb(as_object(data))

    def absorb(self, chunk: dict[str, Any]) -> list[Event]:
        """Take in one response (or stream chunk); return its content deltas, after the
        thinking it reports first (`UsageSoFar`)."""
        if chunk.get("error") is not None:
            raise classify_stream_error("gemini", chunk)
        events: list[Event] = []
        if chunk.get("usageMetadata") is not None:
            usage = _usage(as_object(chunk["usageMetadata"]))
            if usage.reasoning_tokens > self._usage.reasoning_tokens:
                # Thinking is counted before the answer streams: billed even if it is cut.
                events.append(UsageSoFar(usage))
            self._usage = usage
        self._model = as_str(chunk.get("modelVersion")) or self._model
        candidates = chunk.get("candidates") or ()
        if not candidates:
            feedback = as_object(chunk.get("promptFeedback") or {})
            if feedback.get("blockReason") is not None:
                # The prompt itself was blocked, whatever the reason's name.
                self._finish_reason = FinishReason.CONTENT_FILTER
            return events
        candidate = as_object(candidates[0])
        if candidate.get("finishReason") is not None:
            self._finish_reason = normalize_finish("gemini", as_str(candidate["finishReason"]))
        for raw in as_object(candidate.get("content") or {}).get("parts") or ():
            part = as_object(raw)
            signature = as_str(part.get("thoughtSignature")) or None
            if "functionCall" in part:
                events.extend(self._call(as_object(part["functionCall"]), signature))
                continue
            if signature is not None:
                self._signature = signature
            if part.get("thought"):
                continue
            if as_str(part.get("text")):
                self._text.append(part["text"])
                events.append(TextDelta(part["text"]))
        return events

    def _call(self, call: dict[str, Any], signature: str | None) -> list[Event]:
        arguments = as_object(call.get("args") or {})
        index = len(self._calls)
        self._calls.append(
            ToolCall(
                id=as_str(call.get("id")) or f"call_{uuid.uuid4().hex[:24]}",
                name=as_str(call["name"]),
                arguments=arguments,
                signature=signature,
            )
        )
        return [ToolCallDelta(index=index, name=call["name"], arguments=json.dumps(arguments))]

    def completion(self) -> Completion:
        if not self.finished and self._finish_reason is None:
            raise ConnectionFailed("stream ended before a finishReason")
        finish = self._finish_reason
        if finish is FinishReason.STOP and self._calls:
            finish = FinishReason.TOOL_CALLS  # Gemini ends a function call with STOP
        return Completion(
            text="".join(self._text),
            tool_calls=tuple(self._calls),
            usage=self._usage,
            finish_reason=finish,
            reasoning=()
            if self._signature is None
            else (Reasoning(origin=ORIGIN, signature=self._signature),),
            model=self._model,
        )
