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

from worker.adapters.error_table import CODES, MESSAGE_RULES, STATUS, STATUS_RANGES, ErrorClass
from worker.adapters.waits import (
    lowercase_headers,
    parse_rate_limit_reset,
    parse_retry_after,
    parse_retry_delay,
    seconds_to_daily_reset,
    wait_in_message,
)
from worker.errors import (
    MalformedResponse,
    ModelQuotaExhausted,
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
    wire: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """Classify one HTTP error response from a provider API (`wire`); never raises."""
    fields = _read_aws(headers, body) if wire == "bedrock" else _read_body(body)
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = fields.retry_after_s
    cls, code = _decide(wire, status, fields)
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


def classify_stream_error(wire: str, payload: Mapping[str, Any] | list[Any]) -> ProviderError:
    """Classify the JSON of a mid-stream error event (Anthropic `event: error`, an
    OpenAI or Gemini `data:` line carrying `error`, alone or in Google's one-element
    list, a Responses `error` or `response.failed` event); never raises."""
    if wire == "bedrock":
        fields = _read_aws_event(payload)
    elif wire == "openai-responses":
        fields = _read_document(_responses_error(payload))
    else:
        fields = _read_document(payload)
    if not fields.codes and not fields.message and fields.status_hint is None:
        return MalformedResponse("stream error event without an error object")
    cls, code = _decide(wire, fields.status_hint, fields)
    message = _clean(fields.message) or "error event in the stream"
    return cls(message, provider_code=code, retry_after_s=fields.retry_after_s)


def _decide(wire: str, status: int | None, fields: _Fields) -> tuple[ErrorClass, str | None]:
    table = CODES.get(wire, {})
    cls: ErrorClass | None = None
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
    for rule in MESSAGE_RULES:
        if rule.status is not None and rule.status != status:
            continue
        if cls in rule.refines and rule.pattern.search(fields.message):
            cls = rule.to
            break
    return cls, code


def _by_status(status: int | None) -> ErrorClass:
    if status is None:
        return ServerError  # a provider reported an error without saying which
    if status in STATUS:
        return STATUS[status]
    for statuses, cls in STATUS_RANGES:
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
