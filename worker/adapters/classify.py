"""What a provider's error response means: one `worker.errors.ProviderError` subclass.

A provider's error response (status, headers, body) or mid-stream error event becomes
one error class. The body's own fields decide first — error-detail reasons, then
`code`, `type`, `status` — then the HTTP status; a few message patterns refine the
generic classes (a 400 about a spend limit is money, not a bad request; "prompt is too
long" is the context window; a 404 about the model is a model that is gone). What the
chain then does is `worker.turn.policy`.

How long to wait is read from what each provider sends (`worker.adapters.waits`):
`Retry-After`, Gemini's `RetryInfo`, and for a rate limit without them OpenAI's "try
again in 644ms" and reset headers or Anthropic's reset timestamps. A Gemini per-day
quota lasts until its reset.

Classification never raises and never echoes a body: messages are short, single-line
and have anything that looks like an API key redacted (`worker.observability.redact`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.adapters.waits import (
    lowercase_headers,
    parse_rate_limit_reset,
    parse_retry_after,
    parse_retry_delay,
    seconds_to_daily_reset,
    wait_in_message,
)
from worker.errors import (
    AuthFailed,
    ContextTooLong,
    InvalidRequest,
    MalformedResponse,
    ModelNotFound,
    ModelQuotaExhausted,
    Overloaded,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ServerError,
)
from worker.observability.redact import redact_text

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "MAX_MESSAGE_CHARS",
    "classify_response",
    "classify_stream_error",
]

MAX_MESSAGE_CHARS = 200
# Error bodies are a few hundred bytes: one is read up to this much, and parsed only if whole.
MAX_ERROR_BODY_BYTES = 64 * 1024

_ErrorClass = type[ProviderError]

# Codes each provider puts in its error body, most specific first. Generic codes whose
# meaning depends on the status (OpenAI's `server_error`, `invalid_request_error`,
# Anthropic's `api_error`) are left out on purpose, so the status decides them: an
# `api_error` with 503 is an overloaded model (its breaker only), with 500 a server error,
# and in a stream error event, which has no status, a server error.
_OPENAI_CODES: Mapping[str, _ErrorClass] = {
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
_ANTHROPIC_CODES: Mapping[str, _ErrorClass] = {
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
_GEMINI_CODES: Mapping[str, _ErrorClass] = {
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
_VERTEX_CODES: Mapping[str, _ErrorClass] = {
    **_ANTHROPIC_CODES,
    **_GEMINI_CODES,
    "NOT_FOUND": ModelNotFound,
    "FAILED_PRECONDITION": ModelNotFound,
}
# Bedrock's exception names (the `x-amzn-ErrorType` header, or an event stream's
# `:exception-type` with its first letter raised), as botocore's bedrock-runtime model and
# the "Troubleshooting Amazon Bedrock API Error Codes" page list them.
_BEDROCK_CODES: Mapping[str, _ErrorClass] = {
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
_CODES: Mapping[str, Mapping[str, _ErrorClass]] = {
    "openai": _OPENAI_CODES,
    "openai-responses": _OPENAI_CODES,  # the same table: the same codes and envelope
    "anthropic": _ANTHROPIC_CODES,
    "gemini": _GEMINI_CODES,
    "vertex": _VERTEX_CODES,
    "bedrock": _BEDROCK_CODES,
}

_STATUS: Mapping[int, _ErrorClass] = {
    401: AuthFailed,
    402: QuotaExhausted,
    403: AuthFailed,
    408: ServerError,
    429: RateLimited,
    503: Overloaded,
    529: Overloaded,
}
_STATUS_RANGES: tuple[tuple[range, _ErrorClass], ...] = (
    (range(500, 600), ServerError),
    (range(400, 500), InvalidRequest),
)


@dataclass(frozen=True, slots=True)
class _MessageRule:
    pattern: re.Pattern[str]
    refines: frozenset[_ErrorClass]
    to: _ErrorClass
    status: int | None = None  # only for this HTTP status


_MESSAGE_RULES: tuple[_MessageRule, ...] = (
    _MessageRule(
        re.compile(
            r"credit balance|spend(?:ing)? limit|specified (?:workspace )?api usage limits"
            r"|billing hard limit|insufficient credits",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest, RateLimited}),
        QuotaExhausted,
    ),
    _MessageRule(
        # Gemini's "exceeded your current quota" with no quota id to say per-minute.
        re.compile(r"exceeded your current quota, please check your plan and billing", re.I),
        frozenset({RateLimited}),
        QuotaExhausted,
    ),
    _MessageRule(
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
    _MessageRule(
        re.compile(
            r"input token count exceeds the maximum|input token count is \d+ but model only"
            r" supports",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ContextTooLong,
    ),
    # Bedrock's own words for a prompt over the window (Claude's arrive as "prompt is too long").
    _MessageRule(
        re.compile(r"input is too long for requested model|too many input tokens", re.IGNORECASE),
        frozenset({InvalidRequest}),
        ContextTooLong,
    ),
    # Bedrock's daily token quota is a ThrottlingException too; retried every cooldown it
    # would fail all day.
    _MessageRule(
        re.compile(r"too many (?:tokens|requests) per day", re.IGNORECASE),
        frozenset({RateLimited}),
        QuotaExhausted,
    ),
    _MessageRule(
        re.compile(r"provided model identifier is invalid", re.IGNORECASE),
        frozenset({InvalidRequest}),
        ModelNotFound,
    ),
    # Bedrock's model that only an inference profile (or provisioned throughput) can serve:
    # unusable as configured, like Vertex's "not allowed to use Publisher Model".
    _MessageRule(
        re.compile(
            r"with on-demand throughput isn[’']t supported|doesn[’']t support on-demand throughput",
            re.IGNORECASE,
        ),
        frozenset({InvalidRequest}),
        ModelNotFound,
    ),
    _MessageRule(
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

_CODE_SHAPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_MEDIA_TYPE = re.compile(r"[\w.+-]{1,40}/[\w.+-]{1,40}", re.ASCII)


@dataclass(frozen=True, slots=True)
class _Fields:
    """What an error body says, read defensively."""

    codes: tuple[str, ...] = ()
    message: str = ""
    status_hint: int | None = None
    retry_after_s: float | None = None
    quota_ids: tuple[str, ...] = ()  # Gemini's QuotaFailure violations
    relayed: bool = False  # the code wraps another's error: `status_hint` decides, not it


def classify_response(
    kind: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """Classify one HTTP error response from a provider of `kind`; never raises."""
    fields = _read_aws(headers, body) if kind == "bedrock" else _read_body(body)
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = fields.retry_after_s
    cls, code = _decide(kind, status, fields)
    if cls is RateLimited and retry_after is None:
        retry_after = wait_in_message(fields.message)
        if retry_after is None:
            retry_after = parse_rate_limit_reset(headers)
    elif cls is ModelQuotaExhausted:
        # A daily quota's RetryInfo says seconds (quoted in public Gemini issues), which
        # would have the fleet retry a spent quota all day: the reset is midnight Pacific.
        retry_after = max(retry_after or 0.0, seconds_to_daily_reset())
    elif issubclass(cls, QuotaExhausted):
        retry_after = None  # a rate-limit hint on a spent account says nothing of its reset
    message = _clean(fields.message) or _describe_body(status, headers, body)
    return cls(message, status=status, provider_code=code, retry_after_s=retry_after)


def classify_stream_error(kind: str, payload: Mapping[str, Any] | list[Any]) -> ProviderError:
    """Classify the JSON of a mid-stream error event (Anthropic `event: error`, an
    OpenAI or Gemini `data:` line carrying `error`, alone or in Google's one-element
    list, a Responses `error` or `response.failed` event); never raises."""
    if kind == "bedrock":
        fields = _read_aws_event(payload)
    elif kind == "openai-responses":
        fields = _read_document(_responses_error(payload))
    else:
        fields = _read_document(payload)
    if not fields.codes and not fields.message and fields.status_hint is None:
        return MalformedResponse("stream error event without an error object")
    cls, code = _decide(kind, fields.status_hint, fields)
    message = _clean(fields.message) or "error event in the stream"
    return cls(message, provider_code=code, retry_after_s=fields.retry_after_s)


def _decide(kind: str, status: int | None, fields: _Fields) -> tuple[_ErrorClass, str | None]:
    table = _CODES.get(kind, {})
    cls: _ErrorClass | None = None
    code = fields.codes[0] if fields.codes else None
    for candidate in () if fields.relayed else fields.codes:
        cls = table.get(candidate)
        if cls is not None:
            code = candidate
            break
    if cls is None:
        cls = _by_status(status)
    if cls is RateLimited and fields.quota_ids:
        # The quota ids decide, not the message (per-minute ones say "check your billing"
        # too): a spent per-day quota is money until midnight.
        daily = any("PerDay" in quota for quota in fields.quota_ids)
        return (ModelQuotaExhausted if daily else RateLimited), code
    for rule in _MESSAGE_RULES:
        if rule.status is not None and rule.status != status:
            continue
        if cls in rule.refines and rule.pattern.search(fields.message):
            cls = rule.to
            break
    return cls, code


def _by_status(status: int | None) -> _ErrorClass:
    if status is None:
        return ServerError  # a provider reported an error without saying which
    if status in _STATUS:
        return _STATUS[status]
    for statuses, cls in _STATUS_RANGES:
        if status in statuses:
            return cls
    return MalformedResponse  # an error path with a non-error status


def _read_body(body: bytes) -> _Fields:
    if not body or len(body) > MAX_ERROR_BODY_BYTES:
        return _Fields()
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return _Fields()
    return _read_document(document)


def _read_document(document: object) -> _Fields:
    if isinstance(document, list) and document:
        document = document[0]  # Gemini's non-SSE stream wraps the error in a list
    if not isinstance(document, Mapping):
        return _Fields()
    error = document.get("error")
    if isinstance(error, str):
        return _Fields(message=error)  # Ollama
    if not isinstance(error, Mapping):
        if document.get("object") != "error":
            return _Fields()
        error = document  # vLLM puts the fields at the top level
    codes: list[str] = []
    quotas: list[str] = []
    retry_after: float | None = None
    details = error.get("details")
    if isinstance(details, Mapping):
        codes.append(_text(details.get("error_code")))
    elif isinstance(details, list):
        for detail in details[:16]:
            if isinstance(detail, Mapping):
                codes.append(_text(detail.get("reason")))
                delay = parse_retry_delay(detail.get("retryDelay"))
                if delay is not None:
                    retry_after = delay
                quotas.extend(_quota_ids(detail.get("violations")))
    codes.extend(_text(error.get(key)) for key in ("code", "type", "status"))
    raw_status = error.get("code")
    status_hint = raw_status if type(raw_status) is int and 100 <= raw_status <= 599 else None
    return _Fields(
        codes=tuple(c for c in codes if _CODE_SHAPE.fullmatch(c)),
        message=_text(error.get("message"))[:1000],
        status_hint=status_hint,
        retry_after_s=retry_after,
        quota_ids=tuple(quotas),
    )


def _responses_error(payload: object) -> object:
    """A Responses stream's failure as an error document: `response.failed` carries the
    `ResponseError` in `response.error`; an `error` event has the fields at its top."""
    if not isinstance(payload, Mapping):
        return payload
    if payload.get("type") == "response.failed":
        return payload.get("response")
    if payload.get("type") == "error":
        return {"error": payload}
    return payload


def _read_aws(headers: Mapping[str, str], body: bytes) -> _Fields:
    """AWS rest-json: the exception name in `x-amzn-ErrorType` (or the body's `__type`),
    the body `{"message": ...}`."""
    document: object = None
    if body and len(body) <= MAX_ERROR_BODY_BYTES:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            document = None
    if not isinstance(document, Mapping):
        document = {}
    raw = lowercase_headers(headers).get("x-amzn-errortype") or _text(document.get("__type"))
    # "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", or
    # "com.amazon.coral.service#ExpiredTokenException".
    code = raw.partition(":")[0].rpartition("#")[2]
    message = _text(document.get("message")) or _text(document.get("Message"))
    return _Fields(codes=(code,) if _CODE_SHAPE.fullmatch(code) else (), message=message[:1000])


def _read_aws_event(payload: object) -> _Fields:
    """An event-stream exception as `{"throttlingException": {"message": ...}}`; one that
    relays the model's own error (`modelStreamErrorException`) carries its
    `originalStatusCode` and `originalMessage`."""
    if not isinstance(payload, Mapping) or len(payload) != 1:
        return _Fields()
    ((name, inner),) = payload.items()
    if not isinstance(inner, Mapping):
        inner = {}
    code = str(name)[:1].upper() + str(name)[1:]
    codes = (code,) if _CODE_SHAPE.fullmatch(code) else ()
    message = _text(inner.get("message"))
    original = inner.get("originalStatusCode")
    if type(original) is int and 100 <= original <= 599:
        message = _text(inner.get("originalMessage")) or message
        return _Fields(codes=codes, message=message[:1000], status_hint=original, relayed=True)
    return _Fields(codes=codes, message=message[:1000])


def _quota_ids(violations: object) -> list[str]:
    if not isinstance(violations, list):
        return []
    ids = (_text(v.get("quotaId")) for v in violations[:16] if isinstance(v, Mapping))
    return [quota for quota in ids if _CODE_SHAPE.fullmatch(quota)]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _clean(message: str) -> str:
    text = " ".join(redact_text(message).split())
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _describe_body(status: int, headers: Mapping[str, str], body: bytes) -> str:
    if not body:
        return f"HTTP {status} with an empty body"
    media = lowercase_headers(headers).get("content-type", "").split(";")[0].strip()
    shown = media if _MEDIA_TYPE.fullmatch(media) else "unknown type"
    return f"HTTP {status} with an unparsed {len(body)}-byte body ({shown})"
