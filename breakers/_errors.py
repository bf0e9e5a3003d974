"""Translating Redis failures on paths that have no local fallback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import RedisError

from breakers.errors import StoreUnavailableError

__all__ = ["FLEET_ERRORS", "unavailable_as_error"]

# What "Redis is slow or gone" looks like from redis-py and asyncio.
FLEET_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)


@asynccontextmanager
async def unavailable_as_error(what: str) -> AsyncIterator[None]:
    """Raise `StoreUnavailableError` (naming `what`) instead of a redis-py or socket error."""
    try:
        yield
    except FLEET_ERRORS as exc:
        raise StoreUnavailableError(f"{what}: Redis did not answer ({type(exc).__name__})") from exc
