"""Canned provider errors with the providers' real statuses, body shapes and headers.

The simulated providers answer with these, and the policy tests classify them, so
both sides agree on what a provider really sends. Where each shape comes from:

- OpenAI: API reference "Error codes" guide (401 invalid_api_key, 403 unsupported
  region, 429 rate_limit_exceeded / insufficient_quota, 500, 503 overloaded), the
  "Spend limits" guide (429 with organization/project spend-limit codes under the
  `insufficient_quota` type), and bodies quoted verbatim in public issue threads
  (context_length_exceeded, model_not_found, billing_hard_limit_reached). Body:
  `{"error": {"message", "type", "param", "code"}}`. Mid-stream, Chat Completions
  sends one `data:` line carrying the same `error` object and no `choices`. Rate-limit
  hints beside Retry-After: the "Rate limits" guide's `x-ratelimit-reset-requests` /
  `-tokens` headers (Go durations such as "1s", "6m0s") and "Please try again in
  644ms" in messages quoted in openai/openai-python issues. "Your input exceeds the
  context window of this model" is the Responses API's overflow (openai/codex issues).
  Azure OpenAI: `{"error": {"code": "DeploymentNotFound", ...}}` with 404 as quoted
  in MicrosoftDocs/azure-docs and Azure-Samples issues; its 400 `content_filter` for
  a filtered prompt from the "Content filtering" page. vLLM's OpenAI-compatible
  server puts the fields at the top level (`"object": "error"`, its own message for an
  overflow).
- Anthropic: Claude API "Errors" page (error shape with `request_id`; 400, 401,
  403, 404, 413, 429, 500, 529 and their `error.type`), the "Rate limits" and
  spend-limit pages (429 with `retry-after`; 429 with `details.error_code =
  enforced_spend_limit_reached`; 400 "specified [workspace] API usage limits"),
  the SDKs' `BillingError` (402 billing_error), `timeout_error` (504), and issue
  threads for the credit-balance and "prompt is too long" messages. Mid-stream:
  the "Streaming Messages" page's `event: error` with the same `error` object.
  "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, ..."
  is quoted in docker/docker-agent and anthropics/claude-code issues; the
  `anthropic-ratelimit-*-reset` headers (RFC 3339) are the "Rate limits" page's; 404
  `not_found_error` with "model: <id>" is the API's answer for a retired model.
- Gemini: Gemini API "Troubleshooting" page (HTTP code / status table:
  INVALID_ARGUMENT, FAILED_PRECONDITION, PERMISSION_DENIED, NOT_FOUND,
  RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED), the invalid key
  body with `google.rpc.ErrorInfo` reason API_KEY_INVALID, and 429 bodies with
  `google.rpc.QuotaFailure` and `google.rpc.RetryInfo` (`retryDelay`) quoted in
  google-gemini/gemini-cli issues. Body: `{"error": {"code", "message", "status",
  "details"}}`; mid-stream (`alt=sse`) the same object arrives as a `data:` line.
- Vertex AI: the "API errors" page of Vertex's generative AI docs (400 INVALID_ARGUMENT /
  FAILED_PRECONDITION, 403, 404, 429 RESOURCE_EXHAUSTED, 500, 503, 504) and bodies quoted
  in public issues: 429 "Resource exhausted ... error-code-429" (google-gemini/gemini-cli
  #14811), Claude's per-base-model quotas "Quota exceeded for aiplatform.googleapis.com/
  online_prediction_requests_per_base_model" (cline/cline #651) and "..._input_tokens_
  per_minute_per_base_model" (anthropics/claude-code #1440), 404 "Publisher Model ... was
  not found or your project does not have access to it" (genkit-ai/genkit #4688), 400
  FAILED_PRECONDITION "Project ... is not allowed to use Publisher Model" (yym68686/uni-api
  #41), 403 IAM_PERMISSION_DENIED on aiplatform.endpoints.predict (rpurinton/gemini-php #4),
  401 UNAUTHENTICATED with ACCESS_TOKEN_EXPIRED (googleapis/python-api-core #384) or
  CREDENTIALS_MISSING (a2aproject/a2a-samples #43), the context-window wordings "input
  token count exceeds the maximum number of tokens allowed" (warpdotdev/warp #15662) and
  "input token count is N but model only supports up to M" (gemini-cli #19727), and
  Claude's own Anthropic-shaped overloaded_error with `details: null` as Vertex relays it
  (langgenius/dify #7122). Vertex often wraps the Status in a one-element list, as quoted.
- Bedrock: botocore's bedrock-runtime service model (each exception's status and
  documentation) and the "Troubleshooting Amazon Bedrock API Error Codes" page; the
  `x-amzn-ErrorType` header and throttling body quoted in
  aws-samples/amazon-bedrock-client-for-mac#99; "Too many tokens per day" in
  minorun365/agent-book#29; "Bedrock is unable to process your request." in
  darko-mesaros/bedrust#47; "Input is too long for requested model." (a mid-stream
  validationException) in aws-samples/bedrock-chat#95; "The model returned the following
  errors: prompt is too long" in aaif-goose/goose#7442; end-of-life and legacy-model
  ResourceNotFoundExceptions in langchain-ai/langchain-aws#1245 and awslabs/llmeter#35;
  UnrecognizedClientException in vercel/ai#4163; an empty message's ValidationException
  in anthropics/claude-code#13709; AccessDeniedException in andrewyng/aisuite#174; "The
  provided model identifier is invalid." in strands-agents/harness-sdk#38. Body:
  `{"message"}`, the exception's name in the header; mid-stream, an event-stream message
  of type `exception` named by `:exception-type` (here `{"throttlingException": {...}}`).
  "details"}}`; mid-stream (`alt=sse`) the same object arrives as a `data:` line. A
  per-day quota: the `QuotaFailure` with quotaId
  `GenerateRequestsPerDayPerProjectPerModel-FreeTier` (and a RetryInfo of seconds)
  quoted in googleapis/python-genai issue 2044; per-day quotas reset at midnight
  Pacific time (Gemini API "Rate limits" page).
- Proxies: an HTML 502 page as Cloudflare/nginx serve it, and an empty 503.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from worker.simulator.bedrock_wire import exception_event

__all__ = [
    "NAMES",
    "STREAM_NAMES",
    "CannedError",
    "Kind",
    "canned",
    "canned_stream",
    "stream_frame",
]

Kind = Literal["openai", "anthropic", "gemini", "vertex", "bedrock"]
KINDS: tuple[Kind, ...] = get_args(Kind)


@dataclass(frozen=True, slots=True)
class CannedError:
    """One provider error response: status, body and headers as sent on the wire."""

    status: int
    body: bytes | str | dict[str, Any] | list[Any]
    headers: dict[str, str] = field(default_factory=dict)

    def body_bytes(self) -> bytes:
        """The body as the server writes it (dicts as compact JSON)."""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body, separators=(",", ":")).encode()


_JSON = {"content-type": "application/json"}
_GOOGLE_JSON = {"content-type": "application/json; charset=UTF-8"}
_PROXY_502 = CannedError(
    502,
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n"
    "</body>\r\n</html>\r\n",
    {"content-type": "text/html", "server": "cloudflare"},
)
_EMPTY_503 = CannedError(503, b"", {"content-length": "0"})


def _openai(
    status: int, message: str, type_: str, code: str | None, param: str | None = None, **hdr: str
) -> CannedError:
    error = {"message": message, "type": type_, "param": param, "code": code}
    return CannedError(status, {"error": error}, {**_JSON, **_headers(hdr)})


def _anthropic(
    status: int, type_: str, message: str, details: dict[str, str] | None = None, **hdr: str
) -> CannedError:
    error: dict[str, Any] = {"type": type_, "message": message}
    if details is not None:
        error["details"] = details
    body = {"type": "error", "error": error, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    headers = {**_JSON, "request-id": "req_011CSHoEeqs5C35K2UUqR7Fy", **_headers(hdr)}
    return CannedError(status, body, headers)


def _gemini(status: int, grpc: str, message: str, *details: dict[str, Any]) -> CannedError:
    error: dict[str, Any] = {"code": status, "message": message, "status": grpc}
    if details:
        error["details"] = list(details)
    return CannedError(status, {"error": error}, dict(_GOOGLE_JSON))


def _listed(error: CannedError) -> CannedError:
    """`error` with its body in a one-element list, as Vertex AI often sends it."""
    return CannedError(error.status, [error.body], error.headers)


def _claude_on_vertex(status: int, type_: str, message: str) -> CannedError:
    body = {"type": "error", "error": {"details": None, "type": type_, "message": message}}
    return CannedError(status, body, dict(_JSON))


def _headers(kwargs: Mapping[str, str]) -> dict[str, str]:
    return {name.replace("_", "-"): value for name, value in kwargs.items()}


_RPC = "type.googleapis.com/google.rpc."


def _quota_failure(*quota_ids: str, value: str | None = None) -> dict[str, Any]:
    """A `google.rpc.QuotaFailure` detail naming the spent quotas of gemini-2.0-flash."""
    violations: list[dict[str, Any]] = []
    for quota_id in quota_ids:
        violation: dict[str, Any] = {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
        }
        if value is not None:
            violation["quotaValue"] = value
        violations.append(violation)
    return {"@type": _RPC + "QuotaFailure", "violations": violations}


_PER_MINUTE = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
_GEMINI_QUOTA = _quota_failure(_PER_MINUTE, value="15")
_GEMINI_DAILY = _quota_failure("GenerateRequestsPerDayPerProjectPerModel-FreeTier", _PER_MINUTE)
_GEMINI_QUOTA_MSG = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)
_GEMINI_HELP = {
    "@type": _RPC + "Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}
_GEMINI_KEY = {
    "@type": _RPC + "ErrorInfo",
    "reason": "API_KEY_INVALID",
    "domain": "googleapis.com",
    "metadata": {"service": "generativelanguage.googleapis.com"},
}
_KEY_MSG = "API key not valid. Please pass a valid API key."
_VERTEX_AUTH = (
    "Expected OAuth 2 access token, login cookie or other valid authentication credential. "
    "See https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_VERTEX_TOKEN_EXPIRED = {
    "@type": _RPC + "ErrorInfo",
    "reason": "ACCESS_TOKEN_EXPIRED",
    "domain": "googleapis.com",
    "metadata": {
        "service": "aiplatform.googleapis.com",
        "method": "google.cloud.aiplatform.v1.PredictionService.GenerateContent",
    },
}
_VERTEX_QUOTA = (
    "Quota exceeded for aiplatform.googleapis.com/{metric} with base model: {model}. Please "
    "submit a quota increase request. "
    "https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."
)
_MODEL_PATH = "projects/my-project/locations/us-east5/publishers"
_OAI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)
_OVERLOADED = "Our servers are currently overloaded. Please try again later."
_OAI_500 = "The server had an error while processing your request. Sorry about that!"

# The organization id every OpenAI rate-limit message names (a made-up one).
_OAI_ORG = "org-4cQ8nVt2LmZr7KxPj1YwHs3d"

_CATALOGUE: dict[Kind, dict[str, CannedError]] = {
    "openai": {
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
            dict(_JSON),
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
            dict(_JSON),
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
        "proxy_502_html": _PROXY_502,
        "empty_503": _EMPTY_503,
    },
    "anthropic": {
        "api_error": _anthropic(500, "api_error", "Internal server error"),
        "overloaded_error": _anthropic(
            529, "overloaded_error", "Overloaded", x_should_retry="true"
        ),
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
        "proxy_502_html": _PROXY_502,
        "empty_503": _EMPTY_503,
    },
    "gemini": {
        "resource_exhausted": _gemini(
            429,
            "RESOURCE_EXHAUSTED",
            _GEMINI_QUOTA_MSG,
            _GEMINI_QUOTA,
            _GEMINI_HELP,
            {"@type": _RPC + "RetryInfo", "retryDelay": "27s"},
        ),
        "daily_quota_exhausted": _gemini(
            429,
            "RESOURCE_EXHAUSTED",
            _GEMINI_QUOTA_MSG,
            _GEMINI_HELP,
            _GEMINI_DAILY,
            {"@type": _RPC + "RetryInfo", "retryDelay": "47s"},
        ),
        "quota_billing": _gemini(429, "RESOURCE_EXHAUSTED", _GEMINI_QUOTA_MSG),
        "resource_exhausted_bare": _gemini(
            429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
        ),
        "unavailable": _gemini(
            503, "UNAVAILABLE", "The model is overloaded. Please try again later."
        ),
        "internal": _gemini(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
        ),
        "invalid_argument": _gemini(
            400,
            "INVALID_ARGUMENT",
            "Invalid JSON payload received. Unknown name \"foo\" at 'generation_config': "
            "Cannot find field.",
        ),
        "api_key_invalid": _gemini(
            400,
            "INVALID_ARGUMENT",
            _KEY_MSG,
            _GEMINI_KEY,
            {"@type": _RPC + "LocalizedMessage", "locale": "en-US", "message": _KEY_MSG},
        ),
        "context_too_long": _gemini(
            400,
            "INVALID_ARGUMENT",
            "The input token count (1200293) exceeds the maximum number of tokens allowed "
            "(1048576).",
        ),
        "failed_precondition": _gemini(
            400,
            "FAILED_PRECONDITION",
            "Gemini API free tier is not available in your country. Please enable billing on "
            "your project in Google AI Studio.",
        ),
        "permission_denied": _gemini(
            403, "PERMISSION_DENIED", "The caller does not have permission"
        ),
        "not_found": _gemini(
            404,
            "NOT_FOUND",
            "models/gemini-9 is not found for API version v1beta, or is not supported for "
            "generateContent. Call ListModels to see the list of available models and their "
            "supported methods.",
        ),
        "deadline_exceeded": _gemini(
            504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
        ),
        "proxy_502_html": _PROXY_502,
        "empty_503": _EMPTY_503,
    },
    "vertex": {
        "resource_exhausted": _listed(
            _gemini(
                429,
                "RESOURCE_EXHAUSTED",
                "Resource exhausted. Please try again later. Please refer to "
                "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more "
                "details.",
            )
        ),
        "claude_request_quota": _listed(
            _gemini(
                429,
                "RESOURCE_EXHAUSTED",
                _VERTEX_QUOTA.format(
                    metric="online_prediction_requests_per_base_model",
                    model="anthropic-claude-3-5-sonnet-v2",
                ),
            )
        ),
        "claude_token_quota": _gemini(
            429,
            "RESOURCE_EXHAUSTED",
            _VERTEX_QUOTA.format(
                metric="online_prediction_input_tokens_per_minute_per_base_model",
                model="anthropic-claude-opus-4",
            ),
        ),
        "model_not_found": _gemini(
            404,
            "NOT_FOUND",
            f"Publisher Model `{_MODEL_PATH}/google/models/gemini-9` was not found or your "
            "project does not have access to it. Please ensure you are using a valid model "
            "version. For more information, see: "
            "https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions",
        ),
        "model_not_allowed": _listed(
            _gemini(
                400,
                "FAILED_PRECONDITION",
                "Project `my-project` is not allowed to use Publisher Model "
                f"`{_MODEL_PATH}/anthropic/models/claude-3-sonnet@20240229`",
            )
        ),
        "permission_denied": _gemini(
            403,
            "PERMISSION_DENIED",
            "Permission 'aiplatform.endpoints.predict' denied on resource "
            f"'//aiplatform.googleapis.com/{_MODEL_PATH}/google/models/gemini-2.5-pro' "
            "(or it may not exist).",
            {
                "@type": _RPC + "ErrorInfo",
                "reason": "IAM_PERMISSION_DENIED",
                "domain": "aiplatform.googleapis.com",
                "metadata": {"permission": "aiplatform.endpoints.predict"},
            },
        ),
        "access_token_expired": _gemini(
            401,
            "UNAUTHENTICATED",
            f"Request had invalid authentication credentials. {_VERTEX_AUTH}",
            _VERTEX_TOKEN_EXPIRED,
        ),
        "credentials_missing": _gemini(
            401,
            "UNAUTHENTICATED",
            f"Request is missing required authentication credential. {_VERTEX_AUTH}",
            {**_VERTEX_TOKEN_EXPIRED, "reason": "CREDENTIALS_MISSING"},
        ),
        "invalid_credentials": _gemini(
            401,
            "UNAUTHENTICATED",
            f"Request had invalid authentication credentials. {_VERTEX_AUTH}",
        ),
        "invalid_argument": _gemini(
            400, "INVALID_ARGUMENT", "Request contains an invalid argument."
        ),
        "context_too_long": _gemini(
            400,
            "INVALID_ARGUMENT",
            "The input token count exceeds the maximum number of tokens allowed 1048576.",
        ),
        "context_too_long_unable": _gemini(
            400,
            "INVALID_ARGUMENT",
            "Unable to submit request because the input token count is 1251952 but model only "
            "supports up to 1048576. Reduce the input token count and try again. You can also "
            "use the CountTokens API to calculate prompt token count and billable characters. "
            "Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/models",
        ),
        "internal": _gemini(500, "INTERNAL", "Internal error encountered."),
        "unavailable": _gemini(503, "UNAVAILABLE", "The service is currently unavailable."),
        "deadline_exceeded": _gemini(
            504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
        ),
        "claude_overloaded": _claude_on_vertex(529, "overloaded_error", "Overloaded"),
        "claude_prompt_too_long": _claude_on_vertex(
            400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
        ),
        "claude_invalid_request": _claude_on_vertex(
            400,
            "invalid_request_error",
            'messages: roles must alternate between "user" and "assistant", but found '
            'multiple "user" roles in a row',
        ),
        "proxy_502_html": _PROXY_502,
        "empty_503": _EMPTY_503,
    },
}

_STREAM: dict[Kind, dict[str, dict[str, Any]]] = {
    "openai": {
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
    },
    "anthropic": {
        "overloaded_error": {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        },
        "api_error": {"type": "error", "error": {"type": "api_error", "message": "Internal error"}},
    },
    "gemini": {
        "unavailable": {
            "error": {
                "code": 503,
                "message": "The model is overloaded. Please try again later.",
                "status": "UNAVAILABLE",
            }
        },
        "internal": {
            "error": {
                "code": 500,
                "message": "An internal error has occurred.",
                "status": "INTERNAL",
            }
        },
    },
    "vertex": {
        "unavailable": {
            "error": {
                "code": 503,
                "message": "The service is currently unavailable.",
                "status": "UNAVAILABLE",
            }
        },
        "claude_overloaded": {
            "type": "error",
            "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"},
        },
    },
}


def _bedrock(status: int, exception: str, message: str) -> CannedError:
    headers = {
        **_JSON,
        "x-amzn-ErrorType": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        "x-amzn-RequestId": "ca47a5ce-e260-4824-aa0e-2e62669d5d6e",
    }
    return CannedError(status, {"message": message}, headers)


_BEDROCK_LIMIT = "Your request exceeds the service quota for your account. You can view your "
_CATALOGUE["bedrock"] = {
    "throttling_tokens": _bedrock(
        429, "ThrottlingException", "Too many tokens, please wait before trying again."
    ),
    "throttling_requests": _bedrock(
        429, "ThrottlingException", "Too many requests, please wait before trying again."
    ),
    "tokens_per_day": _bedrock(
        429, "ThrottlingException", "Too many tokens per day, please wait before trying again."
    ),
    "service_quota_exceeded": _bedrock(
        400,
        "ServiceQuotaExceededException",
        _BEDROCK_LIMIT + "quotas at Viewing service quotas. You can resubmit your request later.",
    ),
    "service_unavailable": _bedrock(
        503, "ServiceUnavailableException", "Bedrock is unable to process your request."
    ),
    "model_not_ready": _bedrock(
        429,
        "ModelNotReadyException",
        "The model specified in the request is not ready to serve inference requests.",
    ),
    "model_timeout": _bedrock(
        408,
        "ModelTimeoutException",
        "The request took too long to process. Processing time exceeded the model timeout length.",
    ),
    "internal_server": _bedrock(
        500, "InternalServerException", "The request processing has failed due to a server error"
    ),
    "model_error": _bedrock(
        424, "ModelErrorException", "The request failed due to an error while processing the model."
    ),
    "validation": _bedrock(
        400,
        "ValidationException",
        "The content field in the Message object at messages.46 is empty. Add a ContentBlock "
        "object to the content field and try again.",
    ),
    "input_too_long": _bedrock(
        400, "ValidationException", "Input is too long for requested model."
    ),
    "prompt_too_long": _bedrock(
        400,
        "ValidationException",
        "The model returned the following errors: prompt is too long: 227255 tokens > 200000 "
        "maximum",
    ),
    "access_denied": _bedrock(
        403,
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ),
    "unrecognized_client": _bedrock(
        403,
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
    ),
    "invalid_model_id": _bedrock(
        400, "ValidationException", "The provided model identifier is invalid."
    ),
    "end_of_life": _bedrock(
        404,
        "ResourceNotFoundException",
        "This model version has reached the end of its life. Please refer to the AWS "
        "documentation for more details.",
    ),
    "legacy_model": _bedrock(
        404,
        "ResourceNotFoundException",
        "Access denied. This Model is marked by provider as Legacy and you have not been "
        "actively using the model in the last 30 days. Please upgrade to an active model on "
        "Amazon Bedrock",
    ),
    "proxy_502_html": _PROXY_502,
    "empty_503": _EMPTY_503,
}
_STREAM["bedrock"] = {
    "model_stream_error": {
        "modelStreamErrorException": {
            "message": "An error occurred while streaming the response. Retry your request.",
            "originalStatusCode": 500,
        }
    },
    "throttling": {
        "throttlingException": {"message": "Too many tokens, please wait before trying again."}
    },
    "input_too_long": {
        "validationException": {"message": "Input is too long for requested model."}
    },
    "service_unavailable": {
        "serviceUnavailableException": {"message": "Bedrock is unable to process your request."}
    },
}

NAMES: Mapping[Kind, tuple[str, ...]] = {kind: tuple(_CATALOGUE[kind]) for kind in KINDS}
"""The canned HTTP error names of each provider kind."""

STREAM_NAMES: Mapping[Kind, tuple[str, ...]] = {kind: tuple(_STREAM[kind]) for kind in KINDS}
"""The canned mid-stream error names of each provider kind."""


def canned(kind: Kind, name: str, *, retry_after_s: float | None = None) -> CannedError:
    """A fresh copy of one canned error; `retry_after_s` sets the provider's wait hint.

    OpenAI and Anthropic get `retry-after` (whole seconds, rounded up, as servers send
    it) plus `retry-after-ms` so tests can ask for sub-second waits; a google.rpc.Status
    (Gemini, Vertex AI) gets the `retryDelay` of a `google.rpc.RetryInfo` detail in the
    body, as Google sends it.
    Raises `KeyError` for an unknown kind or name, `ValueError` for a bad wait.
    """
    error = copy.deepcopy(_CATALOGUE[kind][name])
    if retry_after_s is None:
        return error
    if not math.isfinite(retry_after_s) or retry_after_s < 0:
        raise ValueError(f"retry_after_s must be a finite number >= 0, got {retry_after_s!r}")
    status = _google_status(error.body)
    if status is not None:
        details = status.setdefault("details", [])
        details[:] = [d for d in details if d.get("@type") != _RPC + "RetryInfo"]
        delay = f"{retry_after_s:.3f}".rstrip("0").rstrip(".")
        details.append({"@type": _RPC + "RetryInfo", "retryDelay": f"{delay}s"})
        return error
    error.headers["retry-after"] = str(math.ceil(retry_after_s))
    error.headers["retry-after-ms"] = str(round(retry_after_s * 1000))
    return error


def _google_status(body: object) -> dict[str, Any] | None:
    """The google.rpc.Status object in `body`, if it is one (alone or in a list)."""
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) and "status" in error else None


def canned_stream(kind: Kind, name: str) -> dict[str, Any]:
    """A fresh copy of one mid-stream error payload (the JSON of the SSE `data:` line)."""
    return copy.deepcopy(_STREAM[kind][name])


def stream_frame(kind: Kind, payload: Mapping[str, Any]) -> bytes:
    """`payload` framed as the provider sends it inside a `text/event-stream` body (for
    Bedrock, an event-stream exception message)."""
    if kind == "bedrock":
        return exception_event(payload)
    data = json.dumps(payload, separators=(",", ":"))
    prefix = "event: error\n" if kind == "anthropic" or payload.get("type") == "error" else ""
    return f"{prefix}data: {data}\n\n".encode()
