"""What each provider's error codes, HTTP statuses and messages mean: the tables
`worker.adapters.classify` reads, most specific first."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from worker.errors import (
    AuthFailed,
    ContextTooLong,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ServerError,
)

__all__ = ["CODES", "MESSAGE_RULES", "STATUS", "STATUS_RANGES", "ErrorClass", "MessageRule"]

ErrorClass = type[ProviderError]

# Codes each provider puts in its error body, most specific first. Generic codes whose
# meaning depends on the status (OpenAI's `server_error`, `invalid_request_error`,
# Anthropic's `api_error`) are left out on purpose, so the status decides them: an
# `api_error` with 503 is an overloaded model (its breaker only), with 500 a server error,
# and in a stream error event, which has no status, a server error.
_OPENAI: Mapping[str, ErrorClass] = {
    "rate_limit_exceeded": RateLimited,
    "slow_down": RateLimited,
    "insufficient_quota": QuotaExhausted,
    "credit_balance_exhausted": QuotaExhausted,
    "organization_spend_limit_exceeded": QuotaExhausted,
    "project_spend_limit_exceeded": QuotaExhausted,
    "organization_usage_limit_exceeded": QuotaExhausted,
    "billing_hard_limit_reached": QuotaExhausted,
    "billing_not_active": QuotaExhausted,
    "server_is_overloaded": Overloaded,
    "invalid_api_key": AuthFailed,
    "invalid_authentication": AuthFailed,
    "unsupported_country_region_territory": AuthFailed,
    "context_length_exceeded": ContextTooLong,
    # The Responses API's codes for a request it will not run, which also arrive without
    # a status (`response.failed`, an `error` event): the request is at fault, not the server.
    "invalid_prompt": InvalidRequest,
    "invalid_encrypted_content": InvalidRequest,
    "model_not_found": ModelNotFound,
    "DeploymentNotFound": ModelNotFound,  # Azure OpenAI: the deployment was deleted
}
_ANTHROPIC: Mapping[str, ErrorClass] = {
    "enforced_spend_limit_reached": QuotaExhausted,
    "billing_error": QuotaExhausted,
    "timeout_error": ServerError,
    "overloaded_error": Overloaded,
    "rate_limit_error": RateLimited,
    "authentication_error": AuthFailed,
    "permission_error": AuthFailed,
    "not_found_error": InvalidRequest,
    "request_too_large": InvalidRequest,
    "invalid_request_error": InvalidRequest,
}
_GEMINI: Mapping[str, ErrorClass] = {
    "API_KEY_INVALID": AuthFailed,
    "API_KEY_EXPIRED": AuthFailed,
    "SERVICE_DISABLED": AuthFailed,
    "CONSUMER_SUSPENDED": AuthFailed,
    "BILLING_DISABLED": QuotaExhausted,
    "RATE_LIMIT_EXCEEDED": RateLimited,
    # A per-minute quota: a cooldown of that (account, model). A per-day one (a
    # QuotaFailure whose quotaId says PerDay) is money, decided in `_decide`.
    "RESOURCE_EXHAUSTED": RateLimited,
    "UNAVAILABLE": Overloaded,
    "INTERNAL": ServerError,
    "DEADLINE_EXCEEDED": ServerError,
    "INVALID_ARGUMENT": InvalidRequest,
    "NOT_FOUND": InvalidRequest,
    "PERMISSION_DENIED": AuthFailed,
    "UNAUTHENTICATED": AuthFailed,
    # The account cannot be used as it is (free tier unavailable, billing not enabled).
    "FAILED_PRECONDITION": QuotaExhausted,
}
# Vertex AI answers in google.rpc.Status for itself (quotas, IAM, models) and passes on the
# Anthropic error objects of Claude: both vocabularies, which share no code. A Publisher
# Model that is "not found or your project does not have access to it" (404), or that the
# project "is not allowed to use" (400 FAILED_PRECONDITION: not enabled in Model Garden,
# or refused by an organization policy), is a model this provider cannot serve.
_VERTEX: Mapping[str, ErrorClass] = {
    **_ANTHROPIC,
    **_GEMINI,
    "NOT_FOUND": ModelNotFound,
    "FAILED_PRECONDITION": ModelNotFound,
}
# Bedrock's exception names (the `x-amzn-ErrorType` header, or an event stream's
# `:exception-type` with its first letter raised), as botocore's bedrock-runtime model and
# the "Troubleshooting Amazon Bedrock API Error Codes" page list them.
_BEDROCK: Mapping[str, ErrorClass] = {
    "ThrottlingException": RateLimited,
    # An AWS service quota caps rate or concurrency per account ("You can resubmit your
    # request later"); Bedrock bills per token with no balance to run out, so this is load,
    # not money: a cooldown, never a degraded product.
    "ServiceQuotaExceededException": RateLimited,
    # "High demand or temporary capacity constraints ... not related to your account-level
    # quotas" (the troubleshooting page): the model is busy, as an Anthropic 529.
    "ServiceUnavailableException": Overloaded,
    "ModelNotReadyException": Overloaded,  # a 429 while the model is being loaded
    "ModelTimeoutException": ServerError,
    "InternalServerException": ServerError,
    "InternalFailure": ServerError,
    "ModelErrorException": ServerError,
    # Mid-stream it wraps the model's own error: its `originalStatusCode` decides then.
    "ModelStreamErrorException": ServerError,
    "ValidationException": InvalidRequest,
    "AccessDeniedException": AuthFailed,
    "UnrecognizedClientException": AuthFailed,
    "InvalidSignatureException": AuthFailed,
    # The troubleshooting page lists these without the suffix that rest-json headers carry.
    "IncompleteSignature": AuthFailed,
    "IncompleteSignatureException": AuthFailed,
    "InvalidClientTokenId": AuthFailed,
    "ExpiredTokenException": AuthFailed,
    "MissingAuthenticationToken": AuthFailed,
    "MissingAuthenticationTokenException": AuthFailed,
    # End of life, or a legacy model this account has not used lately.
    "ResourceNotFoundException": ModelNotFound,
}
CODES: Mapping[str, Mapping[str, ErrorClass]] = {
    "openai": _OPENAI,
    "openai-responses": _OPENAI,  # the same table: the same codes and envelope
    "anthropic": _ANTHROPIC,
    "gemini": _GEMINI,
    "vertex": _VERTEX,
    "bedrock": _BEDROCK,
}

STATUS: Mapping[int, ErrorClass] = {
    401: AuthFailed,
    402: QuotaExhausted,
    403: AuthFailed,
    408: ServerError,
    429: RateLimited,
    503: Overloaded,
    529: Overloaded,
}
STATUS_RANGES: tuple[tuple[range, ErrorClass], ...] = (
    (range(500, 600), ServerError),
    (range(400, 500), InvalidRequest),
)


@dataclass(frozen=True, slots=True)
class MessageRule:
    """A message that turns one of the `refines` classes into `to`."""

    pattern: re.Pattern[str]
    refines: frozenset[ErrorClass]
    to: ErrorClass
    status: int | None = None  # only for this HTTP status


MESSAGE_RULES: tuple[MessageRule, ...] = (
    MessageRule(
        re.compile(
            r"credit balance|spend(?:ing)? limit|specified (?:workspace )?api usage limits"
            r"|billing hard limit|insufficient credits",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest, RateLimited}),
        QuotaExhausted,
    ),
    MessageRule(
        # Gemini's "exceeded your current quota" with no quota id to say per-minute.
        re.compile(r"exceeded your current quota, please check your plan and billing", re.I),
        frozenset({RateLimited}),
        QuotaExhausted,
    ),
    MessageRule(
        re.compile(
            r"prompt is too long|maximum context length|context[ _]length|context window"
            r"|exceeds? (?:the )?context limit|input token count(?: \(\d+\))? exceeds",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ContextTooLong,
    ),
    # Vertex AI's Gemini wordings: "The input token count exceeds the maximum number of
    # tokens allowed 1048576." and "Unable to submit request because the input token count
    # is 1251952 but model only supports up to 1048576."
    MessageRule(
        re.compile(
            r"input token count exceeds the maximum|input token count is \d+ but model only"
            r" supports",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ContextTooLong,
    ),
    # Bedrock's own words for a prompt over the window (Claude's arrive as "prompt is too long").
    MessageRule(
        re.compile(r"input is too long for requested model|too many input tokens", re.IGNORECASE),
        frozenset({InvalidRequest}),
        ContextTooLong,
    ),
    # Bedrock's daily token quota is a ThrottlingException too; retried every cooldown it
    # would fail all day.
    MessageRule(
        re.compile(r"too many (?:tokens|requests) per day", re.IGNORECASE),
        frozenset({RateLimited}),
        QuotaExhausted,
    ),
    MessageRule(
        re.compile(r"provided model identifier is invalid", re.IGNORECASE),
        frozenset({InvalidRequest}),
        ModelNotFound,
    ),
    # Bedrock's model that only an inference profile (or provisioned throughput) can serve:
    # unusable as configured, like Vertex's "not allowed to use Publisher Model".
    MessageRule(
        re.compile(
            r"with on-demand throughput isn[’']t supported|doesn[’']t support on-demand throughput",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ModelNotFound,
    ),
    MessageRule(
        # Anthropic's "model: claude-x", Gemini's "models/x is not found", a deployment.
        re.compile(
            r"^model: |\bmodels/\S+ is not found|\bmodel\b[^.]*\b(?:not found|does not exist)"
            r"|\bdeployment\b[^.]*\bdoes not exist",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ModelNotFound,
        status=404,
    ),
)
