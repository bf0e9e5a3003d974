"""Spend attribution on real Redis: every path that adds to a tenant's spend (settlement, a
reclaimed hold, its later correction or refund, an offline settlement, a correction that
crosses a day) adds the same micros to its labels, so each key's values sum to the spend
of the day and of the month; past the bound of values, the rest is `other`."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aredis

from budgets import Ledger, Limits, Reservation, encode_labels
from budgets.attribution import attributions
from budgets.errors import InvalidNameError
from budgets.testing import ManualClock
from tests import chainkit
from tests.fleetkit import Job, Workers, make_request, turns_of
from worker.cli.main import main
from worker.guard import Charge, Conclusion, Signal, Target
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault, Simulator
from worker.types import TurnRequest

KEYS = ("agent", "user")
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def labels(most: int = 100, **values: str) -> str:
    return encode_labels(KEYS, values, most)


async def period_hashes(client: aredis.Redis, ledger: Ledger, tenant: str) -> list[dict[str, int]]:
    """The raw day and month hashes of the report's periods (every field, as integers)."""
    report = await ledger.report(tenant)
    found = []
    for key in (
        ledger.keys.day(tenant, report.day.period),
        ledger.keys.month(tenant, report.month.period),
    ):
        raw = await client.hgetall(key)
        found.append({k.decode() if isinstance(k, bytes) else k: int(v) for k, v in raw.items()})
    return found


async def assert_sums(
    client: aredis.Redis, ledger: Ledger, tenant: str, keys: tuple[str, ...] = KEYS
) -> int:
    """Each key's values sum to the spend of the day and of the month; returns the day's."""
    day, month = await period_hashes(client, ledger, tenant)
    for spend in (day, month):
        parts = attributions(spend)
        for key in keys:
            shares = [
                v
                for k, v in spend.items()
                if k.startswith(f"by:{key}=")
                or k
                in (
                    f"by:{key}!none",
                    f"by:{key}!other",
                )
            ]
            assert sum(shares) == spend.get("spent", 0), (key, spend)
            assert parts[key].unattributed_micros == 0
    return day.get("spent", 0)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aredis.Redis]:
    redis = aredis.from_url(redis_url)
    yield redis
    await redis.aclose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOON)


@pytest.fixture
async def ledger(client: aredis.Redis, namespace: str, clock: ManualClock) -> Ledger:
    ledger = Ledger(client, namespace=namespace, clock_ms=clock)
    await ledger.set_limits("acme", 10**9, 10**10)
    return ledger


async def hold(ledger: Ledger, charge_id: str, micros: int, tags: str, ttl_s: float = 30) -> None:
    done = await ledger.reserve(
        "acme",
        charge_id,
        provider="openai",
        micros=micros,
        fallback=False,
        ttl_s=ttl_s,
        labels=tags,
    )
    assert isinstance(done, Reservation)


async def test_a_settled_charge_is_attributed_to_its_labels(
    ledger: Ledger, client: aredis.Redis
) -> None:
    await hold(ledger, "c1", 500, labels(agent="triage", user="u-1"))
    await ledger.settle("acme", "c1", 300)
    await hold(ledger, "c2", 500, labels(agent="planner"))
    await ledger.settle("acme", "c2", 200)
    assert await assert_sums(client, ledger, "acme") == 500
    report = await ledger.report("acme", attributed=True)
    agent, user = report.month.attribution["agent"], report.month.attribution["user"]
    assert agent.values == {"triage": 300, "planner": 200}
    assert (user.values, user.none_micros) == ({"u-1": 300}, 200)
    # The reports of many tenants leave the labels out (there may be many).
    assert (await ledger.report("acme")).day.attribution == {}


async def test_a_reclaimed_hold_its_correction_and_its_refund_keep_the_sums(
    ledger: Ledger, client: aredis.Redis, clock: ManualClock
) -> None:
    await hold(ledger, "late", 900, labels(agent="a"), ttl_s=1)
    await hold(ledger, "gone", 400, labels(agent="b", user="u|1|2"), ttl_s=1)
    await hold(ledger, "dead", 700, labels(agent="c"), ttl_s=1)
    clock.advance(2)
    # Anyone's script reclaims the three expired holds: charged at what they held.
    await hold(ledger, "other", 10, labels(agent="d"))
    assert await assert_sums(client, ledger, "acme") == 2000
    await ledger.settle("acme", "late", 150)  # corrected down to what the call cost
    await ledger.release("acme", "gone")  # the provider never billed it: refunded
    await ledger.settle("acme", "other", 10)
    assert await assert_sums(client, ledger, "acme") == 150 + 700 + 10
    day = (await ledger.report("acme", attributed=True)).day
    assert day.by("agent").values == {"c": 700, "a": 150, "d": 10, "b": 0}
    assert day.by("user").values == {"u|1|2": 0}  # a '|' in a value survives the hold


async def test_a_correction_the_next_day_moves_the_labels_as_the_spend(
    ledger: Ledger, client: aredis.Redis, clock: ManualClock
) -> None:
    # Reclaimed at 900 before midnight, settled for 100 after it: the new day's spend
    # cannot go below zero, and its labels lose exactly what it lost.
    clock.advance(timedelta(hours=11, minutes=59).total_seconds())
    await hold(ledger, "x", 900, labels(agent="a"), ttl_s=1)
    clock.advance(5)
    await hold(ledger, "y", 50, labels(agent="b"), ttl_s=600)  # reclaims x on the 30th
    assert await assert_sums(client, ledger, "acme") == 900
    clock.advance(120)
    await hold(ledger, "z", 300, labels(agent="c"))
    await ledger.settle("acme", "z", 300)
    await ledger.settle("acme", "x", 100)  # 100 - 900 on the 1st, which had spent 300
    await ledger.settle("acme", "y", 50)
    assert await assert_sums(client, ledger, "acme") == 50
    agent = (await ledger.report("acme", attributed=True)).day.attribution["agent"]
    assert agent.values == {"b": 50, "c": 300, "a": -300}


async def test_a_settlement_without_a_reservation_takes_the_labels_it_is_given(
    ledger: Ledger, client: aredis.Redis
) -> None:
    # Spent while Redis was away, journaled, and settled when it rejoined.
    await ledger.settle("acme", "offline-1", 250, provider="openai", labels=labels(agent="x"))
    assert await assert_sums(client, ledger, "acme") == 250
    agent = (await ledger.report("acme", attributed=True)).day.attribution["agent"]
    assert agent.values == {"x": 250}


async def test_values_past_the_bound_are_counted_as_other(
    ledger: Ledger, client: aredis.Redis
) -> None:
    for n in range(5):
        await hold(ledger, f"c{n}", 10, labels(most=3, agent=f"a{n}", user="u"))
        await ledger.settle("acme", f"c{n}", 10 + n)
    # A value already kept stays itself; a new one past the bound is other.
    await hold(ledger, "again", 10, labels(most=3, agent="a1"))
    await ledger.settle("acme", "again", 100)
    assert await assert_sums(client, ledger, "acme") == 10 + 11 + 12 + 13 + 14 + 100
    agent = (await ledger.report("acme", attributed=True)).day.attribution["agent"]
    assert agent.values == {"a1": 111, "a2": 12, "a0": 10}
    assert (agent.other_micros, agent.none_micros) == (13 + 14, 0)
    day, _ = await period_hashes(client, ledger, "acme")
    assert day["by:agent#"] == 3


async def test_a_value_cannot_write_another_field(ledger: Ledger, client: aredis.Redis) -> None:
    sly = "x\x1fspent"
    with pytest.raises(InvalidNameError):
        labels(agent=sly)
    for n, value in enumerate(["a|b", "spent", "!other", "=x", "#", "b!none"]):
        await hold(ledger, f"c{n}", 10, labels(agent=value))
        await ledger.settle("acme", f"c{n}", 10)
    assert await assert_sums(client, ledger, "acme") == 60
    agent = (await ledger.report("acme", attributed=True)).day.attribution["agent"]
    assert set(agent.values) == {"a|b", "spent", "!other", "=x", "#", "b!none"}
    assert (agent.other_micros, agent.none_micros) == (0, 0)


async def test_concurrent_charges_sum_exactly(ledger: Ledger, client: aredis.Redis) -> None:
    async def one(n: int) -> None:
        await hold(ledger, f"k{n}", 100, labels(most=5, agent=f"a{n % 7}", user=f"u{n % 3}"))
        if n % 4 == 0:
            await ledger.release("acme", f"k{n}")
        else:
            await ledger.settle("acme", f"k{n}", 37 + n)

    await asyncio.gather(*(one(n) for n in range(60)))
    expected = sum(37 + n for n in range(60) if n % 4)
    assert await assert_sums(client, ledger, "acme") == expected


# -- relevo budgets report --------------------------------------------------------------


async def test_the_command_shows_the_spend_by_a_key_summing_to_the_spend(
    client: aredis.Redis,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__URL", redis_url)
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", namespace)
    ledger = Ledger(client, namespace=namespace)  # on the server's clock, as the command
    await ledger.set_limits("acme", 10**9, 10**10)
    # Spend from before the key was attributed, then three charges with labels.
    await ledger.settle("acme", "before", 1_000_000, provider="openai")
    for n, (agent, micros) in enumerate([("triage", 250_000), ("planner", 2_000_000)]):
        await hold(ledger, f"c{n}", micros, labels(most=1, agent=agent))
        await ledger.settle("acme", f"c{n}", micros)
    await ledger.settle("acme", "anon", 5, provider="openai", labels=labels())

    def relevo(*args: str, status: int = 0) -> str:
        assert main(["budgets", "report", "acme", *args]) == status
        return capsys.readouterr().out

    shown = json.loads(await asyncio.to_thread(relevo, "--by", "agent", "--month", "--json"))
    assert shown == {
        "tenant": "acme",
        "period": (await ledger.report("acme")).month.period,
        "by": "agent",
        "spent_micros": 3_250_005,
        "values": {"triage": 250_000},
        "none_micros": 5,
        "other_micros": 2_000_000,
        "unattributed_micros": 1_000_000,
    }
    text = await asyncio.to_thread(relevo, "--by", "agent")
    for row in ("triage", "(no agent)", "(other)", "(unattributed)", "total"):
        assert row in text
    assert "$3.25" in text
    await asyncio.to_thread(relevo, "--by", "no=key", status=2)


# -- through the chain, from several processes ------------------------------------------


@pytest.fixture(scope="module")
def workers() -> Iterator[Workers]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELEVO_TEST_KEY", chainkit.KEY)  # the spawned processes' provider key
        pool = Workers(3)
    try:
        yield pool
    finally:
        pool.close()


@pytest.mark.slow
def test_turns_from_several_processes_sum_exactly_to_the_spend(
    workers: Workers, sim: Simulator, redis_url: str, namespace: str
) -> None:
    """Three processes run turns of three agents and six users at once (a user without
    a value, a cut call charged what it produced, a hold reclaimed): each agent's spend is
    its turns' cost, and each key's values sum to the tenant's spend of the day and month."""
    sim.reset()
    # The primary's first two calls break after their first token: charged, then fallback.
    sim.set_faults("alpha", Fault(tokens=400, error_after_tokens=1, times=2))
    sections = {
        "redis": {"url": redis_url, "namespace": namespace, "timeout_s": 2.0},
        "budgets": {"attribute_by": list(KEYS), "max_attributed_values": 3},
        "first_byte_timeout_s": 5.0,
    }
    agents = ("triage", "planner", "writer")
    jobs = []
    for process in range(3):
        requests = []
        for n in range(8):
            metadata = {"agent": agents[(process + n) % 3]}
            if n % 4:
                metadata["user"] = f"u-{(process * 8 + n) % 6}"
            turn = make_request(max_tokens=200).model_copy(update={"metadata": metadata})
            requests.append(turn.model_dump_json())
        jobs.append(Job(sim.url, sections, requests=tuple(requests), max_tokens=200))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELEVO_TEST_KEY", chainkit.KEY)
        with workers.fleet(jobs) as fleet:
            fleet.go()
            turns = turns_of(fleet.reports())
    assert len(turns) == 24
    assert all(t.status == "ok" for t in turns), turns
    assert sim.calls("alpha", "dropped") == 2

    async def check() -> None:
        client = aredis.from_url(redis_url)
        try:
            ledger = Ledger(client, namespace=namespace, default_limits=Limits(10**9, 10**10))
            dead = encode_labels(KEYS, {"agent": "reaper", "user": "u-9"}, 3)
            held = await ledger.reserve(
                "acme",
                "dead:0",
                provider="oa",
                micros=777,
                fallback=False,
                ttl_s=0.05,
                labels=dead,
            )
            assert isinstance(held, Reservation)
            await asyncio.sleep(0.2)
            spent = await assert_sums(client, ledger, "acme")
            assert spent == sum(t.cost_micros for t in turns) + 777
            report = await ledger.report("acme", attributed=True)
            assert report.day.reclaimed_charges == 1
            agent, user = report.day.by("agent"), report.month.by("user")
            for name in agents:
                cost = sum(t.cost_micros for t in turns if t.turn_id in by_agent[name])
                assert agent.values[name] == cost
            # Three agents and the reaper: the fourth value the day sees is other.
            assert (len(agent.values), len(user.values)) == (3, 3)
            assert min(agent.other_micros, user.other_micros, user.none_micros) > 0
        finally:
            await client.aclose()

    by_agent: dict[str, set[str]] = {name: set() for name in agents}
    for job in jobs:
        for raw in job.requests:
            request = TurnRequest.model_validate_json(raw)
            by_agent[request.metadata["agent"]].add(request.turn_id)
    asyncio.run(check())


async def test_spend_settled_after_redis_came_back_is_attributed(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls admitted while Redis was away are journaled with their labels, and settled
    (with no reservation behind them) to the values of their turns."""
    monkeypatch.setenv("RELEVO_TEST_KEY", chainkit.KEY)
    url, proc = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.2, "rejoin_check_s": 0.2}
    plan = {"attribute_by": list(KEYS), "offline_allowance_usd": "1"}
    config = chainkit.settings(sim.url, redis=redis, budgets=plan)
    guard = open_guard(config)
    alpha = Target("openai/alpha", "openai", "oa", "alpha")
    try:
        await guard.admit([alpha], None)
        guard.offline.heard("acme", 10**9)
        proc.send_signal(signal.SIGSTOP)
        for n, agent in enumerate(["triage", "planner", "triage"]):
            tags = config.budgets.labels({"agent": agent, "user": "u-1"})
            charge = Charge(f"t{n}:r:0", "acme", "oa", 1_000, False, 3_000, tags)
            assert (await guard.admit([alpha], charge)).refusal is None
            await guard.conclude(Conclusion(alpha, charge, Signal.SUCCESS, 100 * (n + 1)))
        proc.send_signal(signal.SIGCONT)
        began = time.monotonic()
        while len(guard.backlog):
            assert time.monotonic() - began < 5.0
            await asyncio.sleep(0.02)
        client = guard.redis
        assert await assert_sums(client, guard.ledger, "acme") == 600
        report = await guard.ledger.report("acme", attributed=True)
        assert report.day.by("agent").values == {"triage": 400, "planner": 200}
        assert report.month.by("user").values == {"u-1": 600}
    finally:
        proc.send_signal(signal.SIGCONT)
        await guard.aclose()
