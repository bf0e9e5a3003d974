"""Every Guard method with its store away: answered locally, and what it missed lands later.

A `RedisGuard` on a redis-server of the test's own, stopped (SIGSTOP: every command hangs
until the store timeout) while each method is called, then resumed.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.chainkit import KEY, settings
from worker.guard import Availability, Charge, Conclusion, Refusal, Signal, Target
from worker.guard.allowance import OfflineAllowance
from worker.guard.backlog import Backlog
from worker.guard.redis_guard import RedisGuard, open_guard
from worker.simulator import Simulator

pytestmark = pytest.mark.slow

ALPHA = Target("openai/alpha", "openai", "oa", "alpha")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)


@pytest.fixture
async def guard(
    sim: Simulator, private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> AsyncIterator[RedisGuard]:
    url, proc = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.2, "rejoin_check_s": 0.2}
    config = settings(sim.url, redis=redis, budgets={"offline_allowance_usd": "0"})
    made = open_guard(config)
    try:
        yield made
    finally:
        proc.send_signal(signal.SIGCONT)
        await made.aclose()


def charge(n: int) -> Charge:
    return Charge(f"turn-1:run:{n}", "acme", "oa", 1_000, False, 3_000)


async def until(check: object, timeout_s: float) -> None:
    began = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - began < timeout_s, "not within the time allowed"
        await asyncio.sleep(0.02)


async def test_the_allowance_counts_a_call_at_its_worst_while_it_runs_then_at_its_cost() -> None:
    backlog = Backlog(retry_every_s=3600)
    allowance = OfflineAllowance(2 * 3_000 + 500, backlog)  # two worst cases, and a little
    for tenant in ("acme", "other"):
        allowance.heard(tenant, 10**9)  # room enough: the allowance decides
    assert [allowance.admit(charge(n)) for n in range(3)] == [
        None,
        None,
        Refusal.BUDGET_UNREACHABLE,
    ]
    allowance.ended(charge(0))  # it cost 1,000, not yet told to Redis

    async def unsent() -> None:
        raise RedisConnectionError("Redis is away")

    backlog.add("settle:0", "settle", unsent, micros=1_000, tenant="acme")
    assert allowance.admit(charge(3)) is Refusal.BUDGET_UNREACHABLE  # 1,000 + 3,000 + 3,000
    allowance.ended(charge(1))
    assert allowance.admit(charge(4)) is None  # 1,000 + 3,000
    assert allowance.admit(Charge("t:run:5", "other", "oa", 1_000, False, 3_000)) is None
    await backlog.aclose()


async def test_each_method_answers_locally_and_its_writes_land_when_redis_answers(
    guard: RedisGuard, private_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    _, proc = private_redis
    held_before = await guard.admit([ALPHA], charge(0))
    assert held_before.refusal is None  # reserved in Redis: its release is due later
    proc.send_signal(signal.SIGSTOP)

    admission = await guard.admit([ALPHA], charge(1))
    assert not guard.circuits.fleet_view
    assert admission.view.of(ALPHA) is Availability.AVAILABLE
    assert admission.refusal is Refusal.BUDGET_UNREACHABLE  # no offline allowance
    assert await guard.reserve(charge(2)) is Refusal.BUDGET_UNREACHABLE
    # The local breakers are closed: the call may go, and no probe slot is taken anywhere.
    assert await guard.acquire_probe(ALPHA, "turn-1:0") is True
    # A 529 for the call reserved while Redis answered: no provider billed it.
    await guard.conclude(Conclusion(ALPHA, charge(0), Signal.MODEL_FAILURE))
    await guard.hold("turn-held", '{"turn_id": "turn-held"}')
    await guard.handoff("acme", "turn-handed", "tenant_budget_exhausted", "{}")
    # The 529's release; the release of the reservation `admit` sent as Redis stopped,
    # refused here and yet run by Redis when it wakes; the held turn; the hand-off.
    assert len(guard.backlog) == 4

    proc.send_signal(signal.SIGCONT)
    await until(lambda: len(guard.backlog) == 0, 5.0)  # on the backlog's timer: no traffic
    assert await guard.held.count() == 1
    assert [h.turn_id for h in await guard.handoffs.list()] == ["turn-handed"]
    report = await guard.ledger.report("acme")
    assert report.reserved_micros == 0  # released, not left to be reclaimed and charged
    assert report.day.spent_micros == 0
    assert [key async for key in guard.redis.scan_iter(match="*:probe:*")] == []


async def test_calls_admitted_offline_count_at_their_worst_until_they_end(
    guard: RedisGuard, private_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    _, proc = private_redis
    guard.offline.micros = 2 * 3_000 + 500  # two worst cases, and a little
    await guard.admit([ALPHA], None)
    guard.offline.heard("acme", 10**9)  # room enough: the allowance decides
    proc.send_signal(signal.SIGSTOP)
    # Three calls start before any ends: the third would pass the allowance at its worst.
    refusals = [(await guard.admit([ALPHA], charge(n))).refusal for n in range(3)]
    assert refusals == [None, None, Refusal.BUDGET_UNREACHABLE]
    # One ends costing 500: its worst case gives way to its cost, and a call fits again.
    await guard.conclude(Conclusion(ALPHA, charge(0), Signal.SUCCESS, 500))
    assert await guard.reserve(charge(3)) is None
    assert await guard.reserve(charge(4)) is Refusal.BUDGET_UNREACHABLE
    proc.send_signal(signal.SIGCONT)
    await until(lambda: len(guard.backlog) == 0, 5.0)
    assert (await guard.ledger.report("acme")).day.spent_micros == 500


# A wrong password (AuthenticationError), and a user whose ACL has none of the
# namespace's keys (NOPERM on every command and script).
REFUSED = pytest.mark.parametrize(
    "credentials", ["full:wrong", "elsewhere:secret"], ids=["bad-password", "acl-denied"]
)


def refused_guard(sim: Simulator, port: int, credentials: str, namespace: str) -> RedisGuard:
    url = f"redis://{credentials}@127.0.0.1:{port}/0"
    return open_guard(settings(sim.url, redis={"url": url, "namespace": namespace}))


@REFUSED
@pytest.mark.parametrize("method", ["admit", "reserve", "acquire_probe", "conclude"])
async def test_every_method_fails_closed_when_redis_refuses_the_worker(
    sim: Simulator, namespace: str, acl_redis: int, method: str, credentials: str
) -> None:
    from worker.errors import StoreForbidden

    guard = refused_guard(sim, acl_redis, credentials, namespace)
    calls = {
        "admit": lambda: guard.admit([ALPHA], charge(0)),
        "reserve": lambda: guard.reserve(charge(0)),
        "acquire_probe": lambda: guard.acquire_probe(ALPHA, "turn-1:0"),
        "conclude": lambda: guard.conclude(Conclusion(ALPHA, charge(0), Signal.SUCCESS, 10)),
    }
    try:
        with pytest.raises(StoreForbidden) as raised:
            await calls[method]()
    finally:
        await guard.aclose()
    assert "wrong" not in str(raised.value)
    assert "secret" not in str(raised.value)
    assert len(guard.backlog) == 0  # refused, not kept: a person must fix the credentials


@REFUSED
async def test_a_held_turn_or_hand_off_redis_refuses_is_kept_not_dropped(
    sim: Simulator, namespace: str, acl_redis: int, credentials: str
) -> None:
    """The turn behind them ran nothing; its record waits for the grant to be fixed
    (tests/test_guard_forbidden.py: it lands once it is)."""
    guard = refused_guard(sim, acl_redis, credentials, namespace)
    try:
        await guard.hold("turn-1", "{}")
        await guard.handoff("acme", "turn-2", "tenant_budget_exhausted", "{}")
        assert len(guard.backlog) == 2
        assert not await guard.backlog.flush()  # still refused: still kept
        assert len(guard.backlog) == 2
    finally:
        await guard.aclose()
