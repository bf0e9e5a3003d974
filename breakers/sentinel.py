"""Clients for a Redis behind Sentinel: the primary the sentinels name, followed across failovers.

The URL lists the sentinels, Celery's way, and the primary's Sentinel name comes apart:

    sentinel://[user:password@]host:26379;sentinel://host2:26379;sentinel://host3:26379/0

The user and password are the data nodes' (the sentinels themselves are asked without
them); the database is the last chunk's path. A connection asks the sentinels for the
primary when it connects, and a connection to a primary that was demoted is closed and
its command sent again, once, to the new one (`connection.connect`'s retry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

__all__ = ["SentinelAddress", "is_sentinel", "sentinel_client"]

SCHEME = "sentinel"


def is_sentinel(url: str) -> bool:
    """Whether `url` names sentinels rather than one Redis server."""
    return urlsplit(url.split(";", 1)[0]).scheme == SCHEME


@dataclass(frozen=True, slots=True)
class SentinelAddress:
    """What a `sentinel://` URL says: the sentinels, the database and the credentials."""

    sentinels: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> SentinelAddress:
        """Read `url`; ValueError naming what is wrong (the message never holds a password)."""
        hosts: list[tuple[str, int]] = []
        username = password = None
        db = 0
        for chunk in url.split(";"):
            parts = urlsplit(chunk)
            if parts.scheme != SCHEME or not parts.hostname:
                raise ValueError(
                    f"each ';'-separated part must be sentinel://host:port, not {parts.scheme}://…"
                )
            hosts.append((parts.hostname, parts.port or 26379))
            if parts.password is not None and password is None:
                username, password = parts.username or None, unquote(parts.password)
            path = parts.path.strip("/")
            if path:
                if not path.isdigit():
                    raise ValueError(f"the database must be a number, not {path!r}")
                db = int(path)
        return cls(tuple(hosts), db, username and unquote(username), password)


class SentinelRedis(Redis):
    """A client on the primary; closing it also closes its connections to the sentinels."""

    sentinels: Sentinel

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        for client in self.sentinels.sentinels:
            await client.aclose()


def sentinel_client(url: str, master: str, **connection: Any) -> Redis:
    """A client on the primary named `master` by the sentinels of `url`.

    `connection` holds the data connections' options (timeouts, retry, pool size); the
    sentinels are asked with the same timeouts.
    """
    address = SentinelAddress.parse(url)
    timeouts = {k: v for k, v in connection.items() if k.startswith("socket_")}
    # redis-py types Sentinel's constructor in some releases and not in others.
    untyped_sentinel: Any = Sentinel
    manager: Sentinel = untyped_sentinel(list(address.sentinels), sentinel_kwargs=timeouts)
    client: SentinelRedis = manager.master_for(
        master,
        redis_class=SentinelRedis,
        connection_pool_class=SentinelConnectionPool,
        db=address.db,
        username=address.username,
        password=address.password,
        **connection,
    )
    client.sentinels = manager
    return client
