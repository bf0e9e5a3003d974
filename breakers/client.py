"""Redis clients for the control path: short timeouts, no retries, nothing at import time."""

from __future__ import annotations

from typing import cast

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["DEFAULT_TIMEOUT_S", "connect", "in_memory"]

DEFAULT_TIMEOUT_S = 0.25


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Redis:
    """A client whose connect and each read give up after `timeout_s`, never retrying.

    Creating it opens no connection; the first command does.
    """
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


def in_memory() -> Redis:
    """A private in-process Redis (fakeredis with Lua), for local breakers and the demo."""
    import fakeredis

    return cast(Redis, fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
