"""Anthropic Messages as the simulator speaks it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    fragments,
    require,
    sse,
)

__all__ = ["AnthropicDialect"]

# status -> error.type; other 4xx are invalid_request_error, other 5xx api_error.
_ERRORS: dict[int, str] = {
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_STREAM_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


class AnthropicDialect:
    """`POST /v1/messages`."""

    api = "anthropic"
    separator = b"\n\n"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read model, system, messages, tools and max_tokens (which the API requires)."""
        model = require(body, "model", str)
        messages = require(body, "messages", list)
        limit = require(body, "max_tokens", int)
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            raise BadRequest("tools.name: field required")
        prompt = json.dumps([body.get("system"), messages])
        return Inspection(
            model=model,
            stream=body.get("stream") is True,
            input_tokens=estimate_tokens(prompt),
            message_count=len(messages),
            tools=tuple(t["name"] for t in tools),
            max_tokens=limit,
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A `message` object with text and tool_use blocks."""
        content: list[dict[str, Any]] = []
        if _has_text_block(reply):
            content.append({"type": "text", "text": reply.text})
        if reply.tool is not None:
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_sim{reply.tool.id}",
                    "name": reply.tool.name,
                    "input": dict(reply.tool.arguments),
                }
            )
        return {
            **self._message(reply),
            "content": content,
            "stop_reason": _stop_reason(reply),
            "usage": _usage(reply, reply.output_tokens),
        }

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """message_start, the empty text block's start, ping."""
        start = {
            **self._message(reply),
            "content": [],
            "stop_reason": None,
            "usage": _usage(reply, 1),
        }
        out = [_event("message_start", {"message": start})]
        if _has_text_block(reply):
            block = {"type": "text", "text": ""}
            out.append(_event("content_block_start", {"index": 0, "content_block": block}))
        out.append(_event("ping", {}))
        return out

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """text_delta per token; the tool_use block's start, then input_json_delta fragments."""
        out = [
            _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": t}})
            for t in reply.tokens
        ]
        if reply.tool is not None:
            index = 1 if _has_text_block(reply) else 0
            block = {
                "type": "tool_use",
                "id": f"toolu_sim{reply.tool.id}",
                "name": reply.tool.name,
                "input": {},
            }
            start = _event("content_block_start", {"index": index, "content_block": block})
            if index:
                start = _event("content_block_stop", {"index": 0}) + start
            out.append(start)
            for part in fragments(reply.tool.arguments_json):
                delta = {"type": "input_json_delta", "partial_json": part}
                out.append(_event("content_block_delta", {"index": index, "delta": delta}))
        return out

    def ending(self, reply: CannedReply) -> list[bytes]:
        """content_block_stop, message_delta (stop_reason, output_tokens), message_stop.

        The delta's output_tokens is the cumulative count, thinking included; the input
        and cache counts stay in message_start (the API may repeat them here, or not).
        """
        last = 1 if reply.tool is not None and _has_text_block(reply) else 0
        delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
        usage = {"output_tokens": reply.output_tokens}
        return [
            _event("content_block_stop", {"index": last}),
            _event("message_delta", {"delta": delta, "usage": usage}),
            _event("message_stop", {}),
        ]

    def stream_error(self, payload: Mapping[str, Any] | None) -> bytes:
        """`event: error` with an overloaded_error by default."""
        return sse(dict(payload) if payload is not None else _STREAM_ERROR, event="error")

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """`{"type": "error", "error": {"type", "message"}, "request_id"}`."""
        default = "api_error" if status >= 500 else "invalid_request_error"
        return {
            "type": "error",
            "error": {"type": _ERRORS.get(status, default), "message": message},
            "request_id": "req_simulated",
        }

    def _message(self, reply: CannedReply) -> dict[str, Any]:
        return {
            "id": f"msg_sim{reply.seq:08d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "stop_sequence": None,
        }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return sse({"type": name, **data}, event=name)


def _has_text_block(reply: CannedReply) -> bool:
    return bool(reply.tokens) or reply.tool is None


def _stop_reason(reply: CannedReply) -> str:
    if reply.tool is not None:
        return "tool_use"
    return "max_tokens" if reply.truncated else "end_turn"


def _usage(reply: CannedReply, output_tokens: int) -> dict[str, int]:
    # input_tokens leaves out the cache's tokens; output_tokens includes any thinking.
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
        "cache_read_input_tokens": reply.cache_read_tokens,
        "output_tokens": output_tokens,
    }
