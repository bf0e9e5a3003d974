"""Redis slow or down: local breakers answer within the short timeout; the fleet is rejoined."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlparse

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from structlog.testing import capture_logs

from breakers import (
    BreakerState,
    Cooldown,
    FleetBreakers,
    KillSwitch,
    Outcome,
    Policy,
    ResilientBreakers,
    TransitionKind,
    Verdict,
    connect,
    in_memory,
)
from tests.netkit import free_port

V = Verdict

SCOPE = "vendor:openai"
POLICY = Policy(min_calls_in_window=3, break_s=0.2, probe_ttl_s=1)
TIMEOUT_S = 0.2
# What a loaded machine may add to a call bounded by TIMEOUT_S (its loop, its scheduler).
SLACK_S = 0.25


class Proxy:
    """A TCP proxy to Redis that the test can stop (Redis gone) and start again."""

    def __init__(self, target: str, port: int, *, silent: bool = False) -> None:
        parsed = urlparse(target)
        self.host, self.target_port = parsed.hostname or "127.0.0.1", parsed.port or 6379
        self.port, self.silent = port, silent
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self.silent:  # accepts, reads, never answers: a hung Redis
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):
                    pass
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        self._writers.add(up_writer)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


@pytest.fixture
async def dead_redis() -> AsyncIterator[Redis]:
    client = connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=TIMEOUT_S)
    yield client
    await client.aclose()


async def until(check: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Wait (on the loop, so timers run) until `check()` is true."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


async def timed(coro_fn: object) -> float:
    start = time.perf_counter()
    await coro_fn  # type: ignore[misc]
    return time.perf_counter() - start


def test_creating_clients_and_stores_never_touches_redis() -> None:
    client = connect(f"redis://127.0.0.1:{free_port()}/0")
    breakers = ResilientBreakers(FleetBreakers(client))
    breakers.check_on(client.pipeline(transaction=False), [SCOPE])  # queued, no loop to look on


async def test_redis_down_serves_local_breakers_within_the_timeout(dead_redis: Redis) -> None:
    breakers = ResilientBreakers(
        FleetBreakers(dead_redis, policy=POLICY), timeout_s=TIMEOUT_S, rejoin_check_s=0.2
    )
    worst = 0.0
    with capture_logs() as logs:
        for _ in range(3):
            start = time.perf_counter()
            fleet = await breakers.check([SCOPE], [("acct", "m")], ["acct"])
            worst = max(worst, time.perf_counter() - start)
            assert fleet.fleet_view is False
            assert fleet.kill_switch is None
            assert fleet.scopes[SCOPE].state is BreakerState.CLOSED
        await asyncio.sleep(0.25)  # the rejoin timer asked Redis, which still does not answer
        transitions = []
        for verdict in (V.FAILURE, V.SUCCESS, V.FAILURE):
            start = time.perf_counter()
            transitions += await breakers.record([Outcome(SCOPE, verdict)])
            worst = max(worst, time.perf_counter() - start)
    assert worst < TIMEOUT_S + SLACK_S
    assert [t.kind for t in transitions] == [TransitionKind.OPENED]  # same rules, locally
    assert (await breakers.check([SCOPE])).scopes[SCOPE].state is BreakerState.OPEN
    assert [e["event"] for e in logs] == ["breakers.fleet_view_lost"]
    assert logs[0]["error"] == "ConnectionError"


async def test_hung_redis_costs_at_most_the_timeout_then_nothing(redis_url: str) -> None:
    hung = Proxy(redis_url, free_port(), silent=True)
    await hung.start()
    client = connect(f"redis://127.0.0.1:{hung.port}/0", timeout_s=TIMEOUT_S)
    breakers = ResilientBreakers(FleetBreakers(client), timeout_s=TIMEOUT_S, rejoin_check_s=30)
    try:
        first = await timed(breakers.check([SCOPE]))
        later = [await timed(breakers.record([Cooldown("acct", "m")])) for _ in range(5)]
    finally:
        await client.aclose()
        await hung.stop()
    assert TIMEOUT_S * 0.9 < first < TIMEOUT_S + SLACK_S
    assert max(later) < TIMEOUT_S / 2  # while lost, a turn does not even try the fleet
    assert not breakers.fleet_view


async def test_fleet_view_is_lost_then_rejoined_logging_once_each(
    redis_url: str, namespace: str
) -> None:
    proxy = Proxy(redis_url, free_port())
    await proxy.start()
    client = connect(f"redis://127.0.0.1:{proxy.port}/0", timeout_s=TIMEOUT_S)
    fleet = FleetBreakers(client, namespace=namespace, policy=POLICY)
    breakers = ResilientBreakers(fleet, timeout_s=TIMEOUT_S, rejoin_check_s=0.2)
    try:
        with capture_logs() as logs:
            await breakers.record([Outcome(SCOPE, V.FAILURE)] * 3)
            assert (await breakers.check([SCOPE])).fleet_view
            await proxy.stop()
            for _ in range(3):
                state = await breakers.check([SCOPE])
                assert not state.fleet_view
                assert state.scopes[SCOPE].state is BreakerState.CLOSED  # local view is fresh
            await proxy.start()
            await asyncio.sleep(0.3)
            assert breakers.fleet_view  # rejoined by the timer, before any turn asked
            state = await breakers.check([SCOPE])
            assert state.fleet_view
            assert state.scopes[SCOPE].state is not BreakerState.CLOSED  # the fleet's breaker
        assert [e["event"] for e in logs] == [
            "breakers.fleet_view_lost",
            "breakers.fleet_view_rejoined",
        ]
    finally:
        await client.aclose()
        await proxy.stop()


async def test_local_breakers_start_empty_at_each_outage(redis_url: str, namespace: str) -> None:
    """What they learned in the last outage is stale: the fleet has closed that breaker."""
    proxy = Proxy(redis_url, free_port())
    await proxy.start()
    client = connect(f"redis://127.0.0.1:{proxy.port}/0", timeout_s=TIMEOUT_S)
    policy = Policy(min_calls_in_window=3, break_s=60, max_break_s=60)
    fleet = FleetBreakers(client, namespace=namespace, policy=policy)
    breakers = ResilientBreakers(fleet, timeout_s=TIMEOUT_S, rejoin_check_s=0.2)
    try:
        assert (await breakers.check([SCOPE])).fleet_view
        await proxy.stop()
        await breakers.record([Outcome(SCOPE, V.FAILURE)] * 3)
        first = await breakers.check([SCOPE])
        assert not first.fleet_view
        assert first.scopes[SCOPE].state is BreakerState.OPEN  # a local break of 60 s
        await proxy.start()
        await until(lambda: breakers.fleet_view)  # the timer rejoins
        assert (await breakers.check([SCOPE])).scopes[SCOPE].state is BreakerState.CLOSED
        await proxy.stop()
        second = await breakers.check([SCOPE])
        assert not second.fleet_view
        assert second.scopes[SCOPE].state is BreakerState.CLOSED
    finally:
        breakers.close()
        await client.aclose()
        await proxy.stop()


async def test_a_redis_restart_is_not_taken_for_an_outage(redis_url: str, namespace: str) -> None:
    """Every pooled connection dies with a restart: the next command reconnects once."""
    proxy = Proxy(redis_url, free_port())
    await proxy.start()
    client = connect(f"redis://127.0.0.1:{proxy.port}/0", timeout_s=TIMEOUT_S)
    breakers = ResilientBreakers(FleetBreakers(client, namespace=namespace, policy=POLICY))
    try:
        with capture_logs() as logs:
            await asyncio.gather(*(breakers.check([SCOPE]) for _ in range(5)))
            await proxy.stop()  # closes every connection, as a restarting Redis does
            await proxy.start()
            states = await asyncio.gather(*(breakers.check([SCOPE]) for _ in range(5)))
        assert all(state.fleet_view for state in states)
        assert logs == []
    finally:
        await client.aclose()
        await proxy.stop()


async def test_the_kill_switch_stays_as_the_fleet_last_showed_it_while_lost(
    redis_url: str, namespace: str
) -> None:
    proxy = Proxy(redis_url, free_port())
    await proxy.start()
    client = connect(f"redis://127.0.0.1:{proxy.port}/0", timeout_s=TIMEOUT_S)
    breakers = ResilientBreakers(FleetBreakers(client, namespace=namespace, policy=POLICY))
    switch = KillSwitch(client, namespace=namespace)
    try:
        await switch.on("alice", "incident 7")
        assert (await breakers.check([SCOPE])).kill_switch is not None
        await proxy.stop()
        state = await breakers.check([SCOPE])
        assert not state.fleet_view
        assert state.kill_switch is not None
        assert state.kill_switch.who == "alice"
    finally:
        await proxy.start()
        await switch.off("alice")
        await client.aclose()
        await proxy.stop()


async def test_pipelined_parser_given_the_pipeline_error_answers_locally(
    dead_redis: Redis,
) -> None:
    breakers = ResilientBreakers(FleetBreakers(dead_redis, policy=POLICY), timeout_s=TIMEOUT_S)
    async with dead_redis.pipeline(transaction=False) as pipe:
        parse_check = breakers.check_on(pipe, [SCOPE])
        parse_record = breakers.record_on(pipe, [Outcome(SCOPE, V.FAILURE)] * 3)
        with pytest.raises(RedisConnectionError) as raised:
            await pipe.execute()
    fleet = await parse_check(raised.value)
    assert not fleet.fleet_view
    assert [t.kind for t in await parse_record(raised.value)] == [TransitionKind.OPENED]
    assert not breakers.fleet_view


async def test_a_forgotten_script_is_reloaded_without_losing_the_fleet_view() -> None:
    """After a Redis restart (SCRIPT FLUSH) the fleet answers again at once, not locally."""
    redis = in_memory()
    breakers = ResilientBreakers(FleetBreakers(redis, policy=POLICY), timeout_s=TIMEOUT_S)
    await breakers.record([Outcome(SCOPE, V.FAILURE)] * 3)
    await redis.script_flush()
    async with redis.pipeline(transaction=False) as pipe:
        parse_check = breakers.check_on(pipe, [SCOPE])
        replies = await pipe.execute(raise_on_error=False)
    fleet = await parse_check(replies[0])
    assert fleet.fleet_view
    assert breakers.fleet_view
    assert fleet.scopes[SCOPE].state is BreakerState.OPEN
    await redis.aclose()


async def test_local_breakers_serve_hundreds_of_turns_at_once(dead_redis: Redis) -> None:
    """While Redis is down every turn of a process leans on the local store at once."""
    breakers = ResilientBreakers(FleetBreakers(dead_redis, policy=POLICY), timeout_s=TIMEOUT_S)
    await breakers.check([SCOPE])  # loses the fleet view
    states = await asyncio.gather(*(breakers.check([SCOPE]) for _ in range(500)))
    assert all(not s.fleet_view for s in states)
    await asyncio.gather(*(breakers.record([Outcome(SCOPE, V.SUCCESS)]) for _ in range(500)))


async def test_every_check_that_meets_an_emptied_store_sees_the_switch_restored(
    redis_url: str, namespace: str
) -> None:
    """Checks in flight together with the one that notices the reset run no turn either."""
    client = connect(redis_url, timeout_s=2.0)
    breakers = ResilientBreakers(FleetBreakers(client, namespace=namespace, policy=POLICY))
    switch = KillSwitch(client, namespace=namespace)
    try:
        await switch.on("alice", "incident 12")
        # Twenty checks at once, first on a full store: the pool has a connection for each.
        seen = await asyncio.gather(*(breakers.check([SCOPE]) for _ in range(20)))
        assert all(s.kill_switch is not None for s in seen)
        await client.delete(*[k async for k in client.scan_iter(match=f"{{{namespace}}}:*")])
        states = await asyncio.gather(*(breakers.check([SCOPE]) for _ in range(20)))
        assert [s.kill_switch is not None for s in states] == [True] * 20
        assert breakers.resets == 1
        # A person's off is final: no check turns it back on.
        await switch.off("alice")
        assert (await breakers.check([SCOPE])).kill_switch is None
    finally:
        await client.aclose()
