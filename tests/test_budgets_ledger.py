"""The ledger on fakeredis (real Lua via lupa): limits, periods, refusals, idempotency, reclaim."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from budgets import (
    Handoffs,
    InvalidAmountError,
    InvalidNameError,
    Ledger,
    Limits,
    Refusal,
    RefusalReason,
    Reservation,
    UnknownTenantError,
)
from budgets.scripts import SCRIPTS
from budgets.testing import ManualClock

NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
async def redis() -> AsyncIterator[fakeredis.FakeAsyncRedis]:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOON)


@pytest.fixture
def ledger(redis: fakeredis.FakeAsyncRedis, clock: ManualClock) -> Ledger:
    return Ledger(redis, namespace="t", clock_ms=clock)


async def reserve(
    ledger: Ledger,
    charge_id: str,
    micros: int,
    *,
    fallback: bool = False,
    provider: str = "openai",
    tenant: str = "acme",
    ttl_s: float = 30,
) -> Reservation | Refusal:
    return await ledger.reserve(
        tenant, charge_id, provider=provider, micros=micros, fallback=fallback, ttl_s=ttl_s
    )


async def test_unknown_tenants_are_refused_by_default(ledger: Ledger) -> None:
    result = await reserve(ledger, "c1", 10)
    assert isinstance(result, Refusal)
    assert result.reason == "unknown_tenant"
    assert result.period is None
    assert await ledger.tenants() == []
    with pytest.raises(UnknownTenantError, match="acme"):
        await ledger.report("acme")


async def test_unknown_tenants_get_the_default_limits_when_one_is_configured(
    redis: fakeredis.FakeAsyncRedis, clock: ManualClock
) -> None:
    ledger = Ledger(redis, namespace="t", clock_ms=clock, default_limits=Limits(100, 1000, 20))
    assert isinstance(await reserve(ledger, "c1", 100), Reservation)
    refused = await reserve(ledger, "c2", 1)
    assert isinstance(refused, Refusal)
    assert refused.reason == RefusalReason.TENANT_BUDGET_HELD
    assert (await reserve(ledger, "c3", 0, fallback=True)).ok
    report = await ledger.report("acme")
    assert report.limits_source == "default"
    assert report.limits == Limits(100, 1000, 20)
    assert await ledger.tenants() == ["acme"]


async def test_configured_limits_win_over_the_default(
    redis: fakeredis.FakeAsyncRedis, clock: ManualClock
) -> None:
    ledger = Ledger(redis, namespace="t", clock_ms=clock, default_limits=Limits(10**6, 10**6))
    await ledger.set_limits("acme", 50, 500)
    assert not (await reserve(ledger, "c1", 51)).ok
    assert (await ledger.report("acme")).limits_source == "configured"


async def test_holds_count_against_the_daily_limit_until_released(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    assert (await reserve(ledger, "c1", 600)).ok
    refused = await reserve(ledger, "c2", 600)
    assert isinstance(refused, Refusal)
    # The day has 1,000 left: c2 fits once c1 settles. The holds are in the way, not spend.
    assert (refused.reason, refused.period, refused.remaining_micros, refused.held_micros) == (
        "tenant_budget_held",
        "day",
        400,
        600,
    )
    released = await ledger.release("acme", "c1")
    assert released.released
    assert released.micros == 600
    assert (await reserve(ledger, "c2", 600)).ok


async def test_a_reservation_may_use_the_budget_to_the_last_micro_dollar(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    assert (await reserve(ledger, "c1", 1000)).ok
    assert not (await reserve(ledger, "c2", 1)).ok


async def test_the_month_limit_refuses_when_the_day_still_has_room(
    ledger: Ledger, clock: ManualClock
) -> None:
    await ledger.set_limits("acme", 1000, 2500)
    clock.set(datetime(2026, 11, 10, 12, 0, tzinfo=UTC))
    for day in range(2):
        assert (await reserve(ledger, f"d{day}", 1000)).ok
        await ledger.settle("acme", f"d{day}", 1000)
        clock.advance(86_400)
    refused = await reserve(ledger, "d2", 1000)
    assert isinstance(refused, Refusal)
    assert (refused.period, refused.remaining_micros) == ("month", 500)
    assert (await reserve(ledger, "d2", 500)).ok


async def test_settling_less_than_reserved_frees_the_rest(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "c1", 800)
    settled = await ledger.settle("acme", "c1", 300)
    assert (settled.charged_micros, settled.released_hold_micros) == (300, 800)
    report = await ledger.report("acme")
    assert (report.day.spent_micros, report.reserved_micros, report.day.remaining_micros) == (
        300,
        0,
        700,
    )


async def test_settling_more_than_reserved_charges_the_actual_cost(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "c1", 100)
    assert (await ledger.settle("acme", "c1", 1200)).charged_micros == 1200
    report = await ledger.report("acme")
    assert report.day.spent_micros == 1200
    assert report.day.remaining_micros == 0
    assert not (await reserve(ledger, "c2", 1)).ok


async def test_reserving_the_same_charge_twice_holds_it_once(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    first = await reserve(ledger, "turn-1:0", 400)
    again = await reserve(ledger, "turn-1:0", 400)
    assert isinstance(first, Reservation)
    assert isinstance(again, Reservation)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.expires_at_ms == first.expires_at_ms
    assert (await ledger.report("acme")).reserved_micros == 400


async def test_reserving_a_settled_charge_returns_the_charge_and_holds_nothing(
    ledger: Ledger,
) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "c1", 400)
    await ledger.settle("acme", "c1", 250)
    again = await reserve(ledger, "c1", 400)
    assert isinstance(again, Reservation)
    assert (again.state, again.micros, again.replayed) == ("settled", 250, True)
    assert (await ledger.report("acme")).reserved_micros == 0


async def test_a_charge_settled_twice_is_charged_once(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 10_000, 10_000)
    await reserve(ledger, "c1", 500)
    first = await ledger.settle("acme", "c1", 450)
    second = await ledger.settle("acme", "c1", 450)
    assert (first.charged_micros, second.charged_micros) == (450, 0)
    assert second.replayed
    assert second.settled_micros == 450
    assert (await ledger.report("acme")).day.spent_micros == 450


async def test_concurrent_settlements_of_one_charge_charge_it_once(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 10_000, 10_000)
    await reserve(ledger, "c1", 500)
    results = await asyncio.gather(*(ledger.settle("acme", "c1", 450) for _ in range(20)))
    assert sum(r.charged_micros for r in results) == 450
    assert sum(not r.replayed for r in results) == 1
    assert (await ledger.report("acme")).day.spent_micros == 450


async def test_a_released_charge_can_be_reserved_again(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "c1", 400)
    await ledger.release("acme", "c1")
    again = await reserve(ledger, "c1", 400)
    assert isinstance(again, Reservation)
    assert not again.replayed
    assert (await ledger.report("acme")).reserved_micros == 400


async def test_release_of_a_settled_or_unknown_charge_changes_nothing(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "c1", 400)
    await ledger.settle("acme", "c1", 300)
    assert not (await ledger.release("acme", "c1")).released
    assert not (await ledger.release("acme", "never")).released
    assert (await ledger.report("acme")).day.spent_micros == 300


async def test_an_expired_hold_is_reclaimed_once_and_charged_at_its_reservation(
    ledger: Ledger, clock: ManualClock
) -> None:
    # Its worker died after reserving: the call may have reached the provider, who bills it.
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "dead", 900, ttl_s=5)
    clock.advance(4.999)
    assert not (await reserve(ledger, "c1", 200)).ok
    clock.advance(0.001)
    first = await reserve(ledger, "c1", 100)
    second = await reserve(ledger, "c2", 100)
    assert isinstance(first, Reservation)
    assert isinstance(second, Refusal)
    assert (first.reclaimed, second.reclaimed) == (1, 0)
    assert second.reason == "tenant_budget_held"
    report = await ledger.report("acme")
    assert (report.reserved_micros, report.reclaimed_total) == (100, 1)
    assert (report.day.spent_micros, report.day.reclaimed_charges) == (900, 1)
    assert (report.day.reclaimed_micros, report.month.reclaimed_micros) == (900, 900)


async def test_a_reclaimed_charge_released_later_is_refunded_once(
    ledger: Ledger, clock: ManualClock
) -> None:
    # The worker was only slow: its call failed without being billed.
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "slow", 900, ttl_s=5, fallback=True, provider="anthropic")
    clock.advance(6)
    assert (await ledger.report("acme")).day.fallback_by_provider == {"anthropic": 900}
    released = await ledger.release("acme", "slow")
    again = await ledger.release("acme", "slow")
    assert (released.released, released.refunded_micros) == (False, 900)
    assert again.refunded_micros == 0
    report = await ledger.report("acme")
    assert (report.day.spent_micros, report.day.fallback_spent_micros) == (0, 0)
    assert report.day.fallback_by_provider == {}


async def test_settling_after_the_hold_expired_corrects_the_reclaim_once(
    ledger: Ledger, clock: ManualClock
) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    await reserve(ledger, "slow", 600, ttl_s=5, fallback=True, provider="anthropic")
    clock.advance(10)
    settled = await ledger.settle("acme", "slow", 500)
    again = await ledger.settle("acme", "slow", 500)
    assert (settled.charged_micros, settled.precharged_micros, settled.reclaimed) == (-100, 600, 1)
    assert (settled.settled_micros, settled.released_hold_micros) == (500, 0)
    assert (settled.fallback, settled.provider) == (True, "anthropic")
    assert again.charged_micros == 0
    report = await ledger.report("acme")
    assert (report.day.spent_micros, report.reserved_micros) == (500, 0)
    assert report.day.fallback_by_provider == {"anthropic": 500}


async def test_an_expired_charge_reserved_again_is_held_afresh(
    ledger: Ledger, clock: ManualClock
) -> None:
    await ledger.set_limits("acme", 2000, 10_000)
    await reserve(ledger, "c1", 600, ttl_s=5)
    clock.advance(6)
    again = await reserve(ledger, "c1", 600)
    assert isinstance(again, Reservation)
    assert (again.replayed, again.reclaimed) == (False, 1)
    report = await ledger.report("acme")
    assert (report.reserved_micros, report.day.spent_micros) == (600, 600)


async def test_settling_without_a_reservation_uses_the_caller_s_provider_and_fallback(
    ledger: Ledger,
) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    settled = await ledger.settle("acme", "late", 70, provider="gemini", fallback=True)
    assert (settled.charged_micros, settled.fallback, settled.provider) == (70, True, "gemini")
    report = await ledger.report("acme")
    assert report.month.fallback_by_provider == {"gemini": 70}
    with pytest.raises(ValueError, match="provider"):
        await ledger.settle("acme", "late2", 70, fallback=True)


async def test_the_fallback_cap_stops_fallback_holds_while_primary_ones_continue(
    ledger: Ledger, clock: ManualClock
) -> None:
    await ledger.set_limits("acme", 10_000, 100_000, fallback_cap_micros=1000)
    assert (await reserve(ledger, "f1", 600, fallback=True, provider="anthropic")).ok
    refused = await reserve(ledger, "f2", 600, fallback=True, provider="gemini")
    assert isinstance(refused, Refusal)
    assert (refused.reason, refused.remaining_micros) == ("fallback_cap_held", 400)
    await ledger.settle("acme", "f1", 600)
    assert (await reserve(ledger, "f3", 400, fallback=True, provider="gemini")).ok
    await ledger.settle("acme", "f3", 400)
    assert not (await reserve(ledger, "f4", 1, fallback=True, provider="gemini")).ok
    assert (await reserve(ledger, "p1", 5000)).ok
    report = await ledger.report("acme")
    assert report.day.fallback_by_provider == {"anthropic": 600, "gemini": 400}
    assert report.day.fallback_spent_micros == 1000
    assert report.fallback_remaining_micros == 0
    clock.advance(86_400)
    assert (await reserve(ledger, "f5", 1000, fallback=True, provider="gemini")).ok


async def test_the_tenant_budget_refusal_comes_before_the_fallback_cap(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 100, 1000, fallback_cap_micros=50)
    refused = await reserve(ledger, "f1", 200, fallback=True)
    assert isinstance(refused, Refusal)
    assert refused.reason == "tenant_budget_exhausted"


async def test_spend_at_the_last_millisecond_of_a_day_belongs_to_that_day(
    ledger: Ledger, clock: ManualClock
) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    clock.set(datetime(2026, 11, 30, 23, 59, 59, 999_000, tzinfo=UTC))
    await reserve(ledger, "late", 1000)
    settled = await ledger.settle("acme", "late", 1000)
    assert settled.day == "2026-11-30"
    assert not (await reserve(ledger, "c1", 1)).ok
    clock.advance(0.001)
    fresh = await ledger.report("acme")
    assert (fresh.day.period, fresh.day.spent_micros, fresh.month.period) == (
        "2026-12-01",
        0,
        "2026-12",
    )
    assert (await reserve(ledger, "c1", 1000)).ok


async def test_a_hold_made_before_midnight_and_settled_after_is_spent_on_the_new_day(
    ledger: Ledger, clock: ManualClock, redis: fakeredis.FakeAsyncRedis
) -> None:
    await ledger.set_limits("acme", 1000, 10_000)
    clock.set(datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC))
    assert (await reserve(ledger, "turn-1:0", 800)).ok
    clock.advance(2)
    assert not (await reserve(ledger, "c2", 300)).ok  # the hold counts on the new day too
    settled = await ledger.settle("acme", "turn-1:0", 700)
    assert (settled.day, settled.month) == ("2026-12-01", "2026-12")
    assert await redis.exists(ledger.keys.day("acme", "2026-11-30")) == 0
    report = await ledger.report("acme")
    assert (report.day.spent_micros, report.month.spent_micros) == (700, 700)


async def test_the_month_resets_on_the_first_utc_day(ledger: Ledger, clock: ManualClock) -> None:
    await ledger.set_limits("acme", 10_000, 10_000)
    clock.set(datetime(2026, 12, 31, 23, 0, tzinfo=UTC))
    await ledger.settle("acme", "dec", 10_000)
    assert not (await reserve(ledger, "c1", 1)).ok
    clock.advance(3600)
    report = await ledger.report("acme")
    assert (report.day.period, report.month.period, report.month.spent_micros) == (
        "2027-01-01",
        "2027-01",
        0,
    )


async def test_lua_utc_periods_match_python_over_boundaries_and_random_instants(
    redis: fakeredis.FakeAsyncRedis,
) -> None:
    edges = [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2000, 2, 29, 23, 59, 59, 999_000, tzinfo=UTC),
        datetime(2024, 2, 29, tzinfo=UTC),
        datetime(2100, 3, 1, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    ]
    rng = random.Random(4)
    instants = [int(e.timestamp() * 1000) + d for e in edges for d in (-1, 0, 1)]
    instants += [rng.randrange(0, 4_102_444_800_000) for _ in range(2000)]
    assert await lua_periods(redis, instants) == [python_periods(ms) for ms in instants]


async def lua_periods(redis: Redis, instants: list[int]) -> list[tuple[str, str]]:
    script = SCRIPTS.lib + (
        "local out = {}\n"
        "for i, ms in ipairs(ARGV) do local d, m = periods(tonumber(ms)); "
        "out[#out + 1] = d; out[#out + 1] = m end\nreturn out"
    )
    flat = await redis.eval(script, 0, *instants)
    return list(zip(flat[::2], flat[1::2], strict=True))


def python_periods(ms: int) -> tuple[str, str]:
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return when.strftime("%Y-%m-%d"), when.strftime("%Y-%m")


async def test_every_key_a_worker_writes_expires_and_operator_keys_do_not(
    ledger: Ledger, redis: fakeredis.FakeAsyncRedis
) -> None:
    await ledger.set_limits("acme", 10_000, 10_000, fallback_cap_micros=500)
    await reserve(ledger, "c1", 100, ttl_s=30)
    await reserve(ledger, "c2", 100, fallback=True, ttl_s=30)
    await ledger.settle("acme", "c2", 90)
    await ledger.release("acme", "c1")
    await reserve(ledger, "c3", 100, ttl_s=30)
    keys = ledger.keys
    permanent = {keys.limits("acme"), keys.tenants()}
    seen = set()
    async for key in redis.scan_iter(match="*"):
        # Every key carries the namespace's hash tag, or its tenant's.
        assert key.startswith(("{t}:", "{t/acme}:")), key
        seen.add(key)
        ttl = await redis.ttl(key)
        assert (ttl == -1) if key in permanent else (ttl > 0), key
    assert {keys.day("acme", "2026-11-30"), keys.month("acme", "2026-11")} <= seen
    assert {keys.held("acme"), keys.holds("acme"), keys.charge("acme", "c2")} <= seen


async def test_set_limits_replaces_and_removes_the_fallback_cap(ledger: Ledger) -> None:
    await ledger.set_limits("acme", 100, 1000, fallback_cap_micros=10)
    assert (await ledger.report("acme")).limits.fallback_cap_micros == 10
    await ledger.set_limits("acme", 200, 2000)
    report = await ledger.report("acme")
    assert report.limits == Limits(200, 2000, None)
    assert report.fallback_remaining_micros is None


async def test_bad_input_is_refused_before_anything_reaches_redis(ledger: Ledger) -> None:
    with pytest.raises(InvalidAmountError):
        await ledger.set_limits("acme", -1, 10)
    with pytest.raises(InvalidNameError):
        await ledger.set_limits("a|b", 1, 10)
    with pytest.raises(InvalidAmountError):
        await reserve(ledger, "c1", -5)
    with pytest.raises(InvalidAmountError, match="ttl_s"):
        await reserve(ledger, "c1", 5, ttl_s=0)
    with pytest.raises(InvalidNameError):
        await reserve(ledger, "c 1", 5)
    with pytest.raises(InvalidNameError):
        await reserve(ledger, "c1", 5, provider="x*")
    with pytest.raises(InvalidAmountError):
        await ledger.settle("acme", "c1", 1.5)  # type: ignore[arg-type]
    assert await ledger.tenants() == []


async def test_tenants_are_listed_sorted_and_namespaces_do_not_mix(
    redis: fakeredis.FakeAsyncRedis, ledger: Ledger
) -> None:
    await ledger.set_limits("zeta", 1, 1)
    await ledger.set_limits("alpha", 1, 1)
    other = Ledger(redis, namespace="other")
    assert await ledger.tenants() == ["alpha", "zeta"]
    assert await other.tenants() == []
    assert not (await reserve(other, "c1", 1, tenant="alpha")).ok


async def test_a_reservation_queues_one_command_on_a_shared_pipeline(
    ledger: Ledger, redis: fakeredis.FakeAsyncRedis
) -> None:
    await ledger.set_limits("acme", 1000, 1000)
    await ledger.load_scripts()
    pipe = redis.pipeline(transaction=False)
    pipe.get("{t}:br:openai")
    parse = ledger.reserve_on(
        pipe, "acme", "c1", provider="openai", micros=10, fallback=False, ttl_s=5
    )
    assert len(pipe) == 2
    breaker, raw = await pipe.execute()
    assert breaker is None
    result = parse(raw)
    assert isinstance(result, Reservation)
    assert result.micros == 10
    pipe = redis.pipeline(transaction=True)
    parse_settle = ledger.settle_on(pipe, "acme", "c1", 7)
    parse_release = ledger.release_on(pipe, "acme", "c1")
    # The first settlement of a tenant in a process also adds it to the tenants set.
    settle_raw, registered, release_raw = await pipe.execute()
    assert registered == 0  # set_limits had
    assert parse_settle(settle_raw).charged_micros == 7
    assert not parse_release(release_raw).released


async def test_a_flushed_script_cache_is_reloaded_once(
    ledger: Ledger, redis: fakeredis.FakeAsyncRedis
) -> None:
    await ledger.set_limits("acme", 1000, 1000)
    assert (await reserve(ledger, "c1", 10)).ok
    await redis.script_flush()
    assert (await reserve(ledger, "c2", 10)).ok


async def test_a_parser_raises_the_error_a_pipeline_handed_it(
    ledger: Ledger, redis: fakeredis.FakeAsyncRedis
) -> None:
    await redis.script_flush()
    pipe = redis.pipeline(transaction=False)
    parse = ledger.release_on(pipe, "acme", "c1")
    (raw,) = await pipe.execute(raise_on_error=False)
    with pytest.raises(NoScriptError):
        parse(raw)


async def test_handoffs_are_listed_newest_first_and_capped(
    redis: fakeredis.FakeAsyncRedis,
) -> None:
    handoffs = Handoffs(redis, namespace="t", maxlen=5)
    for index in range(300):
        await handoffs.push("acme", f"turn-{index}", "tenant_budget_exhausted", f'{{"n": {index}}}')
    listed = await handoffs.list(3)
    assert [h.turn_id for h in listed] == ["turn-299", "turn-298", "turn-297"]
    assert listed[0].payload == '{"n": 299}'
    assert listed[0].reason == "tenant_budget_exhausted"
    assert listed[0].at_ms > 0
    # MAXLEN ~ trims whole stream nodes (100 entries each), so the length stays near the cap.
    assert 5 <= await handoffs.length() <= 200
    with pytest.raises(InvalidNameError):
        await handoffs.push("a b", "t", "reason", "{}")
