"""The Redis plumbing every room shares, one way for each mechanism.

- Failures: `store_errors` turns what redis-py raises into `StoreError`
  (`StoreUnavailableError`, `StoreForbiddenError`) at one boundary (`rediskit.errors`).
- Scripts: `LuaScripts` runs ``.lua`` files by SHA1, sync or async, NOSCRIPT handled once
  (`rediskit.scripts`).
- Keys: `hash_tag`, and `check_name` with a `NameRule` per kind of name (`rediskit.names`).
- Replies, time and waits: `text`, `raise_if_error`, `read_clock`, `ManualClock`,
  `backoff_s`.

It imports none of `breakers`, `budgets` or `worker`; they all import it.
"""

from __future__ import annotations

from rediskit.backoff import backoff_s
from rediskit.clock import ManualClock
from rediskit.errors import (
    BLIPS,
    DOWN,
    FAILED,
    FORBIDDEN_ERRORS,
    REFUSED,
    STORE_ERRORS,
    StoreError,
    StoreForbiddenError,
    StoreUnavailableError,
    raise_if_forbidden,
    refused,
    store_errors,
)
from rediskit.names import NAMESPACE, NameRule, check_name, hash_tag
from rediskit.replies import Parse, raise_if_error, read_clock, text
from rediskit.scripts import LuaScripts

__all__ = [
    "BLIPS",
    "DOWN",
    "FAILED",
    "FORBIDDEN_ERRORS",
    "NAMESPACE",
    "REFUSED",
    "STORE_ERRORS",
    "LuaScripts",
    "ManualClock",
    "NameRule",
    "Parse",
    "StoreError",
    "StoreForbiddenError",
    "StoreUnavailableError",
    "backoff_s",
    "check_name",
    "hash_tag",
    "raise_if_error",
    "raise_if_forbidden",
    "read_clock",
    "refused",
    "store_errors",
    "text",
]
