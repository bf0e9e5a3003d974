"""Translating Redis failures on paths that have no local fallback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
    RedisError,
)

from breakers.errors import StoreForbiddenError, StoreUnavailableError

__all__ = ["FLEET_ERRORS", "FORBIDDEN_ERRORS", "raise_if_forbidden", "unavailable_as_error"]

# What "Redis is slow or gone" looks like from redis-py and asyncio.
FLEET_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
# What "Redis answered, and said no" looks like: a configuration problem, not an outage.
FORBIDDEN_ERRORS: tuple[type[BaseException], ...] = (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
)


def raise_if_forbidden(exc: BaseException) -> None:
    """Raise `StoreForbiddenError` if Redis refused us rather than failed to answer."""
    if isinstance(exc, FORBIDDEN_ERRORS):
        raise StoreForbiddenError(f"Redis refused this client: {exc}") from exc


@asynccontextmanager
async def unavailable_as_error(what: str) -> AsyncIterator[None]:
    """Raise `StoreUnavailableError` (naming `what`) instead of a redis-py or socket error."""
    try:
        yield
    except FLEET_ERRORS as exc:
        raise_if_forbidden(exc)
        raise StoreUnavailableError(f"{what}: Redis did not answer ({type(exc).__name__})") from exc
