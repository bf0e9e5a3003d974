"""How long a provider says to wait: Retry-After and the other hints, read defensively.

Every parser returns seconds as a finite number >= 0, or None when the hint is absent
or unreadable; none raises. Durations are OpenAI's Go-style strings ("644ms", "6m0s"),
timestamps Anthropic's RFC 3339 or HTTP dates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, time, timedelta, timezone, tzinfo
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "lowercase_headers",
    "parse_duration",
    "parse_rate_limit_reset",
    "parse_retry_after",
    "parse_retry_delay",
    "seconds_to_daily_reset",
    "wait_in_message",
]

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


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date.

    Header names are case-insensitive. Returns None when absent or unreadable, never a
    negative or non-finite number (a date in the past is 0.0).
    """
    lowered = lowercase_headers(headers)
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
    lowered = lowercase_headers(headers)
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


def wait_in_message(message: str) -> float | None:
    """The wait in a message's \"Please try again in 644ms\" (OpenAI), or None."""
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


def parse_retry_delay(value: object) -> float | None:
    """Seconds in a `google.rpc.RetryInfo` `retryDelay` ("27s", "0.5s"), or None."""
    if not isinstance(value, str) or not value.endswith("s"):
        return None
    return _seconds(value[:-1])


def lowercase_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` with lower-case names (httpx's or a plain dict); non-string values dropped."""
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
