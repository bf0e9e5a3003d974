"""OpenAI Chat Completions, and what speaks it: Azure OpenAI, vLLM, Ollama.

Every field of the turn is sent as the API reference for `POST /chat/completions`
names it (docs/providers.md has the table): images as `image_url` parts (inline data as
a data URL), PDFs as `file` parts (data only: the API has no URL source for them), the
named tool as `{"type": "function", ...}`, a schema as `response_format` `json_schema`.
A reasoning model gets `reasoning_effort` and none of the fields OpenAI's reasoning
models refuse (`temperature`, `top_p`, `stop`): its stop sequences are applied here
(`worker.adapters.stop_cut`). A refusal (`message.refusal`) is `Completion.refusal`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote, urlsplit

from worker.adapters.base import Completion, Event, ProviderCall, TextDelta, ToolCallDelta
from worker.adapters.body import Verbatim
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
from worker.adapters.reasoning_models import openai_reasoning
from worker.adapters.sse import SseEvent
from worker.adapters.stop_cut import cut_at_stops
from worker.errors import ConnectionFailed, InvalidRequest
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Part,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    Usage,
)

__all__ = ["OpenAIAdapter", "chat_options"]

# OpenAI deprecated `max_tokens` for `max_completion_tokens` (its reasoning models
# reject the old name, Azure accepts the new one since 2024-09-01-preview), while
# local OpenAI-compatible servers (Ollama, older vLLM) only know `max_tokens`. An OpenAI
# reasoning model gets the new name on any host: Azure's v1 endpoint and gateways pass
# the body on to the API that refuses the old one.
_NEW_LIMIT_HOSTS = ("api.openai.com",)


class OpenAIAdapter(SseAdapter):
    """Chat Completions; Azure OpenAI when the provider has an `azure_api_version`."""

    wire = "openai"

    def request(self, call: ProviderCall) -> HttpRequest:
        base = self._provider.base_url.rstrip("/")
        headers = {"accept": "text/event-stream" if call.stream else "application/json"}
        version = self._provider.azure_api_version
        if version is not None:
            url = (
                f"{base}/deployments/{quote(call.model_id, safe='')}/chat/completions"
                f"?api-version={quote(version, safe='')}"
            )
            if self._secret:
                headers["api-key"] = self._secret
        else:
            url = f"{base}/chat/completions"
            if self._secret:
                headers["authorization"] = f"Bearer {self._secret}"
        host = urlsplit(base).hostname or ""
        new_limit = (
            version is not None or host in _NEW_LIMIT_HOSTS or openai_reasoning(call.model_id)
        )
        body: dict[str, Any] = {
            "model": call.model_id,
            "messages": [_message(message) for message in call.messages],
            "max_completion_tokens" if new_limit else "max_tokens": call.max_tokens,
        }
        if call.tools:
            body["tools"] = [_tool(tool) for tool in call.tools]
        body.update(chat_options(call))
        if call.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return HttpRequest(url=url, headers=headers, body=body)

    def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """As `HttpAdapter.send`; a reasoning model's answer cut at the turn's stop sequences."""
        events = super().send(call)
        return cut_at_stops(events, call.stop) if call.reasoning and call.stop else events

    def parse(self, body: Any) -> Completion:
        choice = as_object(as_object(body)["choices"][0])
        message = as_object(choice["message"])
        calls = tuple(
            ToolCall(
                id=as_str(item.get("id")) or _new_id(),
                name=as_str(item["function"]["name"]),
                arguments=parse_arguments(as_str(item["function"].get("arguments"))),
            )
            for item in message.get("tool_calls") or ()
        )
        refusal = as_str(message.get("refusal")) or None
        return Completion(
            text=as_str(message.get("content")),
            tool_calls=calls,
            usage=_usage(body.get("usage")),
            finish_reason=_finish(as_str(choice.get("finish_reason")), refusal),
            refusal=refusal,
            model=as_str(body.get("model")) or None,
        )

    def decoder(self) -> StreamDecoder[SseEvent]:
        return _ChunkDecoder()


def chat_options(call: ProviderCall) -> dict[str, Any]:
    """The turn's optional fields that this call sends (none that the caller left unset)."""
    out: dict[str, Any] = {}
    if call.tools:
        # The API refuses both without tools, and read-only degradation may have dropped
        # them all: then no tool can be called, which is what "auto" and "none" leave.
        if call.tool_choice is not None:
            out["tool_choice"] = _tool_choice(call.tool_choice)
        if call.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = call.parallel_tool_calls
    if call.response_format is not None:
        out["response_format"] = _response_format(call.response_format)
    if call.reasoning:
        # OpenAI's reasoning models refuse temperature, top_p and stop ("Unsupported
        # parameter"); `send` applies the stop sequences to the answer instead.
        if call.reasoning_effort is not None:
            out["reasoning_effort"] = call.reasoning_effort
    else:
        sampling = {"temperature": call.temperature, "top_p": call.top_p, "stop": call.stop}
        out.update((name, value) for name, value in sampling.items() if value is not None)
    if call.seed is not None:
        out["seed"] = call.seed
    return out


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, NamedTool):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _response_format(wanted: JsonSchemaFormat | JsonObjectFormat) -> dict[str, Any]:
    if isinstance(wanted, JsonObjectFormat):
        return {"type": "json_object"}
    schema = {"name": wanted.name, "schema": wanted.json_schema, "strict": wanted.strict}
    return {"type": "json_schema", "json_schema": schema}


def _message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": _content(message)}
    if message.tool_calls:
        out["content"] = message.text or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def _content(message: Message) -> str | list[dict[str, Any]]:
    """Text as a string, as it came; parts as the API's content parts, in their order."""
    if isinstance(message.content, str) or not message.content:
        return message.text
    return [_part(part, message.role) for part in message.content]


def _part(part: Part, role: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if role != "user":
        # A tool message carries text parts only; capability fit skips this API for such a
        # turn (`wire_limits`), so this is a call that should not have been made.
        raise InvalidRequest(f"Chat Completions takes no {part.type} in a {role} message")
    if isinstance(part, ImagePart):
        url = (
            part.url
            if part.data is None
            else Verbatim(f"data:{part.media_type};base64,{part.data}")
        )
        return {"type": "image_url", "image_url": {"url": url}}
    return _file(part)


def _file(part: DocumentPart) -> dict[str, Any]:
    if part.data is None:
        raise InvalidRequest("Chat Completions takes a PDF as data only, not by URL")
    # The API asks for a file name with inline data (a 400 without one).
    data = Verbatim(f"data:{part.media_type};base64,{part.data}")
    return {"type": "file", "file": {"filename": part.name or "document.pdf", "file_data": data}}


def _tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    usage = as_object(raw)
    prompt = as_object(usage.get("prompt_tokens_details") or {})
    completion = as_object(usage.get("completion_tokens_details") or {})
    read = as_int(prompt.get("cached_tokens"))
    # Only some OpenAI-compatible servers report cache writes, inside prompt_tokens too.
    written = as_int(prompt.get("cache_write_tokens"))
    return Usage(
        # prompt_tokens counts the cached tokens; completion_tokens counts the reasoning.
        input_tokens=max(0, as_int(usage.get("prompt_tokens")) - read - written),
        cache_write_tokens=written,
        cache_read_tokens=read,
        output_tokens=as_int(usage.get("completion_tokens")),
        reasoning_tokens=as_int(completion.get("reasoning_tokens")),
    )


def _finish(raw: str, refusal: str | None) -> FinishReason | None:
    """A refusal comes with finish reason `stop`: the refusal is what it means."""
    return FinishReason.REFUSAL if refusal is not None else normalize_finish("openai", raw)


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class _PendingCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class _ChunkDecoder:
    """`data: {chunk}` lines until `data: [DONE]`; usage rides on a last, choice-less chunk."""

    def __init__(self) -> None:
        self.finished = False
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _PendingCall] = {}
        self._usage = Usage()
        self._finish_reason: str | None = None
        self._model: str | None = None

    def feed(self, event: SseEvent) -> list[Event]:
        if event.data.strip() == "[DONE]":
            self.finished = True
            return []
        chunk = as_object(json.loads(event.data))
        if chunk.get("error") is not None:
            raise classify_stream_error("openai", chunk)
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk["usage"])
        self._model = self._model or as_str(chunk.get("model")) or None
        events: list[Event] = []
        for raw in chunk.get("choices") or ():
            choice = as_object(raw)
            delta = as_object(choice.get("delta") or {})
            text = as_str(delta.get("content"))
            if text:
                self._text.append(text)
                events.append(TextDelta(text))
            # A refusal streams as `delta.refusal`: the model's words, but no answer.
            self._refusal.append(as_str(delta.get("refusal")))
            events.extend(self._tool_delta(as_object(i)) for i in delta.get("tool_calls") or ())
            if choice.get("finish_reason") is not None:
                self._finish_reason = as_str(choice["finish_reason"])
        return events

    def _tool_delta(self, item: dict[str, Any]) -> ToolCallDelta:
        index = as_int(item.get("index"))
        pending = self._calls.setdefault(index, _PendingCall())
        function = as_object(item.get("function") or {})
        name, arguments = as_str(function.get("name")), as_str(function.get("arguments"))
        pending.id = pending.id or as_str(item.get("id"))
        pending.name += name
        pending.arguments.append(arguments)
        return ToolCallDelta(index=index, name=name, arguments=arguments)

    def completion(self) -> Completion:
        if not self.finished:
            raise ConnectionFailed("stream ended before [DONE]")
        calls = tuple(
            ToolCall(
                id=pending.id or _new_id(),
                name=pending.name,
                arguments=parse_arguments("".join(pending.arguments)),
            )
            for _, pending in sorted(self._calls.items())
        )
        refusal = "".join(self._refusal) or None
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            usage=self._usage,
            finish_reason=_finish(self._finish_reason or "", refusal),
            refusal=refusal,
            model=self._model,
        )
