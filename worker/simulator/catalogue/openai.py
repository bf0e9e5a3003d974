"""OpenAI (and Azure OpenAI, vLLM) error responses.

Sources: the API reference "Error codes" guide (401 invalid_api_key, 403 unsupported
region, 429 rate_limit_exceeded / insufficient_quota, 500, 503 overloaded), the "Spend
limits" guide (429 with organization/project spend-limit codes under the
`insufficient_quota` type), and bodies quoted verbatim in public issue threads
(context_length_exceeded, model_not_found, billing_hard_limit_reached). Body:
`{"error": {"message", "type", "param", "code"}}`. Mid-stream, Chat Completions sends one
`data:` line carrying the same `error` object and no `choices`. Rate-limit hints beside
Retry-After: the "Rate limits" guide's `x-ratelimit-reset-requests` / `-tokens` headers
(Go durations such as "1s", "6m0s") and "Please try again in 644ms" in messages quoted in
openai/openai-python issues. "Your input exceeds the context window of this model" is the
Responses API's overflow (openai/codex issues).

Azure OpenAI: `{"error": {"code": "DeploymentNotFound", ...}}` with 404 as quoted in
MicrosoftDocs/azure-docs and Azure-Samples issues; its 400 `content_filter` for a filtered
prompt from the "Content filtering" page. vLLM's OpenAI-compatible server puts the fields
at the top level (`"object": "error"`, its own message for an overflow).
"""

from __future__ import annotations

from worker.simulator.catalogue.shapes import (
    JSON,
    CannedError,
    StreamPayload,
    header_args,
)

__all__ = ["ERRORS", "STREAM"]

_OAI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)
_OVERLOADED = "Our servers are currently overloaded. Please try again later."
_OAI_500 = "The server had an error while processing your request. Sorry about that!"

# The organization id every OpenAI rate-limit message names (a made-up one).
_OAI_ORG = "org-4cQ8nVt2LmZr7KxPj1YwHs3d"


def _openai(
    status: int, message: str, type_: str, code: str | None, param: str | None = None, **hdr: str
) -> CannedError:
    error = {"message": message, "type": type_, "param": param, "code": code}
    return CannedError(status, {"error": error}, {**JSON, **header_args(hdr)})


ERRORS: dict[str, CannedError] = {
    "rate_limit_exceeded": _openai(
        429,
        f"Rate limit reached for gpt-4o in organization {_OAI_ORG} on requests per min (RPM): "
        "Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        "requests",
        "rate_limit_exceeded",
        retry_after="1",
        x_ratelimit_limit_requests="500",
        x_ratelimit_remaining_requests="0",
        x_ratelimit_reset_requests="120ms",
    ),
    "rate_limit_reset_headers": _openai(
        429,
        f"Rate limit reached for gpt-4o-mini in organization {_OAI_ORG} on tokens per min "
        "(TPM): Limit 200000, Used 199813, Requested 1042.",
        "tokens",
        "rate_limit_exceeded",
        x_ratelimit_limit_requests="5000",
        x_ratelimit_remaining_requests="4999",
        x_ratelimit_reset_requests="12ms",
        x_ratelimit_limit_tokens="200000",
        x_ratelimit_remaining_tokens="0",
        x_ratelimit_reset_tokens="644ms",
    ),
    "rate_limit_try_again": _openai(
        429,
        f"Rate limit reached for gpt-4o in organization {_OAI_ORG} on tokens per min (TPM): "
        "Limit 30000, Used 29400, Requested 1350. Please try again in 1.5s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        "tokens",
        "rate_limit_exceeded",
    ),
    "insufficient_quota": _openai(429, _OAI_QUOTA, "insufficient_quota", "insufficient_quota"),
    "credit_balance_exhausted": _openai(
        429, _OAI_QUOTA, "insufficient_quota", "credit_balance_exhausted"
    ),
    "project_spend_limit_exceeded": _openai(
        429, _OAI_QUOTA, "insufficient_quota", "project_spend_limit_exceeded"
    ),
    "billing_hard_limit_reached": _openai(
        400,
        "Billing hard limit has been reached",
        "invalid_request_error",
        "billing_hard_limit_reached",
    ),
    "server_error": _openai(500, _OAI_500, "server_error", None),
    "server_is_overloaded": _openai(
        503, _OVERLOADED, "service_unavailable_error", "server_is_overloaded"
    ),
    "engine_overloaded": _openai(
        503, "The engine is currently overloaded, please try again later", "server_error", None
    ),
    "invalid_api_key": _openai(
        401,
        "Incorrect API key provided: sk-proj-****abcd. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
        "invalid_api_key",
    ),
    "unsupported_region": _openai(
        403,
        "Country, region, or territory not supported",
        "request_forbidden",
        "unsupported_country_region_territory",
    ),
    "model_not_found": _openai(
        404,
        "The model `gpt-9` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    ),
    "deployment_not_found": CannedError(
        404,
        {
            "error": {
                "code": "DeploymentNotFound",
                "message": "The API deployment for this resource does not exist. If you "
                "created the deployment within the last 5 minutes, please wait a moment "
                "and try again.",
            }
        },
        dict(JSON),
    ),
    "azure_prompt_filtered": _openai(
        400,
        "The response was filtered due to the prompt triggering Azure OpenAI's content "
        "management policy. Please modify your prompt and retry.",
        "invalid_request_error",
        "content_filter",
        "prompt",
    ),
    "context_window_exceeded": _openai(
        400,
        "Your input exceeds the context window of this model. Please adjust your input "
        "and try again.",
        "invalid_request_error",
        None,
        "input",
    ),
    "vllm_context_length": CannedError(
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 32768 tokens. However, you "
            "requested 33792 tokens (32768 in the messages, 1024 in the completion). "
            "Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        dict(JSON),
    ),
    "context_length_exceeded": _openai(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130563 tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
    "invalid_request_error": _openai(
        400, "'messages' is a required property", "invalid_request_error", None
    ),
}

STREAM: dict[str, StreamPayload] = {
    "server_error": {
        "error": {"message": _OAI_500, "type": "server_error", "param": None, "code": None}
    },
    "server_is_overloaded": {
        "error": {
            "message": _OVERLOADED,
            "type": "service_unavailable_error",
            "param": None,
            "code": "server_is_overloaded",
        }
    },
}
