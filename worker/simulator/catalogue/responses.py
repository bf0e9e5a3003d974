"""OpenAI Responses API (and Azure OpenAI's) error responses.

An HTTP error has Chat Completions' envelope, `{"error": {"message", "type", "param",
"code"}}`, so the `openai` entries apply as they are; these are the Responses API's own.
Sources: "Your input exceeds the context window of this model. Please adjust your input
and try again." with code `context_length_exceeded` and param `input` (quoted in
the-open-agent/openagent#2344 and james-6-23/codex2api#415); `invalid_encrypted_content`,
"The encrypted content gAAA...DQ== could not be verified." (openai/codex#8145 and its
siblings); the stored-item refusal for a reasoning item sent back without its encrypted
content while `store` is false; "Invalid prompt: ... flagged as potentially violating our
usage policy" (`invalid_prompt`). Mid-stream, the API reference's two shapes: an `error`
event (`type`, `code`, `message`, `param`, `sequence_number`), and `response.failed`,
whose `response.error` carries a `ResponseError` code (`server_error`,
`rate_limit_exceeded`, `invalid_prompt`, … as the openai-openapi spec lists them;
`context_length_exceeded` and `insufficient_quota` as Codex handles them).
"""

from __future__ import annotations

from typing import Any

from worker.simulator.catalogue import openai
from worker.simulator.catalogue.shapes import JSON, CannedError, StreamPayload

__all__ = ["ERRORS", "STREAM"]

_OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
_RATE = (
    "Rate limit reached for gpt-5 in organization org-4cQ8nVt2LmZr7KxPj1YwHs3d on tokens "
    "per min (TPM): Limit 30000, Used 29400, Requested 1350. Please try again in 1.5s."
)
_SERVER = (
    "The server had an error processing your request. Sorry about that! You can retry your "
    "request, or contact us through our help center if you keep seeing this error."
)
_FLAGGED = "Invalid prompt: your prompt was flagged as potentially violating our usage policy."


def _error(status: int, message: str, code: str | None, param: str | None = None) -> CannedError:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return CannedError(status, {"error": error}, dict(JSON))


ERRORS: dict[str, CannedError] = {
    **openai.ERRORS,
    "context_length_exceeded": _error(400, _OVERFLOW, "context_length_exceeded", "input"),
    "invalid_encrypted_content": _error(
        400, "The encrypted content gAAA...DQ== could not be verified.", "invalid_encrypted_content"
    ),
    "reasoning_item_not_stored": _error(
        404,
        "Item with id 'rs_68a1f0c2' not found. Items are not persisted when `store` is set to "
        "false. Try again with `store` set to true, or remove this item from your input.",
        None,
        "input",
    ),
    "invalid_prompt": _error(400, _FLAGGED, "invalid_prompt"),
}


def _failed(code: str, message: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": "resp_68a1f0c2",
        "object": "response",
        "status": "failed",
        "error": {"code": code, "message": message},
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }
    return {"type": "response.failed", "sequence_number": 3, "response": response}


def _event(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, "param": param, "sequence_number": 3}


STREAM: dict[str, StreamPayload] = {
    "error_server_error": _event("server_error", _SERVER),
    "error_rate_limit_exceeded": _event("rate_limit_exceeded", _RATE),
    "error_context_length_exceeded": _event("context_length_exceeded", _OVERFLOW, "input"),
    "failed_server_error": _failed("server_error", _SERVER),
    "failed_rate_limit_exceeded": _failed("rate_limit_exceeded", _RATE),
    "failed_context_length_exceeded": _failed("context_length_exceeded", _OVERFLOW),
    "failed_insufficient_quota": _failed(
        "insufficient_quota", "You exceeded your current quota, please check your plan."
    ),
    "failed_invalid_prompt": _failed("invalid_prompt", _FLAGGED),
}
