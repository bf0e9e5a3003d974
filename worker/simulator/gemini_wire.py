"""Gemini generateContent / streamGenerateContent as the simulator speaks it.

As Gemini 3 does, every function call is signed (`thoughtSignature` on the first
functionCall part of a reply, and on the last text part of a reply without calls), and
a request whose current turn sends a model's function call back without its signature,
or with one the simulator did not write, is refused with 400 INVALID_ARGUMENT. Google's
documented stand-ins for calls Gemini did not write are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.simulator.faults import StreamPayload
from worker.simulator.gemini_request import check_body
from worker.simulator.wire import (
    BadRequest,
    CannedReply,
    Inspection,
    estimate_tokens,
    require,
    sign,
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

# "Thought signatures" (Gemini API docs): what a call Gemini did not write may carry.
_STAND_INS = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})
_MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {at}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
_SAFETY = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]

_STREAM_ERROR = {
    "error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
}


class GeminiDialect:
    """`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`.

    The model is in the URL: `for_model` is the dialect one request speaks, refusing
    what that model refuses (`worker.simulator.gemini_request`).
    """

    api = "gemini"
    # Google's SSE frames end with CRLF pairs; clients must not assume bare LF.
    separator = b"\r\n\r\n"
    vertex = False

    def __init__(self, model: str = "") -> None:
        self.model = model

    def for_model(self, model: str) -> GeminiDialect:
        """This dialect for a request to `model`."""
        return type(self)(model)

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """Read contents, systemInstruction, functionDeclarations, maxOutputTokens and the
        response schema; refuse what the API refuses."""
        contents = require(body, "contents", list)
        check_body(body, model=self.model, vertex=self.vertex)
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
        _check_signatures(contents)
        config = body.get("generationConfig") or {}
        limit = config.get("maxOutputTokens") if isinstance(config, dict) else None
        prompt = json.dumps([body.get("systemInstruction"), contents])
        answer = None
        if isinstance(config, dict) and config.get("responseMimeType") == "application/json":
            answer = config.get("responseJsonSchema") or {"type": "object"}
        return Inspection(
            model=None,
            stream=False,
            input_tokens=estimate_tokens(prompt),
            message_count=len(contents),
            tools=tuple(names),
            max_tokens=limit if isinstance(limit, int) else None,
            answer_schema=answer,
        )

    def reply_body(self, reply: CannedReply) -> dict[str, Any]:
        """A GenerateContentResponse with text and functionCall parts."""
        if reply.filtered and not reply.tokens:
            return self._blocked(reply)
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.tokens else []
        if reply.tool is not None:
            parts.append(_function_call(reply))
        elif not reply.filtered:
            if not parts:
                parts.append({"text": ""})
            parts[-1]["thoughtSignature"] = _text_signature(reply)
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
        if reply.filtered and not reply.tokens:
            return [self._chunk(self._blocked(reply))]
        last: dict[str, Any] = {"text": ""}
        if reply.tool is None and not reply.filtered:
            last["thoughtSignature"] = _text_signature(reply)
        return [self._chunk(self._response(reply, [] if reply.filtered else [last], finish=True))]

    def stream_error(self, payload: StreamPayload | None) -> bytes:
        """`data: {"error": {"code", "message", "status"}}`."""
        return self._chunk(payload if payload is not None else _STREAM_ERROR)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """`{"error": {"code", "message", "status"}}`."""
        default = "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"
        return {
            "error": {"code": status, "message": message, "status": _ERRORS.get(status, default)}
        }

    def _chunk(self, data: StreamPayload) -> bytes:
        return sse(data, separator=self.separator)

    def _blocked(self, reply: CannedReply) -> dict[str, Any]:
        """The prompt itself was blocked: promptFeedback and no candidates."""
        feedback = {"blockReason": "SAFETY", "safetyRatings": _SAFETY}
        return {
            "promptFeedback": feedback,
            "usageMetadata": _usage(reply, finish=True),
            "modelVersion": reply.model,
        }

    def _response(
        self, reply: CannedReply, parts: list[dict[str, Any]], *, finish: bool = False
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish and reply.filtered:
            # Stopped by the safety filter: what was written so far, then the reason.
            candidate.update(finishReason="SAFETY", safetyRatings=_SAFETY)
            if not parts:
                del candidate["content"]
        elif finish:
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
    call = {"name": reply.tool.name, "args": dict(reply.tool.arguments)}
    return {"functionCall": call, "thoughtSignature": _call_signature(call)}


def _call_signature(call: Mapping[str, Any]) -> str:
    return sign("call", call.get("name"), call.get("args") or {})


def _text_signature(reply: CannedReply) -> str:
    return sign("text", reply.model, reply.text)


def _check_signatures(contents: list[Any]) -> None:
    """The current turn (after the last user text) must send each model step's first
    function call back with the signature it came with."""
    start = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        if any(isinstance(p, dict) and "text" in p for p in content.get("parts") or ()):
            start = i + 1
    for i, content in enumerate(contents[start:], start):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        calls = [
            p for p in content.get("parts") or () if isinstance(p, dict) and "functionCall" in p
        ]
        for at, part in enumerate(calls):
            signature = part.get("thoughtSignature")
            call = part["functionCall"] if isinstance(part["functionCall"], dict) else {}
            if signature is None and at == 0:
                raise BadRequest(_MISSING.format(name=call.get("name"), at=i + 1))
            valid = signature is None or signature in _STAND_INS
            if not valid and signature != _call_signature(call):
                raise BadRequest("Corrupted thought signature.")
