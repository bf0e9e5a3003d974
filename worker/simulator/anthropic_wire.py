"""Anthropic Messages as the simulator speaks it.

With extended thinking asked for (`thinking: {"type": "enabled"}`), replies start with
a signed thinking block (and a redacted_thinking block when the fault says so), and a
follow-up whose last assistant turn lacks them is refused as the API refuses it; a
thinking block it did not sign (changed, or another vendor's) is refused, thinking on or
off.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.anthropic_request import check_messages_body
from worker.simulator.faults import StreamPayload
from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    fragments,
    require,
    sign,
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
_THINKING = ("thinking", "redacted_thinking")
# The API's words, as quoted in public issues (e.g. anthropics/claude-code).
_THINKING_FIRST = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
    "We recommend you include thinking blocks from previous turns. To avoid this "
    "requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


class AnthropicDialect:
    """`POST /v1/messages`."""

    api = "anthropic"
    separator = b"\n\n"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read model, system, messages, tools and max_tokens (which the API requires),
        refusing what the API refuses (`anthropic_request`)."""
        return self._inspect(body, require(body, "model", str))

    def _inspect(self, body: Mapping[str, Any], model: str, **endpoint: Any) -> Inspection:
        """`inspect` for `model`, on an endpoint that takes what `endpoint` says
        (`check_messages_body`'s keywords)."""
        messages = require(body, "messages", list)
        limit = require(body, "max_tokens", int)
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            raise BadRequest("tools.name: field required")
        asked = check_messages_body(body, model, **endpoint)
        thinks = asked.thinking
        # Thinking it did not sign is refused with thinking on or off.
        _check_thinking(messages, model, thinking=thinks)
        prompt = json.dumps([body.get("system"), messages])
        return Inspection(
            model=model,
            stream=body.get("stream") is True,
            input_tokens=estimate_tokens(prompt),
            message_count=len(messages),
            tools=tuple(t["name"] for t in tools),
            max_tokens=limit,
            thinking=thinks,
            answer_schema=asked.answer_schema,
            forced_tool=asked.forced_tool,
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A `message` object with thinking, text and tool_use blocks."""
        content: list[dict[str, Any]] = _thinking_blocks(reply)
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
        for index, whole in enumerate(_thinking_blocks(reply)):
            out.extend(_streamed_thinking(index, whole))
        if _has_text_block(reply):
            block = {"type": "text", "text": ""}
            start_at = {"index": _base(reply), "content_block": block}
            out.append(_event("content_block_start", start_at))
        out.append(_event("ping", {}))
        return out

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """text_delta per token; the tool_use block's start, then input_json_delta fragments."""
        base = _base(reply)
        out = [
            _event(
                "content_block_delta", {"index": base, "delta": {"type": "text_delta", "text": t}}
            )
            for t in reply.tokens
        ]
        if reply.tool is not None:
            index = base + (1 if _has_text_block(reply) else 0)
            block = {
                "type": "tool_use",
                "id": f"toolu_sim{reply.tool.id}",
                "name": reply.tool.name,
                "input": {},
            }
            start = _event("content_block_start", {"index": index, "content_block": block})
            if index > base:
                start = _event("content_block_stop", {"index": base}) + start
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
        last = _base(reply) + (1 if reply.tool is not None and _has_text_block(reply) else 0)
        delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
        usage = {"output_tokens": reply.output_tokens}
        return [
            _event("content_block_stop", {"index": last}),
            _event("message_delta", {"delta": delta, "usage": usage}),
            _event("message_stop", {}),
        ]

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """`event: error` with an overloaded_error by default."""
        return sse(payload if payload is not None else _STREAM_ERROR, event="error")

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


def _base(reply: CannedReply) -> int:
    """The index of the first block after the thinking blocks."""
    return len(_thinking_blocks(reply))


def _thinking_blocks(reply: CannedReply) -> list[dict[str, Any]]:
    if not reply.thinking:
        return []
    thought = reply.thought
    blocks = [{"type": "thinking", "thinking": thought, "signature": sign("thinking", thought)}]
    if reply.redacted_thinking:
        blocks.append({"type": "redacted_thinking", "data": sign("redacted", reply.model)})
    return blocks


def _streamed_thinking(index: int, whole: dict[str, Any]) -> list[bytes]:
    """A thinking block as the API streams it: empty start, thinking, then signature."""
    if whole["type"] == "redacted_thinking":
        start = _event("content_block_start", {"index": index, "content_block": whole})
        return [start, _event("content_block_stop", {"index": index})]
    empty = {"type": "thinking", "thinking": "", "signature": ""}
    deltas = (
        {"type": "thinking_delta", "thinking": whole["thinking"]},
        {"type": "signature_delta", "signature": whole["signature"]},
    )
    return [
        _event("content_block_start", {"index": index, "content_block": empty}),
        *(_event("content_block_delta", {"index": index, "delta": d}) for d in deltas),
        _event("content_block_stop", {"index": index}),
    ]


def _check_thinking(messages: list[Any], model: str, *, thinking: bool) -> None:
    """Refuse changed (or foreign) thinking blocks, and with thinking on a last assistant
    turn of a tool loop that does not start with its thinking."""
    last = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        last = i
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking" and block.get("signature") != sign(
                "thinking", block.get("thinking")
            ):
                raise BadRequest(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
            if kind == "redacted_thinking" and block.get("data") != sign("redacted", model):
                raise BadRequest(
                    f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                )
    if not thinking or last is None or not _uses_tools(messages[last]):
        return
    content = messages[last].get("content")
    first = content[0] if isinstance(content, list) and content else {}
    found = first.get("type", "text") if isinstance(first, dict) else "text"
    if found not in _THINKING:
        raise BadRequest(_THINKING_FIRST.format(i=last, found=found))


def _uses_tools(message: dict[str, Any]) -> bool:
    content = message.get("content")
    blocks = content if isinstance(content, list) else ()
    return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)


def _stop_reason(reply: CannedReply) -> str:
    if reply.filtered:
        return "refusal"
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
