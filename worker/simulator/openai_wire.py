"""OpenAI Chat Completions as the simulator speaks it (also Azure OpenAI, vLLM, Ollama)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.faults import StreamPayload
from worker.simulator.openai_request import check_request, forced_tool
from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    fragments,
    require,
    sse,
)

__all__ = ["OpenAIDialect"]

# status -> (error.type, error.code); other 4xx are invalid_request_error, other 5xx server_error.
_ERRORS: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    503: ("server_error", "server_is_overloaded"),
}

_STREAM_ERROR = {
    "error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}


class OpenAIDialect:
    """`POST /v1/chat/completions`; with `azure=True` the deployment route (model not in body)."""

    separator = b"\n\n"

    def __init__(self, *, azure: bool = False) -> None:
        self.api = "azure" if azure else "openai"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read model, messages, tools, max tokens, stream options and the answer's schema;
        refuse what OpenAI refuses (`worker.simulator.openai_request`)."""
        model = body.get("model") if self.api == "azure" else require(body, "model", str)
        messages = require(body, "messages", list)
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise BadRequest("tools: must be an array")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        options = body.get("stream_options") or {}
        names = tuple(_tool_name(t) for t in tools)
        model = model if isinstance(model, str) else None
        return Inspection(
            model=model,
            stream=body.get("stream") is True,
            input_tokens=estimate_tokens(json.dumps(messages)),
            message_count=len(messages),
            tools=names,
            max_tokens=limit if isinstance(limit, int) else None,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            answer_schema=check_request(body, model, names),
            forced_tool=forced_tool(body),
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A `chat.completion` object."""
        answered = reply.refusal is None and (reply.tokens or reply.tool is None)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text if answered else None,
            "refusal": reply.refusal,
        }
        if reply.tool is not None:
            message["tool_calls"] = [
                {
                    "id": f"call_{reply.tool.id}",
                    "type": "function",
                    "function": {"name": reply.tool.name, "arguments": reply.tool.arguments_json},
                }
            ]
        return {
            "id": _id(reply),
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish_reason(reply),
                }
            ],
            "usage": _usage(reply),
            "system_fingerprint": "fp_simulated",
        }

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """The role chunk (its content is empty: not content yet)."""
        answered = reply.refusal is None and (reply.tokens or reply.tool is None)
        content = "" if answered else None
        return [self._chunk(reply, {"role": "assistant", "content": content, "refusal": None})]

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """`delta.content` per token, then `delta.tool_calls` name and argument fragments;
        a refusal's words as `delta.refusal` fragments."""
        out = [self._chunk(reply, {"content": token}) for token in reply.tokens]
        if reply.refusal is not None:
            out += [self._chunk(reply, {"refusal": part}) for part in fragments(reply.refusal)]
        if reply.tool is not None:
            start = {
                "index": 0,
                "id": f"call_{reply.tool.id}",
                "type": "function",
                "function": {"name": reply.tool.name, "arguments": ""},
            }
            out.append(self._chunk(reply, {"tool_calls": [start]}))
            for part in fragments(reply.tool.arguments_json):
                more = {"index": 0, "function": {"arguments": part}}
                out.append(self._chunk(reply, {"tool_calls": [more]}))
        return out

    def ending(self, reply: CannedReply) -> list[bytes]:
        """The finish chunk, the usage chunk when asked for, then `[DONE]`."""
        out = [self._chunk(reply, {}, finish_reason=_finish_reason(reply))]
        if reply.include_usage:
            out.append(sse({**self._base(reply), "choices": [], "usage": _usage(reply)}))
        out.append(sse("[DONE]"))
        return out

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """`data: {"error": {...}}`."""
        return sse(payload if payload is not None else _STREAM_ERROR)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """`{"error": {"message", "type", "param", "code"}}`."""
        default = ("server_error", None) if status >= 500 else ("invalid_request_error", None)
        kind, code = _ERRORS.get(status, default)
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def _base(self, reply: CannedReply) -> dict[str, Any]:
        base: dict[str, Any] = {
            "id": _id(reply),
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": reply.model,
            "system_fingerprint": "fp_simulated",
        }
        if reply.include_usage:
            base["usage"] = None
        return base

    def _chunk(
        self, reply: CannedReply, delta: dict[str, Any], finish_reason: str | None = None
    ) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return sse({**self._base(reply), "choices": [choice]})


def _id(reply: CannedReply) -> str:
    return f"chatcmpl-sim{reply.seq:08d}"


def _finish_reason(reply: CannedReply) -> str:
    if reply.filtered:
        return "content_filter"
    if reply.tool is not None:
        return "tool_calls"
    return "length" if reply.truncated else "stop"


def _usage(reply: CannedReply) -> dict[str, Any]:
    # prompt_tokens includes the cached tokens, completion_tokens the reasoning ones.
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.total_tokens,
    }
    # The details only when they say something, so plain replies keep their short shape.
    if reply.cache_read_tokens or reply.cache_write_tokens:
        prompt = {"cached_tokens": reply.cache_read_tokens, "audio_tokens": 0}
        if reply.cache_write_tokens:
            prompt["cache_write_tokens"] = reply.cache_write_tokens
        usage["prompt_tokens_details"] = prompt
    if reply.reasoning_tokens:
        usage["completion_tokens_details"] = {
            "reasoning_tokens": reply.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        }
    return usage


def _tool_name(tool: Any) -> str:
    try:
        name = tool["function"]["name"]
    except (TypeError, KeyError) as exc:
        raise BadRequest("tools[].function.name: field required") from exc
    if not isinstance(name, str):
        raise BadRequest("tools[].function.name: must be a string")
    return name
