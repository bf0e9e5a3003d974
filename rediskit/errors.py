"""What the shared store's failures become, in every room: one tree, one boundary.

    StoreError                 a call to Redis failed
    ├── StoreUnavailableError  Redis did not answer: slow, gone, or failing the command
    └── StoreForbiddenError    Redis answered and refused this client (password, ACL)

`store_errors` is the boundary (as httpx's `map_httpcore_exceptions`): inside it, what
redis-py, sockets and asyncio raise (`STORE_ERRORS`) leaves as one of the two. `breakers`
exports them under these names; `worker.errors` under `StoreUnreachable` and
`StoreForbidden`: the same classes, so one ``except`` catches them wherever they came from.
`FAILED`, `DOWN` and `REFUSED` catch a failure on either side of the boundary; `refused` says
whether a failure (or what it was raised from) is Redis refusing us.
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    ConnectionError,
    NoPermissionError,
    RedisError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "BLIPS",
    "DOWN",
    "FAILED",
    "FORBIDDEN_ERRORS",
    "REFUSED",
    "STORE_ERRORS",
    "StoreError",
    "StoreForbiddenError",
    "StoreUnavailableError",
    "raise_if_forbidden",
    "refused",
    "store_errors",
]


class StoreError(Exception):
    """A call to the shared store (Redis) failed; the subclass says how."""


class StoreUnavailableError(StoreError):
    """Redis did not answer in time, or failed the command: a blip or an outage."""


class StoreForbiddenError(StoreError):
    """Redis refused this client (bad password, missing ACL permission).

    A configuration problem, not an outage: never answered from a local view (a worker
    that may not read the kill switch must not carry on as if Redis were merely down).
    """

    code: ClassVar[str] = "store_forbidden"
    """The reason a turn this refusal stopped is reported with."""


# What "Redis is slow, gone or refusing us" looks like from redis-py, sockets and asyncio.
STORE_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
# What "Redis answered, and said no" looks like: a configuration problem, not an outage.
FORBIDDEN_ERRORS: tuple[type[BaseException], ...] = (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
)
# A moment's outage (no connection, no answer in time), worth trying again; a refusal,
# a full memory or a bad command is not.
BLIPS: tuple[type[BaseException], ...] = (ConnectionError, RedisTimeoutError, OSError)
# Either side of the boundary: what redis-py raised, or what `store_errors` made of it.
FAILED: tuple[type[BaseException], ...] = (*STORE_ERRORS, StoreError)
DOWN: tuple[type[BaseException], ...] = (*STORE_ERRORS, StoreUnavailableError)
REFUSED: tuple[type[BaseException], ...] = (*FORBIDDEN_ERRORS, StoreForbiddenError)


class store_errors:  # noqa: N801 - used as a function: `with store_errors("reading x"):`
    """Raise `StoreForbiddenError` or `StoreUnavailableError` in place of a redis-py,
    socket or timeout error; `what` (what was being done) starts the message.

    Sync and async (``with`` or ``async with``). A class, not a generator: it wraps every
    guard call of every turn.
    """

    __slots__ = ("what",)

    def __init__(self, what: str = "") -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, StoreError):
            return
        if isinstance(exc, FORBIDDEN_ERRORS):
            raise StoreForbiddenError(f"Redis refused this client: {exc}") from exc
        if isinstance(exc, STORE_ERRORS):
            said = f"{self.what}: " if self.what else ""
            raise StoreUnavailableError(
                f"{said}Redis did not answer ({type(exc).__name__})"
            ) from exc

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)


def raise_if_forbidden(exc: BaseException) -> None:
    """Raise `StoreForbiddenError` from `exc` if it is Redis refusing us, not failing to
    answer (for a caller that answers an outage itself, and must not answer a refusal)."""
    if isinstance(exc, FORBIDDEN_ERRORS):
        with store_errors():
            raise exc


def refused(exc: BaseException | None, *, also: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether `exc`, or what it was raised from, is Redis refusing this client (or one of
    `also`: another server's refusal, such as RabbitMQ's)."""
    while exc is not None:
        if isinstance(exc, (*REFUSED, *also)):
            return True
        exc = exc.__cause__
    return False
