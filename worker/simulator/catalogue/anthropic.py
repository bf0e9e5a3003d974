"""Anthropic (Claude API) error responses.

Sources: the Claude API "Errors" page (error shape with `request_id`; 400, 401, 403, 404,
413, 429, 500, 529 and their `error.type`), the "Rate limits" and spend-limit pages (429
with `retry-after`; 429 with `details.error_code = enforced_spend_limit_reached`; 400
"specified [workspace] API usage limits"), the SDKs' `BillingError` (402 billing_error),
`timeout_error` (504), and issue threads for the credit-balance and "prompt is too long"
messages. Mid-stream: the "Streaming Messages" page's `event: error` with the same `error`
object. "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, ..."
is quoted in docker/docker-agent and anthropics/claude-code issues; the
`anthropic-ratelimit-*-reset` headers (RFC 3339) are the "Rate limits" page's; 404
`not_found_error` with "model: <id>" is the API's answer for a retired model.
"""

from __future__ import annotations

from typing import Any

from worker.simulator.catalogue.shapes import (
    JSON,
    CannedError,
    StreamPayload,
    header_args,
)

__all__ = ["ERRORS", "STREAM"]

_REQUEST_ID = "req_011CSHoEeqs5C35K2UUqR7Fy"


def _anthropic(
    status: int, type_: str, message: str, details: dict[str, str] | None = None, **hdr: str
) -> CannedError:
    error: dict[str, Any] = {"type": type_, "message": message}
    if details is not None:
        error["details"] = details
    body = {"type": "error", "error": error, "request_id": _REQUEST_ID}
    headers = {**JSON, "request-id": _REQUEST_ID, **header_args(hdr)}
    return CannedError(status, body, headers)


ERRORS: dict[str, CannedError] = {
    "api_error": _anthropic(500, "api_error", "Internal server error"),
    "overloaded_error": _anthropic(529, "overloaded_error", "Overloaded", x_should_retry="true"),
    "rate_limit_error": _anthropic(
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your per-minute rate limit "
        "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for "
        "current usage. Please reduce the prompt length or the maximum tokens requested, "
        "or try again later.",
        retry_after="15",
        anthropic_ratelimit_input_tokens_remaining="0",
    ),
    "authentication_error": _anthropic(401, "authentication_error", "invalid x-api-key"),
    "permission_error": _anthropic(
        403,
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    "not_found_error": _anthropic(404, "not_found_error", "model: claude-nonexistent-9"),
    "request_too_large": _anthropic(
        413, "request_too_large", "Request exceeds the maximum allowed number of bytes."
    ),
    "invalid_request_error": _anthropic(
        400,
        "invalid_request_error",
        'messages: roles must alternate between "user" and "assistant", but found '
        'multiple "user" roles in a row',
    ),
    "prompt_too_long": _anthropic(
        400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
    ),
    "context_limit_with_max_tokens": _anthropic(
        400,
        "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ),
    "rate_limit_reset_headers": _anthropic(
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 80,000 input "
        "tokens per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits.",
        anthropic_ratelimit_requests_remaining="49",
        anthropic_ratelimit_requests_reset="2030-01-01T00:00:00Z",
        anthropic_ratelimit_input_tokens_remaining="0",
        anthropic_ratelimit_input_tokens_reset="2030-01-01T00:00:00Z",
    ),
    "spend_limit": _anthropic(
        400,
        "invalid_request_error",
        "You have reached your specified API usage limits. You will regain access on "
        "2025-06-01 at 00:00 UTC.",
    ),
    "workspace_spend_limit": _anthropic(
        400,
        "invalid_request_error",
        "You have reached your specified workspace API usage limits. You will regain "
        "access on 2025-06-01 at 00:00 UTC.",
    ),
    "credit_balance_too_low": _anthropic(
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
        "Billing to upgrade or purchase credits.",
    ),
    "enforced_spend_limit": _anthropic(
        429,
        "rate_limit_error",
        "Your organization has reached its monthly usage limit for its tier.",
        {"error_code": "enforced_spend_limit_reached"},
    ),
    "billing_error": _anthropic(
        402, "billing_error", "Usage is blocked due to insufficient credits."
    ),
    "timeout_error": _anthropic(504, "timeout_error", "Request timed out"),
}

STREAM: dict[str, StreamPayload] = {
    "overloaded_error": {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    },
    "api_error": {"type": "error", "error": {"type": "api_error", "message": "Internal error"}},
}
