"""While Redis stalls, a tenant starts offline only within the room it had when the process
last heard from Redis: a strict tenant with nothing left starts nothing.

The stall is `DEBUG SLEEP` on a redis-server of the test's own (never the shared one).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import redis

import budgets
from tests.chainkit import KEY
from tests.test_store_faults import configured, read_books, run, worst_case
from worker.fleet.heartbeat import Heartbeat, beat, share_rooms
from worker.fleet.runner import TurnRunner
from worker.fleet.turnstore import TurnKeys
from worker.guard.allowance import OfflineAllowance
from worker.guard.backlog import Backlog
from worker.guard.protocol import Charge, Refusal
from worker.settings import RedisSettings
from worker.simulator import Fault, Simulator
from worker.types import Status

STALL_S = 4


def set_limits(url: str, namespace: str, micros: int) -> None:
    async def write() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            await budgets.Ledger(client, namespace=namespace).set_limits("acme", micros, micros)
        finally:
            await client.aclose()

    asyncio.run(write())


@contextmanager
def stalled_for(url: str, seconds: int) -> Iterator[None]:
    """`DEBUG SLEEP seconds` on `url`, sent from a thread of its own: entered once the
    server has stalled, left once it answers again."""
    client = redis.Redis.from_url(url, socket_timeout=seconds + 10)
    thread = threading.Thread(target=client.execute_command, args=("DEBUG", "SLEEP", seconds))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not stalled(url):
            assert time.monotonic() < deadline, "the server did not stall"
        yield
    finally:
        thread.join(seconds + 10)
        client.close()


def stalled(url: str) -> bool:
    probe = redis.Redis.from_url(url, socket_timeout=0.3)
    try:
        probe.ping()
    except redis.TimeoutError:
        return True
    finally:
        probe.close()
    return False


@pytest.mark.slow
def test_a_stall_admits_nothing_offline_for_a_strict_tenant_with_no_room(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 4 s stall, 50 turns at once: without the room, the $1 allowance let all 50 run."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, _ = private_redis
    # The first turn must hear Redis: a fresh runner's first round trips (its scripts too)
    # outlasted 0.25 s on a loaded machine, and that turn ran offline. A second still tells
    # the stall (4 s) from an answer.
    redis_config = {"url": url, "namespace": namespace, "timeout_s": 1.0}
    config = configured(sim, redis_config | {"rejoin_check_s": 0.2})
    assert config.budgets.offline_allowance_micros() == 1_000_000  # the default, $1
    limit = 500
    assert worst_case(config, "openai/alpha") > limit  # a strict tenant with no room
    set_limits(url, namespace, limit)
    runner = TurnRunner(config)
    try:
        (heard,) = run(runner, 1)
        assert heard.reason == budgets.RefusalReason.TENANT_BUDGET_EXHAUSTED
        with stalled_for(url, STALL_S), ThreadPoolExecutor(50) as threads:
            during = list(threads.map(lambda _: run(runner, 1)[0], range(50)))
        deadline = time.monotonic() + 10
        while len(runner.guard.backlog) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.close()
    assert [r.status for r in during] == [Status.DEGRADED] * 50
    assert any(r.reason == Refusal.BUDGET_UNREACHABLE for r in during)  # decided offline
    assert sim.calls("alpha") == 0
    _, spent = read_books(RedisSettings(url=url, namespace=namespace), [])
    assert spent == 0


@pytest.mark.slow
def test_offline_a_tenant_starts_no_more_than_its_room(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room for two worst cases when Redis stopped: two of twelve calls start offline,
    however large the allowance ($1, room for all twelve)."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, proc = private_redis
    redis_config = {"url": url, "namespace": namespace, "timeout_s": 0.25, "rejoin_check_s": 0.2}
    config = configured(sim, redis_config)
    worst = worst_case(config, "openai/alpha")
    set_limits(url, namespace, 3 * worst + worst // 2)
    runner = TurnRunner(config)
    try:
        run(runner, 2)  # the second reservation's reply carries the room
        proc.send_signal(signal.SIGSTOP)
        sim.set_faults("alpha", Fault(latency_s=1.0))  # in flight together
        with ThreadPoolExecutor(12) as threads:
            offline = list(threads.map(lambda _: run(runner, 1)[0], range(12)))
    finally:
        proc.send_signal(signal.SIGCONT)
        runner.close()
    statuses = sorted(r.status for r in offline)
    started = statuses.count(Status.OK)
    # The second reservation's room: 3.5 worst cases, less the first turn's cost and its
    # own worst case, so two fit; the allowance alone would have started all twelve.
    assert started == 2, statuses
    assert {r.reason for r in offline if r.status is Status.DEGRADED} == {
        Refusal.BUDGET_UNREACHABLE
    }
    assert sim.calls("alpha") == 2 + 2


def charge(n: int, tenant: str = "acme") -> Charge:
    return Charge(f"turn-1:run:{n}", tenant, "oa", 1_000, False, 3_000)


async def test_the_allowance_is_the_least_of_itself_and_the_room_last_heard() -> None:
    backlog = Backlog(retry_every_s=3600)
    allowance = OfflineAllowance(1_000_000, backlog)
    # Never heard about: the allowance (shared among the processes, below).
    assert allowance.room("acme") == 1_000_000
    allowance.heard("acme", 2 * 3_000 + 500)
    assert [allowance.admit(charge(n)) for n in range(1, 4)] == [
        None,
        None,
        Refusal.BUDGET_UNREACHABLE,
    ]
    allowance.heard("broke", 0)
    assert allowance.admit(charge(5, "broke")) is Refusal.BUDGET_UNREACHABLE
    allowance.heard("rich", 10**12)
    assert allowance.room("rich") == 1_000_000  # the allowance caps it
    # Four live processes share the room: each may admit a quarter of it.
    allowance.processes = 4
    allowance.heard("acme", 4 * (3_000 + 500))
    assert allowance.room("acme") == 3_500
    assert allowance.room("stranger") == 250_000
    await backlog.aclose()


@pytest.mark.slow
def test_a_worker_shares_a_room_with_the_live_processes_its_heartbeat_counts(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    url, _ = private_redis
    config = configured(sim, {"url": url, "namespace": namespace, "timeout_s": 0.25})
    runner = TurnRunner(config)
    try:
        other = Heartbeat(
            host="elsewhere", pid=7, version="x", in_flight=0, local_breakers=False, started_ms=0
        )
        asyncio.run(beat_on(url, namespace, other))  # another live process of the fleet
        on_loop = asyncio.run_coroutine_threadsafe(runner.process.announce(), runner.loop.loop)
        on_loop.result(timeout=10)
        assert runner.guard.offline.processes == 2
    finally:
        runner.close()


async def beat_on(url: str, namespace: str, heartbeat: Heartbeat) -> None:
    client = redis.asyncio.Redis.from_url(url)
    try:
        await beat(client, TurnKeys(namespace), heartbeat)
    finally:
        await client.aclose()


async def test_a_reservation_reply_says_the_room_left(redis_url: str, namespace: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        ledger = budgets.Ledger(client, namespace=namespace)
        await ledger.set_limits("acme", 10_000, 50_000, overdraft_micros=1_000)
        one = await ledger.reserve(
            "acme", "c1", provider="p", micros=1_000, fallback=False, ttl_s=60, worst_micros=4_000
        )
        assert isinstance(one, budgets.Reservation)
        assert one.room_micros == 10_000 + 1_000 - 4_000
        await ledger.settle("acme", "c1", 2_500)
        two = await ledger.reserve(
            "acme", "c2", provider="p", micros=1_000, fallback=False, ttl_s=60, worst_micros=9_000
        )
        assert isinstance(two, budgets.Refusal)
        assert two.room_micros == 10_000 + 1_000 - 2_500  # as it stands, this one not held
        replay = await ledger.reserve(
            "acme", "c1", provider="p", micros=1_000, fallback=False, ttl_s=60, worst_micros=4_000
        )
        assert replay.room_micros is None
    finally:
        await client.aclose()


@pytest.mark.slow
def test_a_tenant_with_no_room_in_one_process_starts_nothing_offline_in_another(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Process A heard the strict tenant's room run out; B never served it. Redis stops:
    B's turns degrade. Without the rooms shared at the heartbeat, B gave it the allowance's
    share ($1 / processes) and every turn ran."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, proc = private_redis
    redis_config = {"url": url, "namespace": namespace, "timeout_s": 0.25, "rejoin_check_s": 0.2}
    config = configured(sim, redis_config)
    limit = 500
    assert worst_case(config, "openai/alpha") > limit
    set_limits(url, namespace, limit)
    first, second = TurnRunner(config), TurnRunner(config)
    try:
        (heard,) = run(first, 1)
        assert heard.reason == budgets.RefusalReason.TENANT_BUDGET_EXHAUSTED
        for runner in (first, second):  # each beats once, as every few seconds
            beating = asyncio.run_coroutine_threadsafe(runner.process.announce(), runner.loop.loop)
            beating.result(timeout=10)
        proc.send_signal(signal.SIGSTOP)
        with ThreadPoolExecutor(6) as threads:
            offline = list(threads.map(lambda _: run(second, 1)[0], range(6)))
    finally:
        proc.send_signal(signal.SIGCONT)
        first.close()
        second.close()
    assert [r.status for r in offline] == [Status.DEGRADED] * 6
    assert {r.reason for r in offline} == {Refusal.BUDGET_UNREACHABLE}
    assert sim.calls("alpha") == 0


async def test_the_fleet_shares_a_short_room_until_one_process_hears_it_grow(
    redis_url: str, namespace: str
) -> None:
    """A room heard short in one process reaches the other at their heartbeats, and leaves
    the fleet's record once a process hears it large again (the limit raised)."""
    client = redis.asyncio.Redis.from_url(redis_url)
    backlogs = [Backlog(retry_every_s=3600) for _ in range(2)]
    one, other = (OfflineAllowance(1_000_000, backlog) for backlog in backlogs)
    try:
        one.heard("acme", 0)
        one.heard("rich", 10**9)
        for allowance in (one, other):
            await share_rooms(client, TurnKeys(namespace), allowance)
        assert other.room("acme") == 0
        assert other.room("rich") == other.room("stranger") == 1_000_000
        one.heard("acme", 10**9)
        for allowance in (one, other):
            await share_rooms(client, TurnKeys(namespace), allowance)
        assert other.room("acme") == 1_000_000
        await client.delete(TurnKeys(namespace).offline_rooms)
    finally:
        await client.aclose()
        for backlog in backlogs:
            await backlog.aclose()
