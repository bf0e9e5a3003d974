"""OpenAI's Responses API as the simulator speaks it (also Azure OpenAI's route).

A reasoning model (`o*`, `gpt-5*`) answers with a reasoning item first, its encrypted
content issued by the simulator (`responses_request.reasoning_signature`), so a later
request that sends it back is checked as OpenAI checks it. A stream is typed events,
each `event: <type>` with a `sequence_number`: the reasoning item and the response's
creation before any content, then one chunk per text token or argument fragment, then
the items' `done` events and `response.completed` (or `response.incomplete`, for a
reply cut at `max_output_tokens` or by the content filter).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.faults import StreamPayload
from worker.simulator.openai_request import REASONING_MODEL
from worker.simulator.openai_wire import OpenAIDialect
from worker.simulator.responses_request import (
    check_responses_request,
    forced_function,
    reasoning_signature,
)
from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    fragments,
    sse,
)

__all__ = ["ResponsesDialect"]

_CHAT = OpenAIDialect()
_STREAM_ERROR = {
    "type": "error",
    "code": "server_error",
    "message": "The server had an error processing your request. Sorry about that! You can "
    "retry your request, or contact us through our help center if you keep seeing this error.",
    "param": None,
}


class ResponsesDialect:
    """`POST /v1/responses`; with `azure=True`, Azure's `/openai/responses` (model = the
    deployment, in the body)."""

    separator = b"\n\n"

    def __init__(self, *, azure: bool = False) -> None:
        self.api = "azure-responses" if azure else "responses"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        model = body.get("model")
        if not isinstance(model, str):
            raise BadRequest("model: field required", body=_CHAT.error_body(400, "model"))
        schema = check_responses_request(body, model)
        items = body.get("input")
        tools = body.get("tools") or []
        limit = body.get("max_output_tokens")
        return Inspection(
            model=model,
            stream=body.get("stream") is True,
            input_tokens=estimate_tokens(json.dumps([body.get("instructions"), items])),
            message_count=len(items) if isinstance(items, list) else 1,
            tools=tuple(t["name"] for t in tools),
            max_tokens=limit if isinstance(limit, int) else None,
            include_usage=True,
            thinking=bool(REASONING_MODEL.match(model)),
            answer_schema=schema,
            forced_tool=forced_function(body),
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A `response` object with its output items."""
        return _response(reply, done=True)

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """response.created, response.in_progress, then the reasoning item, whole."""
        events = _Events()
        events.add("response.created", response=_response(reply, done=False))
        events.add("response.in_progress", response=_response(reply, done=False))
        if reply.thinking:
            item = _reasoning_item(reply)
            events.add("response.output_item.added", output_index=0, item={**item})
            events.add("response.output_item.done", output_index=0, item=item)
        return [events.pop()]

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """An output_text delta per token (the first opening the message item), then the
        function call's item and its argument fragments; a refusal as refusal deltas."""
        events, out = _Events(start=_preamble_count(reply)), []
        at = int(reply.thinking)
        message_id = f"msg_sim{reply.seq:08d}"
        words = list(reply.tokens) if reply.refusal is None else fragments(reply.refusal)
        delta = "response.output_text.delta" if reply.refusal is None else "response.refusal.delta"
        for i, word in enumerate(words):
            if i == 0:
                item = {"id": message_id, "type": "message", "status": "in_progress"}
                events.add("response.output_item.added", output_index=at, item=item)
            events.add(delta, item_id=message_id, output_index=at, content_index=0, delta=word)
            out.append(events.pop())
        if reply.tool is not None:
            at += bool(words)
            item = {**_call_item(reply), "arguments": "", "status": "in_progress"}
            for i, part in enumerate(fragments(reply.tool.arguments_json)):
                if i == 0:
                    events.add("response.output_item.added", output_index=at, item=item)
                events.add(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=at,
                    delta=part,
                )
                out.append(events.pop())
        return out

    def ending(self, reply: CannedReply) -> list[bytes]:
        """Each item's done event, then response.completed (or response.incomplete)."""
        start = _preamble_count(reply) + _piece_events(reply)
        events = _Events(start=start)
        final = _response(reply, done=True)
        for index, item in enumerate(final["output"]):
            if item["type"] != "reasoning":
                events.add("response.output_item.done", output_index=index, item=item)
        ended = "response.completed" if final["status"] == "completed" else "response.incomplete"
        events.add(ended, response=final)
        return [events.pop()]

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """An `error` event, or what the fault gives (`response.failed`): `event: <type>`."""
        data = payload if payload is not None else _STREAM_ERROR
        kind = data.get("type") if isinstance(data, dict) else None
        return sse(data, event=kind if isinstance(kind, str) else "error")

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The same `{"error": {...}}` envelope as Chat Completions."""
        return _CHAT.error_body(status, message)


class _Events:
    """Typed events, numbered in order from `start`."""

    def __init__(self, *, start: int = 0) -> None:
        self._seq = start
        self._chunk: list[bytes] = []

    def add(self, kind: str, **fields: Any) -> None:
        self._chunk.append(sse({"type": kind, "sequence_number": self._seq, **fields}, event=kind))
        self._seq += 1

    def pop(self) -> bytes:
        chunk, self._chunk = b"".join(self._chunk), []
        return chunk


def _preamble_count(reply: CannedReply) -> int:
    return 2 + 2 * reply.thinking


def _piece_events(reply: CannedReply) -> int:
    words = len(reply.tokens) if reply.refusal is None else len(fragments(reply.refusal))
    tool = 0 if reply.tool is None else 1 + len(fragments(reply.tool.arguments_json))
    return words + bool(words) + tool


def _response(reply: CannedReply, *, done: bool) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    status = "in_progress"
    incomplete = None
    if done:
        output = _output(reply)
        status = "completed"
        if reply.truncated or reply.filtered:
            status = "incomplete"
            reason = "content_filter" if reply.filtered else "max_output_tokens"
            incomplete = {"reason": reason}
    return {
        "id": f"resp_sim{reply.seq:08d}",
        "object": "response",
        "created_at": reply.created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "model": reply.model,
        "output": output,
        "store": False,
        "usage": _usage(reply) if done else None,
    }


def _output(reply: CannedReply) -> list[dict[str, Any]]:
    output = [_reasoning_item(reply)] if reply.thinking else []
    content: list[dict[str, Any]]
    if reply.refusal is not None:
        content = [{"type": "refusal", "refusal": reply.refusal}]
    else:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
    if reply.tokens or reply.refusal is not None:
        message = {
            "id": f"msg_sim{reply.seq:08d}",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": content,
        }
        output.append(message)
    if reply.tool is not None:
        output.append(_call_item(reply))
    return output


def _reasoning_item(reply: CannedReply) -> dict[str, Any]:
    item_id = f"rs_sim{reply.seq:08d}"
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": reply.thought}],
        "encrypted_content": reasoning_signature(item_id),
    }


def _call_item(reply: CannedReply) -> dict[str, Any]:
    assert reply.tool is not None
    return {
        "id": f"fc_sim{reply.seq:08d}",
        "type": "function_call",
        "status": "completed",
        "call_id": f"call_{reply.tool.id}",
        "name": reply.tool.name,
        "arguments": reply.tool.arguments_json,
    }


def _usage(reply: CannedReply) -> dict[str, Any]:
    # input_tokens includes the cached ones, output_tokens the reasoning ones.
    return {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": reply.cache_read_tokens},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        "total_tokens": reply.total_tokens,
    }
