"""How a breaker trips and recovers, and how long cooldowns and exhausted marks last."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from breakers.errors import InvalidPolicyError

__all__ = ["CooldownPolicy", "Policy"]


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _or_default(seconds: float | None, default: float) -> float:
    """`seconds` as given, `default` when there is none. A provider's "retry now" (0, or a
    date already past) is the shortest wait, never the default."""
    if seconds is None or not math.isfinite(seconds):
        return default
    return max(0.0, seconds)


@dataclass(frozen=True)
class Policy:
    """One breaker's thresholds. The whole fleet must share the same policy per scope.

    Trips when, in the last `window_s`, at least `min_calls_in_window` calls ended as
    SUCCESS or FAILURE and the failure share reached `failure_rate_threshold`; or after
    `consecutive_failures_threshold` failures in a row. The first break lasts `break_s`;
    each failed probe doubles it up to `max_break_s`, minus up to `break_jitter_ratio`
    of it at random. Half-open admits `probes` probe calls fleet-wide, each slot held
    for at most `probe_ttl_s`.
    """

    window_s: float = 30.0
    min_calls_in_window: int = 10
    failure_rate_threshold: float = 0.5
    consecutive_failures_threshold: int = 5
    break_s: float = 10.0
    max_break_s: float = 300.0
    break_jitter_ratio: float = 0.2
    probe_ttl_s: float = 30.0
    probes: int = 1

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidPolicyError(f"Policy.{field.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise InvalidPolicyError(
                    f"Policy.{field.name} must be finite and >= 0, got {value}"
                )
        positive = ("window_s", "break_s", "probe_ttl_s", "probes", "min_calls_in_window")
        for name in (*positive, "consecutive_failures_threshold"):
            if getattr(self, name) <= 0:
                raise InvalidPolicyError(f"Policy.{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.failure_rate_threshold <= 1:
            raise InvalidPolicyError("Policy.failure_rate_threshold must be in (0, 1]")
        if not 0 <= self.break_jitter_ratio < 1:
            raise InvalidPolicyError("Policy.break_jitter_ratio must be in [0, 1)")
        if self.max_break_s < self.break_s:
            raise InvalidPolicyError("Policy.max_break_s must be >= Policy.break_s")
        for name in ("min_calls_in_window", "consecutive_failures_threshold", "probes"):
            if not isinstance(getattr(self, name), int):
                raise InvalidPolicyError(f"Policy.{name} must be an integer")

    @property
    def state_ttl_s(self) -> float:
        """How long an idle breaker's keys outlive their last write."""
        return 2 * max(self.window_s, self.max_break_s) + self.probe_ttl_s

    def lua_args(self) -> list[int]:
        """The policy as the integers `record.lua` reads (ms and parts per million)."""
        return [
            _ms(self.window_s),
            self.min_calls_in_window,
            round(self.failure_rate_threshold * 1_000_000),
            self.consecutive_failures_threshold,
            _ms(self.break_s),
            _ms(self.max_break_s),
            round(self.break_jitter_ratio * 1_000_000),
            _ms(self.state_ttl_s),
        ]


@dataclass(frozen=True)
class CooldownPolicy:
    """Cooldown of a rate-limited (account, model) pair, TTL of an exhausted mark, and how
    long a pair whose model the provider does not know is skipped (`gone_s`)."""

    default_cooldown_s: float = 30.0
    max_cooldown_s: float = 600.0
    exhausted_ttl_s: float = 900.0
    # Long enough that a retired model costs the fleet one failed call an hour, short
    # enough that a deployment restored by a person is used again the same day.
    gone_s: float = 3600.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidPolicyError(f"CooldownPolicy.{field.name} must be a number")
            if not math.isfinite(value) or value <= 0:
                raise InvalidPolicyError(f"CooldownPolicy.{field.name} must be finite and > 0")
        if self.default_cooldown_s > self.max_cooldown_s:
            raise InvalidPolicyError("CooldownPolicy.default_cooldown_s must be <= max_cooldown_s")

    def cooldown_ms(self, seconds: float | None) -> int:
        """The cooldown to apply for a Retry-After of `seconds` (None: the default; 0: the
        shortest, 1 ms), capped."""
        return _ms(min(_or_default(seconds, self.default_cooldown_s), self.max_cooldown_s))

    def gone_ms(self) -> int:
        """How long a `Gone` pair is skipped."""
        return _ms(self.gone_s)

    def exhausted_ms(self, seconds: float | None) -> int:
        """The TTL of an exhausted mark (None: the configured one; 0: the shortest, 1 ms)."""
        return _ms(_or_default(seconds, self.exhausted_ttl_s))
