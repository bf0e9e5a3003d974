"""The Redis kit: one error tree at one boundary, and one backoff, for every room."""

from __future__ import annotations

import random

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError

import breakers
import worker.errors
from rediskit import (
    StoreError,
    StoreForbiddenError,
    StoreUnavailableError,
    backoff_s,
    refused,
    store_errors,
)


def test_every_room_names_the_same_store_errors() -> None:
    """One `except` catches the store's failures whichever package raised them."""
    assert worker.errors.StoreForbidden is breakers.StoreForbiddenError is StoreForbiddenError
    assert worker.errors.StoreUnreachable is breakers.StoreUnavailableError
    assert issubclass(StoreUnavailableError, StoreError)
    assert StoreForbiddenError.code == "store_forbidden"


def test_a_refusal_and_an_outage_leave_the_boundary_as_their_own_class() -> None:
    refusing = pytest.raises(StoreForbiddenError, match="refused this client")
    with refusing as forbidden, store_errors():
        raise NoPermissionError("no permissions to run the 'eval' command")
    assert isinstance(forbidden.value.__cause__, NoPermissionError)
    down = pytest.raises(StoreUnavailableError, match=r"^reading x: Redis did not answer \(Conn")
    with down, store_errors("reading x"):
        raise RedisConnectionError("gone")
    with pytest.raises(StoreUnavailableError, match="Redis did not answer"), store_errors():
        raise ResponseError("OOM command not allowed")


async def test_the_boundary_is_the_same_when_async() -> None:
    with pytest.raises(StoreUnavailableError):
        async with store_errors():
            raise TimeoutError
    inner = StoreUnavailableError("kept")
    with pytest.raises(StoreUnavailableError) as passed:
        async with store_errors("outer"):
            raise inner
    assert passed.value is inner  # translated once, not wrapped again


def test_what_is_no_store_failure_passes_untouched() -> None:
    with pytest.raises(KeyError), store_errors():
        raise KeyError("x")


def test_a_refusal_is_found_under_what_it_became() -> None:
    try:
        with store_errors():
            raise NoPermissionError("no")
    except StoreError as exc:
        wrapped = RuntimeError("wrapped")
        wrapped.__cause__ = exc
    assert refused(wrapped)
    assert not refused(RuntimeError("alone"))
    assert refused(KeyError("x"), also=(KeyError,))


def test_backoff_doubles_to_its_cap_and_keeps_half_of_each_wait() -> None:
    rng = random.Random(7)
    for attempt, ceiling in [(0, 0.05), (1, 0.1), (2, 0.2), (5, 1.0), (50, 1.0), (5000, 1.0)]:
        waits = [backoff_s(attempt, first_s=0.05, cap_s=1.0, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not one value
