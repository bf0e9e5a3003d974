"""Replies as they come back from redis-py: one pipelined reply at a time, bytes or text."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

__all__ = ["Parse", "raise_if_error", "read_clock", "text"]

T = TypeVar("T")
Parse: TypeAlias = Callable[[object], Awaitable[T]]
"""An async function taking one raw reply (or the exception a pipeline handed over in its
place) and returning the result."""


def read_clock(clock_ms: Callable[[], int] | None) -> int | None:
    """What ARGV[1] carries: the time of a test's clock, or None for the server's TIME."""
    return None if clock_ms is None else int(clock_ms())


def raise_if_error(reply: object) -> Any:
    """Return `reply` unless it is the exception a pipeline handed over in its place."""
    if isinstance(reply, BaseException):
        raise reply
    return reply


def text(value: object) -> str:
    """A reply element as text, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
