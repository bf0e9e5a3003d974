"""Hostile provider answers: classification and Retry-After parsing never raise."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.adapters.classify import (
    MAX_ERROR_BODY_BYTES,
    MAX_MESSAGE_CHARS,
    classify_response,
    classify_stream_error,
)
from worker.adapters.waits import parse_duration, parse_rate_limit_reset, parse_retry_after
from worker.errors import ProviderError
from worker.simulator.catalogue import NAMES, canned
from worker.turn.policy import RULES, rule_for

FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KINDS = st.sampled_from(["openai", "anthropic", "gemini", "bedrock", "azure", ""])
JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
FIELD_NAMES = st.sampled_from(
    ["type", "code", "status", "message", "details", "error_code", "reason", "retryDelay"]
)
# Error-shaped documents with the right keys and any values: `{"error": 5}`,
# `{"error": {"type": []}}`, details that are strings, and so on.
ERRORISH = st.fixed_dictionaries(
    {"error": JSON | st.dictionaries(FIELD_NAMES, JSON | st.lists(JSON, max_size=3))},
    optional={"type": JSON, "object": st.just("error") | JSON},
)
REAL_BODIES = st.sampled_from(
    [canned(kind, name).body_bytes() for kind, names in NAMES.items() for name in names]
)
BODIES = st.one_of(
    st.binary(max_size=512),
    st.builds(lambda doc: json.dumps(doc).encode(), ERRORISH),
    st.builds(lambda doc: json.dumps(doc).encode(), JSON),
    st.builds(lambda body, cut: body[:cut], REAL_BODIES, st.integers(0, 400)),
    st.sampled_from(
        [
            b"\xff\xfe\xfa" * 100,
            b"[" * 50_000,
            b'{"error":' * 20_000,
            b"x" * (MAX_ERROR_BODY_BYTES + 1),
            '{"error":{"message":"\u0000\u202e\ud7ff"}}'.encode(),
        ]
    ),
)
RETRY_NAMES = st.sampled_from(["retry-after", "Retry-After", "RETRY-AFTER-MS", "retry-after-ms"])
DATES = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-8))]),
)
RETRY_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    DATES.map(lambda d: format_datetime(d, usegmt=d.tzinfo is UTC)),
)
HEADERS = st.dictionaries(RETRY_NAMES | st.text(max_size=12), RETRY_VALUES, max_size=4)


def _sane_wait(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)


@FAST
@given(kind=KINDS, status=st.integers(100, 599), headers=HEADERS, body=BODIES)
def test_classify_response_always_returns_a_provider_error(
    kind: str, status: int, headers: dict[str, str], body: bytes
) -> None:
    error = classify_response(kind, status, headers, body)
    assert isinstance(error, ProviderError)
    assert error.status == status
    assert len(error.message) <= MAX_MESSAGE_CHARS
    assert error.message.isprintable()
    assert _sane_wait(error.retry_after_s)
    assert rule_for(error) in RULES.values()
    str(error)


@FAST
@given(kind=KINDS, payload=ERRORISH | st.dictionaries(st.text(max_size=8), JSON, max_size=4))
def test_classify_stream_error_always_returns_a_provider_error(
    kind: str, payload: dict[str, Any]
) -> None:
    error = classify_stream_error(kind, payload)
    assert isinstance(error, ProviderError)
    assert len(error.message) <= MAX_MESSAGE_CHARS
    assert _sane_wait(error.retry_after_s)


@FAST
@given(headers=HEADERS, now=st.none() | DATES | DATES.map(lambda d: d.replace(tzinfo=None)))
def test_parse_retry_after_is_never_negative_nan_or_raising(
    headers: dict[str, str], now: datetime | None
) -> None:
    assert _sane_wait(parse_retry_after(headers, now=now))


RESET_NAMES = st.sampled_from(
    [
        "x-ratelimit-reset-requests",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-requests-remaining",
    ]
)
RESET_VALUES = RETRY_VALUES | st.sampled_from(["0", "644ms", "6m0s", "2030-01-01T00:00:00Z"])


@FAST
@given(
    headers=st.dictionaries(RESET_NAMES, RESET_VALUES, max_size=5),
    text=RESET_VALUES,
    now=st.none() | DATES,
)
def test_rate_limit_hints_are_never_negative_nan_or_raising(
    headers: dict[str, str], text: str, now: datetime | None
) -> None:
    assert _sane_wait(parse_rate_limit_reset(headers, now=now))
    assert _sane_wait(parse_duration(text))
