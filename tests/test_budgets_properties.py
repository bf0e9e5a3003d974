"""The overdraft bound, for any order of reserves, settlements, releases and reclaims.

The ledger's rule (docs/budgets.md): an attempt is admitted only when held + expected
fits the limit and held worst cases + its worst case fit the limit plus the overdraft.
Every charge costs at most its worst case, so spend never passes limit + overdraft,
and with overdraft 0 and reservations at their worst case nothing is ever overspent.
One history steps outside: a settlement that arrives after its hold was reclaimed (its
worker lost Redis for longer than `hold_ttl_s`) may add up to worst - expected beyond
the bound, as docs/budgets.md says. Hypothesis drives the real Lua (fakeredis with
lupa) through random histories.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import fakeredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgets import Ledger, Refusal, Reservation
from budgets.testing import ManualClock

LIMIT = 10_000
HOLD_TTL_S = 5
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (expected, worst) of an attempt; then what it turns out to cost, as a share of worst.
ATTEMPT = st.tuples(st.integers(1, 3_000), st.integers(0, 6_000)).map(
    lambda pair: (pair[0], pair[0] + pair[1])
)
RESERVE = st.tuples(st.just("reserve"), ATTEMPT)
# Reserves weigh most: the bound is about many attempts in flight at once.
STEP = st.one_of(
    RESERVE,
    RESERVE,
    RESERVE,
    st.tuples(st.just("settle"), st.floats(0, 1)),
    st.tuples(st.just("release"), st.none()),
    st.tuples(st.just("wait"), st.floats(0, 2 * HOLD_TTL_S)),
)


async def play(overdraft: int, steps: list[tuple[str, object]]) -> list[tuple[int, int, int]]:
    """Run `steps`; after each, (spent, held worst cases) as the ledger reports them, and
    what late settlements added beyond their reservations so far."""
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    clock = ManualClock(datetime(2026, 12, 1, 1, 0, tzinfo=UTC))
    ledger = Ledger(redis, namespace="p", clock_ms=clock)
    await ledger.set_limits("acme", LIMIT, 10 * LIMIT, overdraft_micros=overdraft)
    live: list[tuple[str, int, int, float]] = []  # charge id, expected, worst, reserved at
    seen: list[tuple[int, int, int]] = []
    now_s, late = 0.0, 0
    try:
        for n, (kind, arg) in enumerate(steps):
            if kind == "reserve":
                assert isinstance(arg, tuple)
                expected, worst = arg
                got = await ledger.reserve(
                    "acme",
                    f"c{n}",
                    provider="oa",
                    micros=expected,
                    worst_micros=worst,
                    fallback=False,
                    ttl_s=HOLD_TTL_S,
                )
                assert isinstance(got, Reservation | Refusal)
                if got.ok:
                    live.append((f"c{n}", expected, worst, now_s))
            elif kind == "settle" and live:
                assert isinstance(arg, float)
                charge, expected, worst, at = live.pop(0)
                actual = int(worst * arg)  # reclaimed or not, at most its worst case
                if now_s - at >= HOLD_TTL_S:
                    late += max(0, actual - expected)
                await ledger.settle("acme", charge, actual)
            elif kind == "release" and live:
                await ledger.release("acme", live.pop(0)[0])
            elif kind == "wait":
                assert isinstance(arg, float)
                clock.advance(arg)
                now_s += arg
            report = await ledger.report("acme")
            seen.append((report.day.spent_micros, report.reserved_worst_micros, late))
    finally:
        await redis.aclose()
    return seen


@FAST
@given(st.integers(0, 5_000), st.lists(STEP, min_size=5, max_size=40))
def test_spend_and_worst_cases_in_flight_never_pass_the_limit_plus_the_overdraft(
    overdraft: int, steps: list[tuple[str, object]]
) -> None:
    for spent, held_worst, late in asyncio.run(play(overdraft, steps)):
        assert spent <= LIMIT + overdraft + late
        assert spent + held_worst <= LIMIT + overdraft + late


@FAST
@given(st.lists(st.tuples(st.just("reserve"), st.integers(1, 3_000)), min_size=1, max_size=30))
def test_reserving_worst_cases_with_no_overdraft_holds_no_more_than_the_limit(
    attempts: list[tuple[str, int]],
) -> None:
    steps: list[tuple[str, object]] = [(kind, (worst, worst)) for kind, worst in attempts]
    for spent, held_worst, _ in asyncio.run(play(0, steps)):
        assert spent + held_worst <= LIMIT
