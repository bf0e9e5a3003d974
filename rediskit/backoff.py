"""How long to wait before trying again: one jittered exponential backoff for every loop."""

from __future__ import annotations

import math
import random

__all__ = ["backoff_s"]


def backoff_s(
    attempt: int, *, first_s: float, cap_s: float = math.inf, rng: random.Random | None = None
) -> float:
    """Seconds to wait after try `attempt` (0: the first) failed: ``first_s * 2**attempt``,
    at most `cap_s`, drawn between half and all of it.

    The jitter keeps many processes retrying one shared outage from arriving together;
    the half kept keeps the wait from collapsing to nothing."""
    ceiling = min(cap_s, first_s * 2.0 ** min(attempt, 64))  # no float overflow, ever
    return ceiling * (rng or random).uniform(0.5, 1.0)
