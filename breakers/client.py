"""Redis clients for the control path: short timeouts, no retries, nothing at import time."""

from __future__ import annotations

from typing import cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["DEFAULT_MAX_CONNECTIONS", "DEFAULT_TIMEOUT_S", "connect", "in_memory"]

DEFAULT_TIMEOUT_S = 0.25
# Hundreds of turns share one process's pool; each holds a connection for one
# round trip. Past this many at once, callers wait (up to the timeout) for one
# rather than failing at once as redis-py's default pool of 100 does.
DEFAULT_MAX_CONNECTIONS = 256


def connect(
    url: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> Redis:
    """A client whose connect, each read and each wait for a pooled connection give up
    after `timeout_s`, never retrying.

    Creating it opens no connection; the first command does.
    """
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes both


def in_memory() -> Redis:
    """A private in-process Redis (fakeredis with Lua), for local breakers and the demo."""
    import fakeredis

    # Every turn of a process may lean on it at once while Redis is down: a pool
    # as small as redis-py's default (100) would fail turns instead of serving them.
    fake = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), max_connections=100_000)
    return cast(Redis, fake)
