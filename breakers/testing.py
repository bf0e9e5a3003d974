"""Helpers for tests of code that uses breakers: a clock to make breaks and windows elapse.

`ManualClock` is defined once, in `rediskit`, for breakers and budgets alike.
"""

from __future__ import annotations

from rediskit import ManualClock

__all__ = ["ManualClock"]
