"""Redis clients for the control path: short timeouts, nothing at import time.

A command is never retried on a timeout (the control path's latency bound holds), but
once on a connection that turns out closed: after Redis restarts, every pooled
connection is dead, and the first command on each must not be taken for an outage.

A ``redis+cluster://`` (or ``rediss+cluster://``) URL names one node of a Redis Cluster:
the client finds the others, sends each command to the node of its key's slot and splits
a pipeline into one packet per node, sent concurrently.
"""

from __future__ import annotations

from typing import Any, cast

import hiredis
from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError

from breakers.sentinel import is_sentinel, sentinel_client

__all__ = ["DEFAULT_MAX_CONNECTIONS", "DEFAULT_TIMEOUT_S", "connect", "in_memory", "is_cluster"]

DEFAULT_TIMEOUT_S = 0.25
# Hundreds of turns share one process's pool; each holds a connection for one
# round trip. Past this many at once, callers wait (up to the timeout) for one
# rather than failing at once as redis-py's default pool of 100 does.
DEFAULT_MAX_CONNECTIONS = 256
_CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster(url: str) -> bool:
    """Whether `url` names a node of a Redis Cluster (``redis+cluster://host:port``)."""
    return url.startswith(_CLUSTER_SCHEMES)


def connect(
    url: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    timed_by_caller: bool = False,
    sentinel_master: str | None = None,
) -> Redis:
    """A client whose connect, each read and each wait for a pooled connection give up
    after `timeout_s`; a dead connection is replaced and its command sent again, once.

    With `timed_by_caller`, reads and writes have no timeout of their own: the caller
    bounds each round trip as a whole (redis-py otherwise arms a timer per reply and
    a task per write). A `sentinel://` URL needs `sentinel_master`, the name of the
    primary the sentinels watch (`breakers.sentinel`). Creating a client opens no
    connection; the first command does.
    """
    options: dict[str, Any] = {
        "socket_timeout": None if timed_by_caller else timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    }
    if is_sentinel(url):
        if not sentinel_master:
            raise ValueError("a sentinel:// URL needs the name of the primary (sentinel_master)")
        # Sentinel's pool does not wait for a free connection: give it room instead.
        return sentinel_client(url, sentinel_master, max_connections=100_000, **options)
    if is_cluster(url):
        return _cluster_client(url, max_connections, options)
    # As `from_url` does, but the class is always ours: redis-py releases disagree on
    # whether a class passed beside a URL overrides the one its scheme names.
    address: dict[str, Any] = dict(parse_url(url))
    address["connection_class"] = packing_connection_class(address)
    pool = BlockingConnectionPool(
        max_connections=max_connections, timeout=timeout_s, **options, **address
    )
    return Redis.from_pool(pool)  # the client owns the pool: aclose() closes both


def _cluster_client(url: str, max_connections: int, options: dict[str, Any]) -> Redis:
    """A Redis Cluster client; typed as `Redis`, whose commands and pipelines it has."""
    plain = url.replace("+cluster://", "://", 1)
    cluster = RedisCluster.from_url(
        plain,
        max_connections=max_connections,
        **options,
    )
    return cast(Redis, cluster)


def packing_connection_class(address: dict[str, Any]) -> type[AbstractConnection]:
    """The connection class redis-py names for a parsed URL (TCP, TLS or a Unix socket),
    packing its commands with hiredis.

    A plain class for a ``rediss://`` URL would be handed TLS options it does not take.
    """
    return _PACKING[address.get("connection_class", Connection)]


class _HiredisPacking(AbstractConnection):
    """Packs commands with hiredis (in C).

    redis-py's synchronous client already packs with hiredis; its asyncio client
    packs in Python, which was a fifth of the guard's CPU (its scripts take dozens
    of keys and arguments).
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        # As redis-py does: a command name with a space ("CONFIG GET") is two arguments.
        name = args[0]
        if " " in name if isinstance(name, str) else b" " in name:
            args = (*name.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from exc

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(self.pack_command(*command)[0] for command in commands)]


class HiredisPackConnection(_HiredisPacking, Connection):
    """redis-py's asyncio TCP connection, packing commands with hiredis."""


class HiredisPackSSLConnection(_HiredisPacking, SSLConnection):
    """redis-py's asyncio TLS connection (``rediss://``), packing commands with hiredis."""


class HiredisPackUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    """redis-py's asyncio Unix-socket connection (``unix://``), packing commands with hiredis."""


_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: HiredisPackConnection,
    SSLConnection: HiredisPackSSLConnection,
    UnixDomainSocketConnection: HiredisPackUnixConnection,
}


def in_memory() -> Redis:
    """A private in-process Redis (fakeredis with Lua), for local breakers and the demo."""
    import fakeredis

    # Every turn of a process may lean on it at once while Redis is down: a pool
    # as small as redis-py's default (100) would fail turns instead of serving them.
    fake = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), max_connections=100_000)
    return cast(Redis, fake)
