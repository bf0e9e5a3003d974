"""The backlog of store writes a worker keeps while Redis is away."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError

from worker.guard.backlog import Backlog


async def test_writes_land_once_in_order_and_the_pending_spend_follows_them() -> None:
    landed: list[str] = []
    down = True

    def write(name: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            if down:
                raise RedisConnectionError("down")
            landed.append(name)

        return send

    backlog = Backlog(retry_every_s=3600)
    backlog.add("spend:acme:t1:0", "spend", write("a"), micros=100, tenant="acme")
    backlog.add("spend:acme:t2:0", "spend", write("b"), micros=50, tenant="acme")
    backlog.add("spend:acme:t1:0", "spend", write("a2"), micros=120, tenant="acme")  # replaces
    backlog.add("result:t3", "result", write("r"))
    assert backlog.pending_micros("acme") == 170
    assert not await backlog.flush()
    assert (len(backlog), landed) == (3, [])
    down = False
    assert await backlog.flush()
    assert landed == ["a2", "b", "r"]
    assert backlog.pending_micros("acme") == 0
    await backlog.aclose()


async def test_a_full_backlog_refuses_and_counts() -> None:
    async def never() -> None:
        raise RedisConnectionError("down")

    backlog = Backlog(retry_every_s=3600, max_items=1)
    backlog.add("result:a", "result", never)
    backlog.add("result:b", "result", never)
    assert (len(backlog), backlog.dropped) == (1, 1)
    await backlog.aclose()


async def test_a_refused_write_is_kept_and_the_writes_after_it_land() -> None:
    """Redis refusing one write (an ACL denying it) keeps it, first in line, and holds
    up none of the writes after it."""
    landed: list[str] = []
    refused = True

    def write(name: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            if refused and name == "held":
                raise NoPermissionError("this user has no permissions to run the 'xadd' command")
            landed.append(name)

        return send

    backlog = Backlog(retry_every_s=3600)
    backlog.add("hold:t1", "hold", write("held"))
    backlog.add("spend:acme:t2:0", "spend", write("spend"), micros=70, tenant="acme")
    assert not await backlog.flush()
    assert (len(backlog), landed) == (1, ["spend"])
    assert not await backlog.flush()  # refused again: still kept
    assert len(backlog) == 1
    backlog.add("spend:acme:t3:0", "spend", write("spend 2"), micros=30, tenant="acme")
    assert backlog.pending_micros("acme") == 30
    refused = False
    assert await backlog.flush()
    assert landed == ["spend", "held", "spend 2"]  # the refused write first in line
    assert backlog.pending_micros("acme") == 0
    await backlog.aclose()
