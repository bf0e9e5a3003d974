"""The retry layer: how long to wait before trying the same model again, if at all.

Bounded by default (at most one retry per model), jittered, and honouring the
server's Retry-After only when the wait fits both the cap and the turn's
remaining time. Anything else moves the turn on to the next model.
"""

from __future__ import annotations

import random

from rediskit import backoff_s
from worker.errors import ProviderError
from worker.settings import RetrySettings
from worker.turn.policy import Decision

__all__ = ["retry_delay_s"]


def retry_delay_s(
    error: ProviderError,
    decision: Decision,
    *,
    retry_index: int,
    settings: RetrySettings,
    remaining_s: float,
    rng: random.Random,
) -> float | None:
    """Seconds to wait before retrying the same model, or None to move on."""
    if retry_index >= settings.retries_per_model:
        return None
    if decision is Decision.RETRY_THEN_NEXT:
        delay = backoff_s(retry_index, first_s=settings.base_delay_s, rng=rng)
    elif decision is Decision.WAIT_OR_NEXT and error.retry_after_s is not None:
        if error.retry_after_s > settings.retry_after_cap_s:
            return None
        delay = error.retry_after_s
    else:
        return None
    return delay if delay < remaining_s else None
