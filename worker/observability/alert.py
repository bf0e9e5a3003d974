"""Alerts in the workers' own logs: the fallback rate, and a model the provider says is gone.

The fallback-rate alert is the share of turns with step >= 1 over a sliding window, per
process. One warning `fallback_rate.above_threshold` when the rate crosses the threshold,
one `fallback_rate.recovered` when it falls back under; nothing in between. A
window with fewer than `min_turns` turns never alerts: 1 fallback in 2 turns is
noise, not a 50 % fallback rate. Prometheus computes the fleet-wide rate from
`relevo_turns_total`; this is the process's own early warning in its logs.

`model_gone` logs `model.not_found` at error level each time a provider answers that a
configured model does not exist (retired, misspelt, deployment deleted): the fleet
skips it and falls back, but only a person can fix the chain. Prometheus alerts on
`relevo_model_not_found_total`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

__all__ = ["FallbackWatch", "model_gone"]

log = structlog.get_logger("relevo.metrics")

_BUCKETS = 60


def model_gone(model: str, provider: str, provider_model: str, detail: str) -> None:
    """A provider does not know a model of the chain: a person must change the chain."""
    log.error(
        "model.not_found",
        model=model,
        provider=provider,
        provider_model=provider_model,
        detail=detail,
        action="the provider no longer serves this model: update the chain's configuration",
    )


@dataclass(slots=True)
class _Bucket:
    index: int
    turns: int = 0
    fallbacks: int = 0


class FallbackWatch:
    """Counts turns and fallbacks in time buckets; logs once per threshold crossing."""

    def __init__(
        self,
        *,
        threshold: float = 0.10,
        window_s: float = 300.0,
        min_turns: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < threshold < 1:
            raise ValueError("threshold must be within (0, 1)")
        if window_s <= 0 or min_turns < 1:
            raise ValueError("window_s must be positive and min_turns at least 1")
        self.threshold = threshold
        self.window_s = window_s
        self.min_turns = min_turns
        self.clock = clock
        # A fixed number of buckets: memory stays flat however many turns a second run.
        self._bucket_s = window_s / _BUCKETS
        self._buckets: deque[_Bucket] = deque()
        self._turns = 0
        self._fallbacks = 0
        self.alerting = False
        self._lock = threading.Lock()

    def record(self, fell_back: bool) -> float:
        """Count one turn; returns the rate over the window (0.0 when it is empty)."""
        with self._lock:
            index = math.floor(self.clock() / self._bucket_s)
            self._expire(index)
            if not self._buckets or self._buckets[-1].index != index:
                self._buckets.append(_Bucket(index))
            bucket = self._buckets[-1]
            bucket.turns += 1
            self._turns += 1
            if fell_back:
                bucket.fallbacks += 1
                self._fallbacks += 1
            rate = self._fallbacks / self._turns
            self._judge(rate)
            return rate

    def rate(self) -> float:
        """The rate over the window now, without counting a turn."""
        with self._lock:
            self._expire(math.floor(self.clock() / self._bucket_s))
            return self._fallbacks / self._turns if self._turns else 0.0

    def _expire(self, index: int) -> None:
        while self._buckets and self._buckets[0].index <= index - _BUCKETS:
            old = self._buckets.popleft()
            self._turns -= old.turns
            self._fallbacks -= old.fallbacks

    def _judge(self, rate: float) -> None:
        if self._turns < self.min_turns:
            return
        fields = {
            "rate": round(rate, 4),
            "threshold": self.threshold,
            "turns": self._turns,
            "fallbacks": self._fallbacks,
            "window_s": self.window_s,
        }
        if not self.alerting and rate > self.threshold:
            self.alerting = True
            log.warning("fallback_rate.above_threshold", **fields)
        elif self.alerting and rate <= self.threshold:
            self.alerting = False
            log.info("fallback_rate.recovered", **fields)
