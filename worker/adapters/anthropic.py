"""Anthropic Messages.

Text, images and PDFs go as content blocks (a message of text alone as a string), in
user messages and inside tool results; the turn's options (tool_choice, sampling,
thinking, the answer's format) as `worker.adapters.claude_options` decides for the model.
An answer carried by a forced tool (`AnswerTool`) comes back as text: its input's JSON,
streamed as text deltas, and no tool call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any, ClassVar

from worker.adapters.base import Completion, Event, ProviderCall, TextDelta, ToolCallDelta
from worker.adapters.body import Verbatim
from worker.adapters.classify import classify_stream_error
from worker.adapters.claude_options import AnswerTool, answer_tool, options
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
from worker.adapters.sse import SseEvent
from worker.errors import ConnectionFailed, InvalidRequest
from worker.types import DocumentPart, ImagePart, Message, Reasoning, ToolCall, Usage

__all__ = ["ANTHROPIC_VERSION", "ORIGIN", "AnthropicAdapter"]

ANTHROPIC_VERSION = "2023-06-01"
ORIGIN = "anthropic"  # the `Reasoning.origin` of Claude's thinking blocks, wherever served


class AnthropicAdapter(SseAdapter):
    """POST /v1/messages with `x-api-key` and `anthropic-version`."""

    wire = "anthropic"
    # Structured outputs (`output_config.format`) and URL sources: what the wire takes.
    native_output: ClassVar[bool] = True
    url_sources: ClassVar[bool] = True

    async def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`."""
        answer = answer_tool(call, native=self.native_output)
        async with contextlib.aclosing(super().send(call)) as events:
            if answer is None:
                async for event in events:
                    yield event
                return
            reading = _AnswerReader(answer)
            async for event in events:
                for out in reading.feed(event):
                    yield out

    def request(self, call: ProviderCall) -> HttpRequest:
        headers = {
            "accept": "text/event-stream" if call.stream else "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if self._secret:
            headers["x-api-key"] = self._secret
        body: dict[str, Any] = {
            "model": call.model_id,
            "max_tokens": call.max_tokens,
            "messages": _messages(call.messages, urls=self.url_sources),
        }
        system = "\n\n".join(m.text for m in call.messages if m.role == "system")
        if system:
            body["system"] = system
        body.update(options(call, native=self.native_output, may_think=may_think(call.messages)))
        if call.stream:
            body["stream"] = True
        url = f"{self._provider.base_url.rstrip('/')}/v1/messages"
        return HttpRequest(url=url, headers=headers, body=body)

    def parse(self, body: Any) -> Completion:
        message = as_object(body)
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        for raw in message["content"]:
            block = as_object(raw)
            if block.get("type") == "text":
                text.append(as_str(block.get("text")))
            elif block.get("type") in ("thinking", "redacted_thinking"):
                reasoning.append(_reasoning(block))
            elif block.get("type") == "tool_use":
                calls.append(
                    ToolCall(
                        id=as_str(block["id"]),
                        name=as_str(block["name"]),
                        arguments=as_object(block.get("input") or {}),
                    )
                )
        return Completion(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=_usage(as_object(message.get("usage") or {}), Usage()),
            finish_reason=normalize_finish("anthropic", as_str(message.get("stop_reason"))),
            reasoning=tuple(reasoning),
            model=as_str(message.get("model")) or None,
        )

    def decoder(self) -> StreamDecoder[SseEvent]:
        return _EventDecoder()


def _messages(messages: tuple[Message, ...], *, urls: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the open user message of tool results
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": _content(message, urls=urls),
            }
            if message.is_error:
                result["is_error"] = True
            results.append(result)
            continue
        results = None
        thinking = _thinking_blocks(message)
        if message.role == "assistant" and (message.tool_calls or thinking):
            # Thinking first: with extended thinking and tools, the API refuses an
            # assistant turn whose thinking blocks are missing or moved.
            blocks: list[dict[str, Any]] = thinking
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            )
            out.append({"role": "assistant", "content": blocks})
        else:
            content = _content(message, urls=urls)
            # The API refuses a message with empty (or blank) content; one left out is no
            # loss (the turns either side of it join, as the API joins two in a row).
            if content and (not isinstance(content, str) or content.strip()):
                out.append({"role": message.role, "content": content})
    return out


def _content(message: Message, *, urls: bool) -> str | list[dict[str, Any]]:
    """Text alone as a string; with images or documents, a block per part, in order
    (an empty text block is refused, so none is sent)."""
    if not message.attachments:
        return message.text
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ImagePart | DocumentPart):
            blocks.append(_attachment(part, urls=urls))
        elif part.text:
            blocks.append({"type": "text", "text": part.text})
    return blocks


def _attachment(part: ImagePart | DocumentPart, *, urls: bool) -> dict[str, Any]:
    """An `image` or `document` block: base64 data, or a URL Anthropic fetches."""
    if part.url is not None:
        if not urls:
            raise InvalidRequest(f"this API takes no {part.type} by URL, only as data")
        source: dict[str, Any] = {"type": "url", "url": part.url}
    else:
        source = {"type": "base64", "media_type": part.media_type, "data": Verbatim(part.data)}
    block: dict[str, Any] = {"type": part.type, "source": source}
    if isinstance(part, DocumentPart) and part.name is not None:
        block["title"] = part.name
    return block


def may_think(messages: tuple[Message, ...]) -> bool:
    """Whether Claude may be asked to think on `messages`, wherever it is served.

    With thinking on, Claude refuses a tool loop whose last assistant turn does not
    start with its own thinking (another vendor wrote it, after a fallback): such a
    request goes without thinking rather than being refused."""
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return last is None or not last.tool_calls or bool(_thinking_blocks(last))


def _thinking_blocks(message: Message) -> list[dict[str, Any]]:
    """Claude's own thinking, as it was written; another vendor's reasoning is dropped."""
    blocks: list[dict[str, Any]] = []
    for item in message.reasoning:
        if item.origin != ORIGIN:
            continue
        if item.redacted is not None:
            blocks.append({"type": "redacted_thinking", "data": item.redacted})
        elif item.signature:  # unsigned thinking is refused; it cannot be sent back
            blocks.append({"type": "thinking", "thinking": item.text, "signature": item.signature})
    return blocks


def _reasoning(block: dict[str, Any]) -> Reasoning:
    if block.get("type") == "redacted_thinking":
        return Reasoning(origin=ORIGIN, redacted=as_str(block.get("data")))
    signature = as_str(block.get("signature")) or None
    return Reasoning(origin=ORIGIN, text=as_str(block.get("thinking")), signature=signature)


def _usage(raw: dict[str, Any], before: Usage) -> Usage:
    """`raw` merged over `before`: message_delta repeats message_start's counts
    cumulatively or leaves them out, so a count absent (or 0) keeps the one before."""
    # Anthropic's input_tokens already leaves out cache writes and reads (the tokens after
    # the last cache breakpoint), and output_tokens already includes thinking.
    details = as_object(raw.get("output_tokens_details") or {})
    return Usage(
        input_tokens=as_int(raw.get("input_tokens")) or before.input_tokens,
        cache_write_tokens=as_int(raw.get("cache_creation_input_tokens"))
        or before.cache_write_tokens,
        cache_read_tokens=as_int(raw.get("cache_read_input_tokens")) or before.cache_read_tokens,
        output_tokens=as_int(raw.get("output_tokens")) or before.output_tokens,
        reasoning_tokens=as_int(details.get("thinking_tokens")) or before.reasoning_tokens,
    )


class _AnswerReader:
    """The answer tool's call turned into the answer's text: its input's JSON pieces as
    text deltas (a wrapped answer, unwrapped, as one delta at the end), and a
    `Completion` whose text is that JSON, without the call."""

    def __init__(self, answer: AnswerTool) -> None:
        self._answer = answer
        self._index: int | None = None  # the answer's tool-call index in the stream
        self._pieces: list[str] = []

    def feed(self, event: Event) -> list[Event]:
        if isinstance(event, ToolCallDelta):
            if event.name == self._answer.name:
                self._index = event.index
            if event.index != self._index:
                return [event]
            self._pieces.append(event.arguments)
            if self._answer.wrapped or not event.arguments:
                return [event] if self._answer.wrapped else []
            return [TextDelta(event.arguments)]
        if not isinstance(event, Completion):
            return [event]
        call = next((c for c in event.tool_calls if c.name == self._answer.name), None)
        if call is None:
            return [event]
        others = tuple(c for c in event.tool_calls if c is not call)
        if self._answer.wrapped:
            text = json.dumps(call.arguments.get("answer", call.arguments), ensure_ascii=False)
        else:
            text = "".join(self._pieces) or json.dumps(call.arguments, ensure_ascii=False)
        finish = event.finish_reason
        if not others and finish == FinishReason.TOOL_CALLS:
            finish = FinishReason.STOP
        done = replace(event, text=text, tool_calls=others, finish_reason=finish)
        streamed = self._index is not None
        return [TextDelta(text), done] if streamed and self._answer.wrapped else [done]


class _EventDecoder:
    """message_start, content blocks with their deltas, message_delta, message_stop."""

    def __init__(self) -> None:
        self.finished = False
        self._text: list[str] = []
        self._tools: dict[int, int] = {}  # content block index -> tool-call index
        self._calls: list[tuple[str, str, list[str]]] = []  # id, name, argument pieces
        # content block index -> the thinking block as it streams (type, thinking, signature)
        self._thinking: dict[int, dict[str, Any]] = {}
        self._usage = Usage()
        self._stop_reason: str | None = None
        self._model: str | None = None

    def feed(self, event: SseEvent) -> list[Event]:
        if event.event in ("ping", "content_block_stop"):
            return []
        data = as_object(json.loads(event.data))
        kind = event.event if event.event != "message" else as_str(data.get("type"))
        if kind == "error":
            raise classify_stream_error("anthropic", data)
        if kind == "message_start":
            message = as_object(data["message"])
            self._usage = _usage(as_object(message.get("usage") or {}), self._usage)
            self._model = as_str(message.get("model")) or None
        elif kind == "content_block_start":
            return self._block_start(as_int(data["index"]), as_object(data["content_block"]))
        elif kind == "content_block_delta":
            return self._block_delta(as_int(data["index"]), as_object(data["delta"]))
        elif kind == "message_delta":
            self._stop_reason = as_str(as_object(data["delta"]).get("stop_reason")) or None
            self._usage = _usage(as_object(data.get("usage") or {}), self._usage)
        elif kind == "message_stop":
            self.finished = True
        return []

    def _block_start(self, index: int, block: dict[str, Any]) -> list[Event]:
        if block.get("type") in ("thinking", "redacted_thinking"):
            self._thinking[index] = dict(block)
            return []
        if block.get("type") == "text" and as_str(block.get("text")):
            self._text.append(block["text"])
            return [TextDelta(block["text"])]
        if block.get("type") != "tool_use":
            return []
        position = len(self._calls)
        self._tools[index] = position
        name = as_str(block["name"])
        self._calls.append((as_str(block["id"]), name, []))
        return [ToolCallDelta(index=position, name=name)]

    def _block_delta(self, index: int, delta: dict[str, Any]) -> list[Event]:
        kind = delta.get("type")
        if kind == "text_delta":
            text = as_str(delta.get("text"))
            self._text.append(text)
            return [TextDelta(text)] if text else []
        if kind == "input_json_delta" and index in self._tools:
            position = self._tools[index]
            piece = as_str(delta.get("partial_json"))
            self._calls[position][2].append(piece)
            return [ToolCallDelta(index=position, arguments=piece)] if piece else []
        thinking = self._thinking.get(index)
        if thinking is not None and kind == "thinking_delta":
            thinking["thinking"] = as_str(thinking.get("thinking")) + as_str(delta.get("thinking"))
        elif thinking is not None and kind == "signature_delta":
            thinking["signature"] = as_str(delta.get("signature"))
        return []  # thinking is kept for the next turn, never content of this one

    def completion(self) -> Completion:
        if not self.finished:
            raise ConnectionFailed("stream ended before message_stop")
        calls = tuple(
            ToolCall(id=id_, name=name, arguments=parse_arguments("".join(pieces)))
            for id_, name, pieces in self._calls
        )
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            usage=self._usage,
            finish_reason=normalize_finish("anthropic", self._stop_reason),
            reasoning=tuple(_reasoning(b) for _, b in sorted(self._thinking.items())),
            model=self._model,
        )
