"""Helpers for tests of code that uses budgets: a clock to drive periods and expiry.

`ManualClock` is defined once, in `rediskit`, for breakers and budgets alike.
"""

from __future__ import annotations

from rediskit import ManualClock

__all__ = ["ManualClock"]
