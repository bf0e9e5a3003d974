"""The policy table: real provider error shapes → error class → decision and signal."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

import worker.adapters.classify
import worker.turn.policy
from worker.adapters.classify import classify_response, classify_stream_error
from worker.adapters.waits import (
    parse_duration,
    parse_rate_limit_reset,
    parse_retry_after,
    seconds_to_daily_reset,
)
from worker.errors import (
    AuthFailed,
    ConnectionFailed,
    ContextTooLong,
    DeadlineExceeded,
    FirstByteTimeout,
    InvalidRequest,
    MalformedResponse,
    ModelNotFound,
    ModelQuotaExhausted,
    Overloaded,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ResponseTimeout,
    ServerError,
)
from worker.guard.protocol import Signal
from worker.simulator.catalogue import (
    NAMES,
    STREAM_NAMES,
    CannedError,
    Kind,
    canned,
    canned_stream,
    stream_frame,
)
from worker.turn.policy import RULES, Decision, Rule, rule_for

EXPECTED: dict[tuple[str, str], type[ProviderError]] = {
    ("openai", "rate_limit_exceeded"): RateLimited,
    ("openai", "insufficient_quota"): QuotaExhausted,
    ("openai", "credit_balance_exhausted"): QuotaExhausted,
    ("openai", "project_spend_limit_exceeded"): QuotaExhausted,
    ("openai", "billing_hard_limit_reached"): QuotaExhausted,
    ("openai", "server_error"): ServerError,
    ("openai", "server_is_overloaded"): Overloaded,
    ("openai", "engine_overloaded"): Overloaded,
    ("openai", "invalid_api_key"): AuthFailed,
    ("openai", "unsupported_region"): AuthFailed,
    ("openai", "rate_limit_reset_headers"): RateLimited,
    ("openai", "rate_limit_try_again"): RateLimited,
    ("openai", "model_not_found"): ModelNotFound,
    ("openai", "deployment_not_found"): ModelNotFound,
    ("openai", "azure_prompt_filtered"): InvalidRequest,
    ("openai", "context_window_exceeded"): ContextTooLong,
    ("openai", "vllm_context_length"): ContextTooLong,
    ("openai", "context_length_exceeded"): ContextTooLong,
    ("openai", "invalid_request_error"): InvalidRequest,
    ("anthropic", "api_error"): ServerError,
    ("anthropic", "overloaded_error"): Overloaded,
    ("anthropic", "rate_limit_error"): RateLimited,
    ("anthropic", "authentication_error"): AuthFailed,
    ("anthropic", "permission_error"): AuthFailed,
    ("anthropic", "not_found_error"): ModelNotFound,
    ("anthropic", "context_limit_with_max_tokens"): ContextTooLong,
    ("anthropic", "rate_limit_reset_headers"): RateLimited,
    ("anthropic", "request_too_large"): InvalidRequest,
    ("anthropic", "invalid_request_error"): InvalidRequest,
    ("anthropic", "prompt_too_long"): ContextTooLong,
    ("anthropic", "spend_limit"): QuotaExhausted,
    ("anthropic", "workspace_spend_limit"): QuotaExhausted,
    ("anthropic", "credit_balance_too_low"): QuotaExhausted,
    ("anthropic", "enforced_spend_limit"): QuotaExhausted,
    ("anthropic", "billing_error"): QuotaExhausted,
    ("anthropic", "timeout_error"): ServerError,
    ("gemini", "resource_exhausted"): RateLimited,
    ("gemini", "resource_exhausted_bare"): RateLimited,
    ("gemini", "daily_quota_exhausted"): ModelQuotaExhausted,
    ("gemini", "quota_billing"): QuotaExhausted,
    ("gemini", "unavailable"): Overloaded,
    ("gemini", "internal"): ServerError,
    ("gemini", "invalid_argument"): InvalidRequest,
    ("gemini", "api_key_invalid"): AuthFailed,
    ("gemini", "context_too_long"): ContextTooLong,
    ("gemini", "failed_precondition"): QuotaExhausted,
    ("gemini", "permission_denied"): AuthFailed,
    ("gemini", "not_found"): ModelNotFound,
    ("gemini", "deadline_exceeded"): ServerError,
    ("vertex", "resource_exhausted"): RateLimited,
    ("vertex", "claude_request_quota"): RateLimited,
    ("vertex", "claude_token_quota"): RateLimited,
    ("vertex", "model_not_found"): ModelNotFound,
    ("vertex", "model_not_allowed"): ModelNotFound,
    ("vertex", "permission_denied"): AuthFailed,
    ("vertex", "access_token_expired"): AuthFailed,
    ("vertex", "credentials_missing"): AuthFailed,
    ("vertex", "invalid_credentials"): AuthFailed,
    ("vertex", "invalid_argument"): InvalidRequest,
    ("vertex", "context_too_long"): ContextTooLong,
    ("vertex", "context_too_long_unable"): ContextTooLong,
    ("vertex", "internal"): ServerError,
    ("vertex", "unavailable"): Overloaded,
    ("vertex", "deadline_exceeded"): ServerError,
    ("vertex", "claude_overloaded"): Overloaded,
    ("vertex", "claude_prompt_too_long"): ContextTooLong,
    ("vertex", "claude_invalid_request"): InvalidRequest,
    ("bedrock", "throttling_tokens"): RateLimited,
    ("bedrock", "throttling_requests"): RateLimited,
    ("bedrock", "tokens_per_day"): QuotaExhausted,
    ("bedrock", "service_quota_exceeded"): RateLimited,
    ("bedrock", "service_unavailable"): Overloaded,
    ("bedrock", "model_not_ready"): Overloaded,
    ("bedrock", "model_timeout"): ServerError,
    ("bedrock", "internal_server"): ServerError,
    ("bedrock", "model_error"): ServerError,
    ("bedrock", "validation"): InvalidRequest,
    ("bedrock", "input_too_long"): ContextTooLong,
    ("bedrock", "prompt_too_long"): ContextTooLong,
    ("bedrock", "access_denied"): AuthFailed,
    ("bedrock", "unrecognized_client"): AuthFailed,
    ("bedrock", "invalid_model_id"): ModelNotFound,
    ("bedrock", "end_of_life"): ModelNotFound,
    ("bedrock", "legacy_model"): ModelNotFound,
    ("bedrock", "on_demand_unsupported"): ModelNotFound,
    ("bedrock", "on_demand_not_supported"): ModelNotFound,
}
# The Responses API answers HTTP errors in Chat Completions' envelope, and has its own.
for (_kind, _name), _class in list(EXPECTED.items()):
    if _kind == "openai":
        EXPECTED[("openai-responses", _name)] = _class
EXPECTED[("openai-responses", "context_length_exceeded")] = ContextTooLong
EXPECTED[("openai-responses", "invalid_encrypted_content")] = InvalidRequest
EXPECTED[("openai-responses", "reasoning_item_not_stored")] = InvalidRequest
EXPECTED[("openai-responses", "invalid_prompt")] = InvalidRequest
for _kind in NAMES:
    EXPECTED[(_kind, "proxy_502_html")] = ServerError
    EXPECTED[(_kind, "empty_503")] = Overloaded

EXPECTED_STREAM: dict[tuple[str, str], type[ProviderError]] = {
    ("openai", "server_error"): ServerError,
    ("openai", "server_is_overloaded"): Overloaded,
    ("openai-responses", "error_server_error"): ServerError,
    ("openai-responses", "error_rate_limit_exceeded"): RateLimited,
    ("openai-responses", "error_context_length_exceeded"): ContextTooLong,
    ("openai-responses", "failed_server_error"): ServerError,
    ("openai-responses", "failed_rate_limit_exceeded"): RateLimited,
    ("openai-responses", "failed_context_length_exceeded"): ContextTooLong,
    ("openai-responses", "failed_insufficient_quota"): QuotaExhausted,
    ("openai-responses", "failed_invalid_prompt"): InvalidRequest,
    ("anthropic", "overloaded_error"): Overloaded,
    ("anthropic", "api_error"): ServerError,
    ("gemini", "unavailable"): Overloaded,
    ("gemini", "internal"): ServerError,
    ("gemini", "resource_exhausted_listed"): RateLimited,
    ("vertex", "unavailable"): Overloaded,
    ("vertex", "claude_overloaded"): Overloaded,
    ("bedrock", "model_stream_error"): ServerError,
    ("bedrock", "model_stream_context_too_long"): ContextTooLong,
    ("bedrock", "throttling"): RateLimited,
    ("bedrock", "input_too_long"): ContextTooLong,
    ("bedrock", "service_unavailable"): Overloaded,
}

CATALOGUE = [(kind, name) for kind, names in NAMES.items() for name in names]
STREAMS = [(kind, name) for kind, names in STREAM_NAMES.items() for name in names]


def classify(kind: Kind, name: str, **kwargs: float) -> ProviderError:
    error = canned(kind, name, **kwargs)
    return classify_response(kind, error.status, error.headers, error.body_bytes())


def test_every_catalogue_entry_has_an_expected_class() -> None:
    assert set(EXPECTED) == set(CATALOGUE)
    assert set(EXPECTED_STREAM) == set(STREAMS)


@pytest.mark.parametrize(("kind", "name"), CATALOGUE)
def test_catalogue_entry_is_classified(kind: Kind, name: str) -> None:
    """Each real provider error shape lands in its class, keeping status and a short message."""
    raw = canned(kind, name)
    error = classify(kind, name)
    assert type(error) is EXPECTED[(kind, name)]
    assert error.status == raw.status
    assert 0 < len(error.message) <= worker.adapters.classify.MAX_MESSAGE_CHARS
    assert "\n" not in error.message
    assert raw.body_bytes().decode() not in error.message or not raw.body_bytes()


@pytest.mark.parametrize(("kind", "name"), CATALOGUE)
def test_provider_code_comes_from_the_body(kind: Kind, name: str) -> None:
    raw = canned(kind, name)
    error = classify(kind, name)
    if isinstance(raw.body, dict | list):
        assert error.provider_code is not None
        # Bedrock names the exception in a header, x-amzn-ErrorType.
        assert error.provider_code in json.dumps(raw.body) + json.dumps(raw.headers)
    else:
        assert error.provider_code is None


@pytest.mark.parametrize(("kind", "name"), STREAMS)
def test_mid_stream_error_event_is_classified(kind: Kind, name: str) -> None:
    error = classify_stream_error(kind, canned_stream(kind, name))
    assert type(error) is EXPECTED_STREAM[(kind, name)]
    assert error.status is None
    assert error.message


# One row per line of DESIGN.md "What each failure gets" (rows about chain state —
# streamed content, open breakers — are the chain's and are tested there).
# The provider may bill the failed call: the row's fifth column.
BILLED = "billed"
DESIGN_ROWS: list[tuple[Any, ...]] = [
    ("500", classify("openai", "server_error"), Decision.RETRY_THEN_NEXT, Signal.FAILURE),
    ("502 html", classify("openai", "proxy_502_html"), Decision.RETRY_THEN_NEXT, Signal.FAILURE),
    ("504", classify("gemini", "deadline_exceeded"), Decision.RETRY_THEN_NEXT, Signal.FAILURE),
    ("api_error", classify("anthropic", "api_error"), Decision.RETRY_THEN_NEXT, Signal.FAILURE),
    ("503", classify("openai", "server_is_overloaded"), Decision.NEXT, Signal.MODEL_FAILURE),
    ("529", classify("anthropic", "overloaded_error"), Decision.NEXT, Signal.MODEL_FAILURE),
    ("first byte", FirstByteTimeout("silent"), Decision.NEXT, Signal.FAILURE, BILLED),
    ("stalled stream", ResponseTimeout("stalled"), Decision.NEXT, Signal.FAILURE, BILLED),
    ("refused", ConnectionFailed("refused"), Decision.RETRY_THEN_NEXT, Signal.FAILURE),
    ("garbled", MalformedResponse("bad json"), Decision.RETRY_THEN_NEXT, Signal.FAILURE, BILLED),
    ("429", classify("anthropic", "rate_limit_error"), Decision.WAIT_OR_NEXT, Signal.RATE_LIMITED),
    ("429 quota", classify("openai", "insufficient_quota"), Decision.DEGRADE, Signal.EXHAUSTED),
    ("400 spend", classify("anthropic", "spend_limit"), Decision.DEGRADE, Signal.EXHAUSTED),
    ("402", classify("anthropic", "billing_error"), Decision.DEGRADE, Signal.EXHAUSTED),
    ("401", classify("anthropic", "authentication_error"), Decision.FAIL, Signal.NEUTRAL),
    ("403", classify("gemini", "permission_denied"), Decision.FAIL, Signal.NEUTRAL),
    ("400", classify("anthropic", "invalid_request_error"), Decision.FAIL, Signal.NEUTRAL),
    ("413", classify("anthropic", "request_too_large"), Decision.FAIL, Signal.NEUTRAL),
    (
        "422",
        classify_response("openai", 422, {}, b'{"detail":"bad"}'),
        Decision.FAIL,
        Signal.NEUTRAL,
    ),
    (
        "context",
        classify("openai", "context_length_exceeded"),
        Decision.LARGER_WINDOW,
        Signal.NEUTRAL,
    ),
    (
        "context, Anthropic's max_tokens wording",
        classify("anthropic", "context_limit_with_max_tokens"),
        Decision.LARGER_WINDOW,
        Signal.NEUTRAL,
    ),
    ("404 model", classify("openai", "model_not_found"), Decision.NEXT, Signal.MODEL_GONE),
    (
        "404 deployment",
        classify("openai", "deployment_not_found"),
        Decision.NEXT,
        Signal.MODEL_GONE,
    ),
    ("404 claude", classify("anthropic", "not_found_error"), Decision.NEXT, Signal.MODEL_GONE),
    ("404 gemini", classify("gemini", "not_found"), Decision.NEXT, Signal.MODEL_GONE),
    (
        "429 per day",
        classify("gemini", "daily_quota_exhausted"),
        Decision.DEGRADE,
        Signal.MODEL_EXHAUSTED,
    ),
    ("429 billing", classify("gemini", "quota_billing"), Decision.DEGRADE, Signal.EXHAUSTED),
    ("deadline", DeadlineExceeded("late"), Decision.STOP, Signal.NEUTRAL),
    ("cancelled", asyncio.CancelledError(), Decision.STOP, Signal.NEUTRAL),
]


@pytest.mark.parametrize("row", DESIGN_ROWS, ids=[r[0] for r in DESIGN_ROWS])
def test_design_table_row(row: tuple[Any, ...]) -> None:
    _, error, decision, signal, *billed = row
    assert rule_for(error) == Rule(decision, signal, billed=bool(billed))


def _all_subclasses(cls: type[ProviderError]) -> set[type[ProviderError]]:
    found: set[type[ProviderError]] = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_all_subclasses(sub)}
    return found


def test_every_provider_error_subclass_has_its_own_rule() -> None:
    subclasses = {c for c in _all_subclasses(ProviderError) if c.__module__ == "worker.errors"}
    assert len(subclasses) >= 10
    assert subclasses <= set(RULES)
    assert DeadlineExceeded in RULES


def test_rule_for_walks_the_mro_and_defaults_to_a_neutral_fail() -> None:
    class FlakyGatewayError(ServerError):
        pass

    assert rule_for(FlakyGatewayError("x")) == RULES[ServerError]
    assert rule_for(ProviderError("x")) == Rule(Decision.FAIL, Signal.NEUTRAL)
    assert rule_for(KeyError("x")) == Rule(Decision.FAIL, Signal.NEUTRAL)


# --- status alone misleads -------------------------------------------------------


def test_invalid_gemini_key_is_a_400_but_auth() -> None:
    error = classify("gemini", "api_key_invalid")
    assert error.status == 400
    assert isinstance(error, AuthFailed)
    assert error.provider_code == "API_KEY_INVALID"


def test_openai_quota_is_a_429_but_not_a_rate_limit() -> None:
    error = classify("openai", "insufficient_quota")
    assert error.status == 429
    assert type(error) is QuotaExhausted


def test_anthropic_monthly_cap_is_a_429_rate_limit_error_but_quota() -> None:
    error = classify("anthropic", "enforced_spend_limit")
    assert (error.status, type(error)) == (429, QuotaExhausted)


@pytest.mark.parametrize("name", ["spend_limit", "workspace_spend_limit", "credit_balance_too_low"])
def test_anthropic_400_about_money_is_quota(name: str) -> None:
    error = classify("anthropic", name)
    assert (error.status, type(error), error.provider_code) == (
        400,
        QuotaExhausted,
        "invalid_request_error",
    )


def test_openai_invalid_api_key_typed_invalid_request_is_auth() -> None:
    assert type(classify("openai", "invalid_api_key")) is AuthFailed


def test_anthropic_generic_api_error_defers_to_status() -> None:
    body = b'{"type":"error","error":{"type":"api_error","message":"Service unavailable"}}'
    assert type(classify_response("anthropic", 503, {}, body)) is Overloaded
    assert type(classify_response("anthropic", 500, {}, body)) is ServerError
    assert classify_response("anthropic", 503, {}, body).provider_code == "api_error"


def test_openai_generic_type_defers_to_status() -> None:
    """`server_error` at 503 is overload; `invalid_request_error` at 401 is auth."""
    body = b'{"error":{"message":"x","type":"server_error","param":null,"code":null}}'
    assert type(classify_response("openai", 503, {}, body)) is Overloaded
    assert type(classify_response("openai", 500, {}, body)) is ServerError
    missing_key = b'{"error":{"message":"No API key provided.","type":"invalid_request_error"}}'
    assert type(classify_response("openai", 401, {}, missing_key)) is AuthFailed


def test_error_body_on_a_200_still_classified_by_its_code() -> None:
    body = b'{"error":{"message":"slow","type":"requests","code":"rate_limit_exceeded"}}'
    assert type(classify_response("openai", 200, {}, body)) is RateLimited


def test_413_is_an_invalid_request_not_context() -> None:
    assert type(classify_response("anthropic", 413, {}, b"")) is InvalidRequest


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (500, ServerError),
        (502, ServerError),
        (504, ServerError),
        (503, Overloaded),
        (529, Overloaded),
        (429, RateLimited),
        (402, QuotaExhausted),
        (401, AuthFailed),
        (403, AuthFailed),
        (400, InvalidRequest),
        (404, InvalidRequest),
        (422, InvalidRequest),
        (200, MalformedResponse),
        (302, MalformedResponse),
    ],
)
def test_html_or_empty_body_is_classified_by_status(status: int, cls: type[ProviderError]) -> None:
    html = b"<html><body><h1>Oops</h1></body></html>"
    for body in (html, b""):
        error = classify_response("anthropic", status, {"Content-Type": "text/html"}, body)
        assert type(error) is cls
        assert error.provider_code is None
        assert "<html" not in error.message


def test_unknown_kind_falls_back_to_status() -> None:
    body = canned("anthropic", "overloaded_error").body_bytes()
    assert type(classify_response("mistral", 500, {}, body)) is ServerError


def test_openai_compatible_servers_shapes() -> None:
    """vLLM puts the fields at the top level; Ollama sends `error` as a string."""
    vllm = json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    ).encode()
    assert type(classify_response("openai", 400, {}, vllm)) is ContextTooLong
    ollama = b'{"error":"model \\"llama9\\" not found, try pulling it first"}'
    error = classify_response("openai", 404, {}, ollama)
    assert type(error) is ModelNotFound
    assert "llama9" in error.message


def test_gemini_error_wrapped_in_a_list() -> None:
    body = json.dumps([canned("gemini", "unavailable").body]).encode()
    assert type(classify_response("gemini", 503, {}, body)) is Overloaded


def test_stream_error_without_error_object_is_malformed() -> None:
    payloads: list[dict[str, object]] = [{}, {"error": 5}, {"error": {}}, {"type": "error"}]
    for payload in payloads:
        assert type(classify_stream_error("anthropic", payload)) is MalformedResponse


def test_stream_error_uses_gemini_code_when_status_is_unknown() -> None:
    payload = {"error": {"code": 429, "message": "slow down", "status": "SOMETHING_NEW"}}
    assert type(classify_stream_error("gemini", payload)) is RateLimited


# --- retry hints -----------------------------------------------------------------

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": " 7 "}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"RETRY-AFTER-MS": "1500"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after": format_datetime(NOW + timedelta(seconds=30), usegmt=True)}, 30.0),
        ({"retry-after": "Sun, 01 Mar 2026 12:01:00 GMT"}, 60.0),
        ({"retry-after": format_datetime(NOW - timedelta(hours=1), usegmt=True)}, 0.0),
        ({}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "1e3"}, None),
        ({"retry-after": "Mon, 99 Foo 2026 25:61:00 GMT"}, None),
        ({"retry-after-ms": "-1"}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_parse_retry_after_reads_httpx_headers_and_naive_now() -> None:
    headers = httpx.Headers({"Retry-After": "Sun, 01 Mar 2026 12:00:10 GMT"})
    assert parse_retry_after(headers, now=NOW.replace(tzinfo=None)) == 10.0


def test_parse_retry_after_date_defaults_to_the_clock() -> None:
    later = datetime.now(UTC) + timedelta(seconds=100)
    seconds = parse_retry_after({"retry-after": format_datetime(later, usegmt=True)})
    assert seconds is not None
    assert 90 <= seconds <= 100


def test_rate_limit_carries_retry_after_from_headers() -> None:
    error = classify("anthropic", "rate_limit_error")
    assert error.retry_after_s == 15.0
    assert classify("anthropic", "rate_limit_error", retry_after_s=0.2).retry_after_s == 0.2


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("644ms", 0.644), ("1s", 1.0), ("1.5s", 1.5), ("6m0s", 360.0), ("1h2m3s", 3723.0)],
)
def test_openai_durations_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5", "-1s", "1.5", "ms"])
def test_unreadable_durations_are_none(text: str) -> None:
    assert parse_duration(text) is None


def test_openai_reset_header_of_the_spent_limit_is_the_wait() -> None:
    error = classify("openai", "rate_limit_reset_headers")
    assert error.retry_after_s == pytest.approx(0.644)  # tokens spent; requests reset in 12ms
    error = classify("openai", "rate_limit_try_again")
    assert error.retry_after_s == pytest.approx(1.5)


def test_retry_after_beats_the_message_and_the_reset_headers() -> None:
    assert classify("openai", "rate_limit_exceeded").retry_after_s == 1.0


def test_anthropic_reset_timestamps_are_seconds_from_now() -> None:
    now = datetime(2029, 12, 31, 23, 59, 58, 500000, tzinfo=UTC)
    headers = canned("anthropic", "rate_limit_reset_headers").headers
    assert parse_rate_limit_reset(headers, now=now) == pytest.approx(1.5)
    later = {"anthropic-ratelimit-tokens-reset": "2030-01-01T00:00:30Z"}
    assert parse_rate_limit_reset({**headers, **later}, now=now) == pytest.approx(1.5)
    assert parse_rate_limit_reset(later, now=now) == pytest.approx(31.5)
    assert parse_rate_limit_reset({"anthropic-ratelimit-tokens-reset": "garbage"}) is None


@pytest.mark.parametrize(
    ("utc", "hours"),
    [
        (datetime(2026, 7, 1, 6, 0, tzinfo=UTC), 1.0),  # 23:00 PDT: midnight is 07:00 UTC
        (datetime(2026, 12, 1, 9, 0, tzinfo=UTC), 23.0),  # 01:00 PST: the next night
        (datetime(2026, 3, 8, 8, 30, tzinfo=UTC), 22.5),  # 00:30 PST on a 23-hour day
    ],
)
def test_gemini_daily_quotas_reset_at_midnight_pacific(utc: datetime, hours: float) -> None:
    assert seconds_to_daily_reset(utc) == pytest.approx(hours * 3600)


def test_a_daily_quota_lasts_until_its_reset_not_its_retry_delay() -> None:
    error = classify("gemini", "daily_quota_exhausted")
    assert type(error) is ModelQuotaExhausted
    assert error.retry_after_s is not None
    assert error.retry_after_s >= max(47.0, seconds_to_daily_reset() - 5)
    # Per-minute quotas stay a rate limit with their RetryInfo delay.
    assert classify("gemini", "resource_exhausted").retry_after_s == 27.0
    # An account out of money has no reset a header could tell.
    assert classify("gemini", "quota_billing").retry_after_s is None


def test_gemini_retry_delay_comes_from_the_body() -> None:
    assert classify("gemini", "resource_exhausted").retry_after_s == 27.0
    assert classify("gemini", "resource_exhausted", retry_after_s=0.25).retry_after_s == 0.25
    assert classify("gemini", "resource_exhausted_bare").retry_after_s is None


def test_retry_after_header_beats_body_retry_delay() -> None:
    raw = canned("gemini", "resource_exhausted")
    error = classify_response("gemini", 429, {"Retry-After": "3"}, raw.body_bytes())
    assert error.retry_after_s == 3.0


# --- messages never leak ---------------------------------------------------------


def test_message_is_truncated_and_never_the_body() -> None:
    long_message = "overloaded " * 2000
    body = json.dumps({"type": "error", "error": {"type": "api_error", "message": long_message}})
    error = classify_response("anthropic", 500, {}, body.encode())
    assert len(error.message) <= worker.adapters.classify.MAX_MESSAGE_CHARS
    assert "api_error" not in error.message
    html = b"<html>" + b"<p>secret page</p>" * 5000 + b"</html>"
    error = classify_response("openai", 502, {"content-type": "text/html"}, html)
    assert "secret page" not in error.message
    assert len(error.message) <= worker.adapters.classify.MAX_MESSAGE_CHARS


def test_echoed_api_keys_are_redacted() -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    gkey = "AIzaSyA1234567890abcdefghijklmnopqrstu"
    body = json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {key}. Also {gkey} and "
                "Authorization: Bearer tok_123456 leaked",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
    )
    error = classify_response("openai", 401, {}, body.encode())
    for secret in (key, gkey, "tok_123456"):
        assert secret not in str(error)
        assert secret not in repr(error)


def test_garbage_provider_codes_are_dropped() -> None:
    body = json.dumps({"error": {"type": "x" * 500, "code": "a b\nc", "message": "m"}})
    error = classify_response("openai", 500, {}, body.encode())
    assert error.provider_code is None
    assert type(error) is ServerError


# --- catalogue helpers -----------------------------------------------------------


def test_canned_returns_independent_copies() -> None:
    first = canned("openai", "server_error")
    assert isinstance(first.body, dict)
    first.body["error"]["code"] = "mutated"
    first.headers["x"] = "y"
    second = canned("openai", "server_error")
    assert isinstance(second.body, dict)
    assert second.body["error"]["code"] is None
    assert "x" not in second.headers


def test_canned_retry_after_sets_the_provider_hint() -> None:
    headers = canned("openai", "rate_limit_exceeded", retry_after_s=2.5).headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("3", "2500")
    with pytest.raises(ValueError, match="retry_after_s"):
        canned("openai", "rate_limit_exceeded", retry_after_s=-1)
    with pytest.raises(KeyError):
        canned("openai", "no_such_error")


def test_canned_body_bytes_for_each_body_type() -> None:
    assert CannedError(500, b"x").body_bytes() == b"x"
    assert CannedError(500, "é").body_bytes() == "é".encode()
    assert CannedError(500, {"a": 1}).body_bytes() == b'{"a":1}'


def test_stream_frames_follow_each_providers_sse_format() -> None:
    anthropic = stream_frame("anthropic", canned_stream("anthropic", "overloaded_error"))
    assert anthropic.startswith(b"event: error\ndata: {")
    assert anthropic.endswith(b"\n\n")
    openai = stream_frame("openai", canned_stream("openai", "server_error"))
    assert openai.startswith(b"data: {")
    payload = json.loads(openai.removeprefix(b"data: "))
    assert type(classify_stream_error("openai", payload)) is ServerError


def test_public_surface_is_sorted_and_exported() -> None:
    def isort_key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert worker.turn.policy.__all__ == sorted(worker.turn.policy.__all__, key=isort_key)
    for name in worker.turn.policy.__all__:
        assert hasattr(worker.turn.policy, name)
