"""Spend attribution on real Redis: every path that adds to a tenant's spend (settlement, a
reclaimed hold, its later correction or refund, an offline settlement, a correction that
crosses a day) adds the same micros to its labels, so each key's values sum to the spend
of the day and of the month; past the bound of values, the rest is `other`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aredis

from budgets import Ledger, Reservation, encode_labels
from budgets.attribution import attributions
from budgets.errors import InvalidNameError
from budgets.testing import ManualClock

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
    await hold(ledger, "gone", 400, labels(agent="b", user="u"), ttl_s=1)
    await hold(ledger, "dead", 700, labels(agent="c"), ttl_s=1)
    clock.advance(2)
    # Anyone's script reclaims the three expired holds: charged at what they held.
    await hold(ledger, "other", 10, labels(agent="d"))
    assert await assert_sums(client, ledger, "acme") == 2000
    await ledger.settle("acme", "late", 150)  # corrected down to what the call cost
    await ledger.release("acme", "gone")  # the provider never billed it: refunded
    await ledger.settle("acme", "other", 10)
    assert await assert_sums(client, ledger, "acme") == 150 + 700 + 10
    agent = (await ledger.report("acme", attributed=True)).day.attribution["agent"]
    assert agent.values == {"c": 700, "a": 150, "d": 10, "b": 0}


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
