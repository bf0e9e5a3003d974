"""What a provider's error response means: one `worker.errors.ProviderError` subclass.

A provider's error response (status, headers, body) or mid-stream error event becomes
one error class. The body's own fields decide first — error-detail reasons, then
`code`, `type`, `status` — then the HTTP status; a few message patterns refine the
generic classes (a 400 about a spend limit is money, not a bad request; "prompt is too
long" is the context window; a 404 about the model is a model that is gone). What the
chain then does is `worker.turn.policy`.

How long to wait is read from what each provider sends: `Retry-After` (or
`retry-after-ms`), Gemini's `RetryInfo`, and for a rate limit without them OpenAI's
"try again in 644ms" and `x-ratelimit-reset-*` durations or Anthropic's
`anthropic-ratelimit-*-reset` timestamps. A Gemini per-day quota lasts until its reset.

Classification never raises and never echoes a body: messages are short, single-line
and have anything that looks like an API key redacted (`worker.observability.redact`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, timezone, tzinfo
from email.utils import parsedate_to_datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    "MAX_MESSAGE_CHARS",
    "classify_response",
    "classify_stream_error",
    "parse_duration",
    "parse_rate_limit_reset",
    "parse_retry_after",
    "seconds_to_daily_reset",
]

MAX_MESSAGE_CHARS = 200
MAX_BODY_BYTES = 64 * 1024  # error bodies are a few hundred bytes; anything bigger is not read

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
_CODES: Mapping[str, Mapping[str, _ErrorClass]] = {
    "openai": _OPENAI_CODES,
    "anthropic": _ANTHROPIC_CODES,
    "gemini": _GEMINI_CODES,
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
_SECONDS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
# Go's time.Duration as OpenAI prints it: "644ms", "1.5s", "6m0s", "1h2m3s".
_DURATION = re.compile(r"(?:(\d{1,6})h)?(?:(\d{1,6})m(?!s))?(?:(\d{1,9}(?:\.\d{1,9})?)(ms|s))?")
_TRY_AGAIN = re.compile(r"try again in (\S{1,24}?)\.?(?:\s|$)", re.IGNORECASE)
# The limit kinds whose `*-remaining` / `*-reset` headers each provider sends.
_OPENAI_LIMITS = ("requests", "tokens")
_ANTHROPIC_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")
# Gemini API "Rate limits": "Requests per day (RPD) quotas reset at midnight Pacific time."
_QUOTA_DAY = "America/Los_Angeles"
_PST = timedelta(hours=-8)
_MEDIA_TYPE = re.compile(r"[\w.+-]{1,40}/[\w.+-]{1,40}", re.ASCII)


@dataclass(frozen=True, slots=True)
class _Fields:
    """What an error body says, read defensively."""

    codes: tuple[str, ...] = ()
    message: str = ""
    status_hint: int | None = None
    retry_after_s: float | None = None
    quota_ids: tuple[str, ...] = ()  # Gemini's QuotaFailure violations


def classify_response(
    kind: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """Classify one HTTP error response from a provider of `kind`; never raises."""
    fields = _read_body(body)
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = fields.retry_after_s
    cls, code = _decide(kind, status, fields)
    if cls is RateLimited and retry_after is None:
        retry_after = _try_again_in(fields.message)
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


def classify_stream_error(kind: str, payload: Mapping[str, Any]) -> ProviderError:
    """Classify the JSON of a mid-stream error event (Anthropic `event: error`, an
    OpenAI or Gemini `data:` line carrying `error`); never raises."""
    fields = _read_document(payload)
    if not fields.codes and not fields.message and fields.status_hint is None:
        return MalformedResponse("stream error event without an error object")
    cls, code = _decide(kind, fields.status_hint, fields)
    message = _clean(fields.message) or "error event in the stream"
    return cls(message, provider_code=code, retry_after_s=fields.retry_after_s)


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date.

    Header names are case-insensitive. Returns None when absent or unreadable, never a
    negative or non-finite number (a date in the past is 0.0).
    """
    lowered = _lower(headers)
    millis = _seconds(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or value is None:
        return seconds
    return _seconds_until(value, now)


def parse_duration(value: str | None) -> float | None:
    """Seconds in a Go-style duration ("644ms", "1.5s", "6m0s", "1h2m"), or None."""
    if value is None:
        return None
    text = value.strip()
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        return None
    hours, minutes, amount, unit = match.groups()
    seconds = float(amount or 0) / (1000 if unit == "ms" else 1)
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + seconds


def parse_rate_limit_reset(
    headers: Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """Seconds until the spent rate limit resets, from OpenAI's `x-ratelimit-reset-*`
    durations or Anthropic's `anthropic-ratelimit-*-reset` RFC 3339 timestamps.

    Only limits whose `*-remaining` is 0 count, when any says so; the longest wait wins.
    """
    lowered = _lower(headers)
    waits: dict[str, float] = {}
    spent: set[str] = set()
    for limit in _OPENAI_LIMITS:
        seconds = parse_duration(lowered.get(f"x-ratelimit-reset-{limit}"))
        if seconds is not None:
            waits[limit] = seconds
        if lowered.get(f"x-ratelimit-remaining-{limit}", "").strip() == "0":
            spent.add(limit)
    for limit in _ANTHROPIC_LIMITS:
        seconds = _seconds_until_iso(lowered.get(f"anthropic-ratelimit-{limit}-reset"), now)
        if seconds is not None:
            waits[limit] = max(seconds, waits.get(limit, 0.0))
        if lowered.get(f"anthropic-ratelimit-{limit}-remaining", "").strip() == "0":
            spent.add(limit)
    chosen = [waits[limit] for limit in spent if limit in waits] or list(waits.values())
    return max(chosen) if chosen else None


def seconds_to_daily_reset(now: datetime | None = None) -> float:
    """Seconds until the next midnight Pacific time, when Gemini's per-day quotas reset."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    try:
        zone: tzinfo = ZoneInfo(_QUOTA_DAY)
    except ZoneInfoNotFoundError:
        # No tz database (a slim image): standard time, at most an hour late in summer.
        zone = timezone(_PST)
    tomorrow = now.astimezone(zone).date() + timedelta(days=1)
    midnight = datetime.combine(tomorrow, time(0), tzinfo=zone)
    # In UTC: a difference within one zone would ignore a DST change between the two.
    return (midnight.astimezone(UTC) - now).total_seconds()


def _try_again_in(message: str) -> float | None:
    match = _TRY_AGAIN.search(message)
    return parse_duration(match.group(1)) if match else None


def _seconds_until_iso(value: str | None, now: datetime | None) -> float | None:
    if value is None or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return _until(when, now)


def _decide(kind: str, status: int | None, fields: _Fields) -> tuple[_ErrorClass, str | None]:
    table = _CODES.get(kind, {})
    cls: _ErrorClass | None = None
    code = fields.codes[0] if fields.codes else None
    for candidate in fields.codes:
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
    if not body or len(body) > MAX_BODY_BYTES:
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
                delay = detail.get("retryDelay")
                if isinstance(delay, str) and delay.endswith("s"):
                    retry_after = _seconds(delay[:-1])
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
    media = _lower(headers).get("content-type", "").split(";")[0].strip()
    shown = media if _MEDIA_TYPE.fullmatch(media) else "unknown type"
    return f"HTTP {status} with an unparsed {len(body)}-byte body ({shown})"


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(name).lower(): value for name, value in headers.items() if isinstance(value, str)}


def _seconds(value: str | None) -> float | None:
    if value is None or not _SECONDS.fullmatch(value.strip()):
        return None
    return float(value.strip())


def _seconds_until(value: str, now: datetime | None) -> float | None:
    if len(value) > 64:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _until(when, now)


def _until(when: datetime, now: datetime | None) -> float | None:
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    try:
        delta = (when - now).total_seconds()
    except OverflowError:
        return None
    return max(0.0, delta) if math.isfinite(delta) else None
