"""Gemini generateContent / streamGenerateContent as the simulator speaks it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    require,
    sse,
)

__all__ = ["GeminiDialect"]

# status -> error.status; other 4xx are INVALID_ARGUMENT, other 5xx INTERNAL.
_ERRORS: dict[int, str] = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_STREAM_ERROR = {
    "error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
}


class GeminiDialect:
    """`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`."""

    api = "gemini"
    # Google's SSE frames end with CRLF pairs; clients must not assume bare LF.
    separator = b"\r\n\r\n"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read contents, systemInstruction, functionDeclarations and maxOutputTokens."""
        contents = require(body, "contents", list)
        names: list[str] = []
        for tool in body.get("tools") or []:
            declarations = tool.get("functionDeclarations", []) if isinstance(tool, dict) else None
            if not isinstance(declarations, list):
                raise BadRequest("tools[].functionDeclarations: must be an array")
            for declaration in declarations:
                if not isinstance(declaration, dict) or not isinstance(
                    declaration.get("name"), str
                ):
                    raise BadRequest("tools[].functionDeclarations[].name: field required")
                names.append(declaration["name"])
        config = body.get("generationConfig") or {}
        limit = config.get("maxOutputTokens") if isinstance(config, dict) else None
        prompt = json.dumps([body.get("systemInstruction"), contents])
        return Inspection(
            model=None,
            stream=False,
            input_tokens=estimate_tokens(prompt),
            message_count=len(contents),
            tools=tuple(names),
            max_tokens=limit if isinstance(limit, int) else None,
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A GenerateContentResponse with text and functionCall parts."""
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.tokens else []
        if reply.tool is not None:
            parts.append(_function_call(reply))
        if not parts:
            parts.append({"text": ""})
        return self._response(reply, parts, finish=True)

    def preamble(self, reply: CannedReply) -> list[bytes]:
        """Gemini sends nothing before the first content chunk."""
        return []

    def pieces(self, reply: CannedReply) -> list[bytes]:
        """One chunk per token; a function call arrives whole in one chunk."""
        out = [self._chunk(self._response(reply, [{"text": t}])) for t in reply.tokens]
        if reply.tool is not None:
            out.append(self._chunk(self._response(reply, [_function_call(reply)])))
        return out

    def ending(self, reply: CannedReply) -> list[bytes]:
        """A last chunk with finishReason and the whole usageMetadata; no end marker."""
        return [self._chunk(self._response(reply, [{"text": ""}], finish=True))]

    def stream_error(self, payload: Mapping[str, Any] | None) -> bytes:
        """`data: {"error": {"code", "message", "status"}}`."""
        return self._chunk(dict(payload) if payload is not None else _STREAM_ERROR)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """`{"error": {"code", "message", "status"}}`."""
        default = "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        return {
            "error": {"code": status, "message": message, "status": _ERRORS.get(status, default)}
        }

    def _chunk(self, data: dict[str, Any]) -> bytes:
        return sse(data, separator=self.separator)

    def _response(
        self, reply: CannedReply, parts: list[dict[str, Any]], *, finish: bool = False
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = "MAX_TOKENS" if reply.truncated else "STOP"
        return {
            "candidates": [candidate],
            "usageMetadata": _usage(reply, finish=finish),
            "modelVersion": reply.model,
            "responseId": f"sim{reply.seq:08d}",
        }


def _usage(reply: CannedReply, *, finish: bool) -> dict[str, int]:
    """usageMetadata: the candidates' count on the last chunk only; thinking comes first."""
    # promptTokenCount includes the cached content, and a generation writes no cache (the
    # reply's cache writes are plain prompt tokens here); thoughts are beside the candidates.
    thoughts = reply.reasoning_tokens
    usage = {"promptTokenCount": reply.prompt_tokens}
    total = reply.prompt_tokens + thoughts
    if finish:
        usage["candidatesTokenCount"] = reply.content_tokens
        total += reply.content_tokens
    usage["totalTokenCount"] = total
    if reply.cache_read_tokens:
        usage["cachedContentTokenCount"] = reply.cache_read_tokens
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def _function_call(reply: CannedReply) -> dict[str, Any]:
    assert reply.tool is not None
    return {"functionCall": {"name": reply.tool.name, "args": dict(reply.tool.arguments)}}
