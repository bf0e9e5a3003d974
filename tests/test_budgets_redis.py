"""The ledger on the real Redis server: server time, and several OS processes racing one budget."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.context import SpawnProcess
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from budgets import Ledger, Refusal, Reservation
from tests import clusterkit
from tests.test_budgets_ledger import lua_periods, python_periods

SPAWN = mp.get_context("spawn")
TENANT = "acme"


@pytest.fixture
async def redis(redis_url: str, namespace: str) -> AsyncIterator[Redis]:
    client = clusterkit.client(redis_url, decode_responses=True)
    yield client
    await clean(client, namespace)
    await client.aclose()


async def clean(client: Redis, namespace: str) -> None:
    """Delete the namespace's keys and its tenants' (one tag each)."""
    for pattern in (f"{{{namespace}}}:*", f"{{{namespace}/*"):
        for key in [key async for key in client.scan_iter(match=pattern, count=1000)]:
            await client.delete(key)


@contextmanager
def processes(target: Any, args_per_process: list[tuple[Any, ...]]) -> Iterator[list[SpawnProcess]]:
    procs = [SPAWN.Process(target=target, args=args, daemon=True) for args in args_per_process]
    for proc in procs:
        proc.start()
    try:
        yield procs
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _collect(queue: Any, count: int) -> list[Any]:
    return [queue.get(timeout=30) for _ in range(count)]


# --- code run inside the child processes -------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What one child process runs: `name` picks the coroutine, `worker` tells children apart."""

    name: str
    url: str
    ns: str
    worker: int


def _child(job: Job, start: Any, out: Any) -> None:
    asyncio.run(_child_main(job, start, out))


async def _child_main(job: Job, start: Any, out: Any) -> None:
    client = clusterkit.client(job.url)
    ledger = Ledger(client, namespace=job.ns)
    await ledger.load_scripts()
    start.wait(timeout=30)
    try:
        out.put(await _JOBS[job.name](ledger, job.worker))
    finally:
        await client.aclose()


async def _turns(ledger: Ledger, worker: int) -> tuple[int, int]:
    """50 concurrent turns: reserve the worst case (150), settle 50-150."""

    async def turn(index: int) -> int:
        charge = f"w{worker}-t{index}:0"
        held = await ledger.reserve(
            TENANT, charge, provider="openai", micros=150, fallback=False, ttl_s=30
        )
        if not held.ok:
            return -1
        await asyncio.sleep(0.001 * (index % 5))
        return (await ledger.settle(TENANT, charge, 50 + index * 37 % 101)).charged_micros

    charged = await asyncio.gather(*(turn(i) for i in range(50)))
    return sum(c for c in charged if c > 0), sum(1 for c in charged if c < 0)


async def _redeliver(ledger: Ledger, worker: int) -> list[tuple[str, int]]:
    """Every process delivers the same 40 charges at once: reserve, then settle."""

    async def turn(index: int) -> tuple[str, int]:
        charge = f"turn-{index}:0"
        await ledger.reserve(
            TENANT, charge, provider="openai", micros=100, fallback=False, ttl_s=30
        )
        return charge, (await ledger.settle(TENANT, charge, 10 + index)).charged_micros

    return list(await asyncio.gather(*(turn(i) for i in range(40))))


async def _reserve_release(ledger: Ledger, worker: int) -> int:
    async def one(index: int) -> int:
        held = await ledger.reserve(
            TENANT, f"w{worker}-{index}", provider="openai", micros=10, fallback=False, ttl_s=30
        )
        released = await ledger.release(TENANT, f"w{worker}-{index}")
        return held.reclaimed + released.reclaimed

    return sum(await asyncio.gather(*(one(i) for i in range(10))))


async def _fallback_storm(ledger: Ledger, worker: int) -> tuple[list[str], int]:
    """20 concurrent fallback attempts at 1000 each, then 10 primary attempts at 500."""

    async def attempt(charge: str, micros: int, fallback: bool) -> Reservation | Refusal:
        held = await ledger.reserve(
            TENANT, charge, provider="backup", micros=micros, fallback=fallback, ttl_s=30
        )
        if held.ok:
            await ledger.settle(TENANT, charge, micros)
        return held

    storm = await asyncio.gather(*(attempt(f"w{worker}-f{i}", 1000, True) for i in range(20)))
    primary = await asyncio.gather(*(attempt(f"w{worker}-p{i}", 500, False) for i in range(10)))
    outcomes = ["ok" if isinstance(r, Reservation) else str(r.reason) for r in storm]
    return outcomes, sum(1 for r in primary if r.ok)


_JOBS: dict[str, Any] = {
    "turns": _turns,
    "redeliver": _redeliver,
    "reserve_release": _reserve_release,
    "fallback": _fallback_storm,
}


def _hold_child(url: str, ns: str, out: Any) -> None:
    """Reserve with a 1 s hold, say so, then hang until SIGKILLed."""

    async def main() -> None:
        client = clusterkit.client(url)
        ledger = Ledger(client, namespace=ns)
        await ledger.reserve(
            TENANT, "dead:0", provider="openai", micros=500, fallback=False, ttl_s=1
        )
        out.put("held")
        await asyncio.sleep(3600)

    asyncio.run(main())


# --- the tests ------------------------------------------------------------------------------


async def test_periods_come_from_the_redis_server_clock(redis: Redis, namespace: str) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1000, 1000)
    report = await ledger.report(TENANT)
    assert abs(report.now_ms - time.time() * 1000) < 5_000
    now = datetime.fromtimestamp(report.now_ms / 1000, tz=UTC)
    assert (report.day.period, report.month.period) == (
        now.strftime("%Y-%m-%d"),
        now.strftime("%Y-%m"),
    )


@pytest.mark.parametrize("skew_h", [-11.9, 11.9])
async def test_a_pod_clock_hours_off_still_spends_in_the_server_s_period(
    redis: Redis, namespace: str, monkeypatch: pytest.MonkeyPatch, skew_h: float
) -> None:
    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(skew_h * 3_600e9))
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1000, 1000)
    settled = await ledger.settle(TENANT, "c1", 10)
    server = datetime.fromtimestamp((await redis.time())[0], tz=UTC)
    assert (settled.day, settled.month) == (server.strftime("%Y-%m-%d"), server.strftime("%Y-%m"))


async def test_a_pod_clock_a_day_off_is_an_error_that_writes_nothing(
    redis: Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1000, 1000)
    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 36 * 3_600 * 10**9)
    with pytest.raises(ResponseError, match="12 h"):
        await ledger.reserve(TENANT, "c1", provider="openai", micros=5, fallback=False, ttl_s=5)
    monkeypatch.undo()
    assert (await ledger.report(TENANT)).reserved_micros == 0


async def test_real_redis_lua_computes_the_same_utc_periods_as_python(redis: Redis) -> None:
    instants = [0, 951_868_799_999, 951_868_800_000, 1_709_164_800_000, 1_798_761_599_999]
    instants += list(range(1_700_000_000_000, 4_100_000_000_000, 1_234_567_891))
    assert await lua_periods(redis, instants) == [python_periods(ms) for ms in instants]


async def test_a_reservation_and_a_breaker_read_share_one_round_trip(
    redis: Redis, namespace: str
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1000, 1000)
    await ledger.load_scripts()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(f"{{{namespace}}}:br:openai")
        parse = ledger.reserve_on(
            pipe, TENANT, "c1", provider="openai", micros=5, fallback=False, ttl_s=5
        )
        breaker, raw = await pipe.execute()
    assert breaker is None
    assert parse(raw).ok


@pytest.mark.slow
async def test_200_concurrent_turns_from_4_processes_never_settle_past_the_limit(
    redis: Redis, redis_url: str, namespace: str
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 10_000, 10_000)
    start, out = SPAWN.Event(), SPAWN.Queue()
    args = [(Job("turns", redis_url, namespace, w), start, out) for w in range(4)]
    with processes(_child, args):
        start.set()
        results = _collect(out, 4)
    charged = sum(c for c, _ in results)
    refused = sum(r for _, r in results)
    report = await ledger.report(TENANT)
    assert report.day.spent_micros == charged
    assert 5_000 < charged <= 10_000
    assert refused > 0
    assert report.reserved_micros == 0


@pytest.mark.slow
async def test_a_charge_delivered_by_4_processes_at_once_is_charged_once(
    redis: Redis, redis_url: str, namespace: str
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1_000_000, 1_000_000)
    start, out = SPAWN.Event(), SPAWN.Queue()
    args = [(Job("redeliver", redis_url, namespace, w), start, out) for w in range(4)]
    with processes(_child, args):
        start.set()
        results = _collect(out, 4)
    per_charge: dict[str, int] = {}
    for charge, micros in (pair for result in results for pair in result):
        per_charge[charge] = per_charge.get(charge, 0) + micros
    assert per_charge == {f"turn-{i}:0": 10 + i for i in range(40)}
    report = await ledger.report(TENANT)
    assert report.day.spent_micros == sum(10 + i for i in range(40))
    assert report.reserved_micros == 0


@pytest.mark.slow
async def test_a_killed_workers_reservation_is_reclaimed_and_charged_once(
    redis: Redis, redis_url: str, namespace: str
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1000, 1000)
    out = SPAWN.Queue()
    holder = SPAWN.Process(target=_hold_child, args=(redis_url, namespace, out), daemon=True)
    holder.start()
    try:
        assert out.get(timeout=30) == "held"
    finally:
        holder.kill()
        holder.join()
    assert holder.exitcode == -9
    assert (await ledger.report(TENANT)).reserved_micros == 500
    await asyncio.sleep(1.1)

    start, out = SPAWN.Event(), SPAWN.Queue()
    args = [(Job("reserve_release", redis_url, namespace, w), start, out) for w in range(4)]
    with processes(_child, args):
        start.set()
        reclaimed = _collect(out, 4)
    assert sum(reclaimed) == 1
    report = await ledger.report(TENANT)
    assert (report.reserved_micros, report.reclaimed_total) == (0, 1)
    # Charged at its reservation, since its call may have been billed; a settlement that
    # turns up later corrects that to what the call cost, once.
    assert (report.day.spent_micros, report.day.reclaimed_micros) == (500, 500)
    late = await ledger.settle(TENANT, "dead:0", 400)
    assert (late.charged_micros, (await ledger.settle(TENANT, "dead:0", 400)).charged_micros) == (
        -100,
        0,
    )
    assert (await ledger.report(TENANT)).day.spent_micros == 400


@pytest.mark.slow
async def test_the_fallback_cap_stops_backup_spend_while_primary_spend_continues(
    redis: Redis, redis_url: str, namespace: str
) -> None:
    ledger = Ledger(redis, namespace=namespace)
    await ledger.set_limits(TENANT, 1_000_000, 1_000_000, fallback_cap_micros=10_000)
    start, out = SPAWN.Event(), SPAWN.Queue()
    args = [(Job("fallback", redis_url, namespace, w), start, out) for w in range(4)]
    with processes(_child, args):
        start.set()
        results = _collect(out, 4)
    outcomes = [o for storm, _ in results for o in storm]
    assert outcomes.count("ok") == 10
    # Refused while other fallback holds are in flight, or once the cap is spent.
    assert set(outcomes) <= {"ok", "fallback_cap_held", "fallback_cap_reached"}
    assert "fallback_cap_reached" in outcomes
    assert sum(primary for _, primary in results) == 40
    report = await ledger.report(TENANT)
    assert report.day.fallback_by_provider == {"backup": 10_000}
    assert report.day.spent_micros == 10_000 + 40 * 500
    assert report.fallback_remaining_micros == 0
