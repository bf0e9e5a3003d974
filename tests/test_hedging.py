"""Hedged attempts over real HTTP to the simulator: who wins, what is closed and charged,
when no hedge may start (content sent, deadline, budget), and the fleet's budget under
several processes on real Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from breakers import HedgeStore
from breakers.hedges import EDGES_MS
from breakers.keys import Keys
from tests.chainkit import settings, turn
from tests.fleetkit import Job, Workers, make_request
from worker.adapters import make_client
from worker.guard import Availability, Target
from worker.guard.hedge_book import FleetHedges, LocalHedges, hedge_book
from worker.guard.redis_guard import open_guard
from worker.guard.testing import ScriptedGuard
from worker.observability import TurnMetrics
from worker.settings import HedgingSettings, Settings
from worker.simulator import Fault, Simulator
from worker.simulator.state import SimState
from worker.turn.chain import Chain
from worker.types import AttemptOutcome, Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


TWO = ("openai/alpha", "anthropic/beta")
# No evidence yet: every attempt waits the fallback; each normal attempt earns one hedge.
QUICK = {"enabled": True, "fallback_s": 0.15, "min_samples": 1000, "budget_share": 1.0}


def _config(sim: Simulator, chain: tuple[str, ...] = TWO, **hedging: Any) -> Settings:
    return settings(sim.url, chain, hedging={**QUICK, **hedging})


async def _turns(
    config: Settings, *requests: TurnRequest, guard: ScriptedGuard | None = None
) -> list[TurnResult]:
    """Run `requests` one after another on one chain: a healthy first one earns the budget."""
    async with make_client() as client:
        chain = Chain.from_settings(config, client, guard=guard)
        return [await chain.run(request) for request in requests]


def _outcomes(result: TurnResult) -> list[tuple[str, str, str | None]]:
    return [(a.provider_model, a.outcome.value, a.error_class) for a in result.attempts]


async def _closed(sim: Simulator, model: str) -> int:
    """Calls of `model` the client closed while the simulator kept them silent."""
    for _ in range(50):
        if sim.calls(model, "stalled"):
            break
        await asyncio.sleep(0.02)
    return sim.calls(model, "stalled")


async def test_a_hedge_that_sends_content_first_wins_and_the_primary_is_closed(
    sim: Simulator,
) -> None:
    guard = ScriptedGuard()
    warm, slow = turn(), turn()
    config = _config(sim)
    async with make_client() as client:
        chain = Chain.from_settings(config, client, guard=guard)
        await chain.run(warm)
        sim.set_faults("alpha", Fault(latency_s=3.0, times=1))
        started = time.monotonic()
        result = await chain.run(slow)
    elapsed = time.monotonic() - started

    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    assert result.step == 1
    assert _outcomes(result) == [("alpha", "hedge_lost", "hedged"), ("beta", "ok", None)]
    assert elapsed < 1.0  # the hedge at 0.15 s, not the primary's 3 s
    assert await _closed(sim, "alpha") == 1
    # The primary was not streamed: cut, it may have written a whole answer that nothing
    # counts, which the provider bills. It is charged its worst case.
    charged = {
        c.provider: (c.worst, cost)
        for _, c, _, cost in guard.concluded
        if c.charge_id.startswith(slow.turn_id)
    }
    worst, settled = charged["oa"]
    assert settled is not None
    assert settled == worst
    assert result.attempts[0].charged_micros == settled
    assert result.cost_micros == settled + (charged["an"][1] or 0)
    metrics = TurnMetrics()
    metrics.record(result)
    sample = metrics.registry.get_sample_value
    assert sample("relevo_hedges_total", {"outcome": "won"}) == 1
    assert sample("relevo_hedge_wasted_micros_total") == settled


async def test_a_primary_that_sends_content_first_wins_and_the_hedge_is_closed(
    sim: Simulator,
) -> None:
    config = _config(sim)
    sim.set_faults("alpha", Fault(times=1), Fault(latency_s=0.4, times=1))
    sim.set_faults("beta", Fault(latency_s=3.0))
    warm, result = await _turns(config, turn(), turn())

    assert warm.status is Status.OK
    assert result.status is Status.OK
    assert result.effective_model == "openai/alpha"
    assert _outcomes(result) == [("alpha", "ok", None), ("beta", "hedge_lost", "hedge")]
    assert await _closed(sim, "beta") == 1


async def test_no_hedge_once_content_has_streamed(sim: Simulator) -> None:
    config = _config(sim)
    # The first piece at once, then silence far past the hedge delay.
    sim.set_faults("alpha", Fault(times=1), Fault(stall_after_tokens=1, stall_after_s=0.5))
    texts: list[str] = []
    async with make_client() as client:
        chain = Chain.from_settings(config, client)
        await chain.run(turn())
        result = await chain.run(turn(stream=True), on_text=texts.append)

    assert result.status is Status.OK
    assert result.effective_model == "openai/alpha"
    assert [a.outcome for a in result.attempts] == [AttemptOutcome.OK]
    assert sim.calls("beta") == 0
    assert texts


async def test_no_hedge_starts_that_the_deadline_leaves_no_time_for(sim: Simulator) -> None:
    config = _config(sim)
    sim.set_faults("alpha", Fault(times=1), Fault(latency_s=3.0, times=1))
    started = time.monotonic()
    _, result = await _turns(config, turn(), turn(deadline_s=0.25))
    elapsed = time.monotonic() - started

    # At 0.15 s, 0.1 s is left: less than the hedge's own delay.
    assert result.reason == "deadline_exceeded"
    assert sim.calls("beta") == 0
    assert elapsed < 0.8
    assert await _closed(sim, "alpha") == 1


async def test_a_hedge_in_flight_ends_with_the_turn_at_its_deadline(sim: Simulator) -> None:
    config = _config(sim)
    sim.set_faults("alpha", Fault(times=1), Fault(latency_s=3.0, times=1))
    sim.set_faults("beta", Fault(latency_s=3.0))
    started = time.monotonic()
    _, result = await _turns(config, turn(), turn(deadline_s=0.4))
    elapsed = time.monotonic() - started

    assert result.reason == "deadline_exceeded"
    assert _outcomes(result) == [
        ("alpha", "error", "interrupted"),
        ("beta", "error", "interrupted"),
    ]
    assert elapsed < 1.0
    assert await _closed(sim, "alpha") == 1
    assert await _closed(sim, "beta") == 1


async def test_hedges_stay_within_the_budget_normal_attempts_earn(sim: Simulator) -> None:
    # Half a hedge per normal attempt, none to start with.
    config = _config(sim, budget_share=0.5)
    sim.set_faults("alpha", Fault(latency_s=0.4))
    results = await _turns(config, *(turn() for _ in range(4)))

    hedged = [any(a.outcome is AttemptOutcome.HEDGE_LOST for a in r.attempts) for r in results]
    # Earned before each turn: 0, 0.5, 1 (spent on the third), 0.5 + 0.5 (the hedged
    # primary earns, the hedge does not).
    assert hedged == [False, False, True, False]
    assert sim.calls("beta") == 1


async def test_the_hedge_goes_to_the_first_target_the_walk_may_call(sim: Simulator) -> None:
    # beta's breaker is open: the hedge skips it, as the walk would, and calls gamma.
    config = _config(sim, chain=("openai/alpha", "anthropic/beta", "google/gamma"))
    guard = ScriptedGuard({"beta": Availability.OPEN})
    sim.set_faults("alpha", Fault(times=1), Fault(latency_s=3.0, times=1))
    _, result = await _turns(config, turn(), turn(), guard=guard)

    assert result.effective_model == "google/gamma"
    assert sim.calls("beta") == 0
    assert _outcomes(result)[0] == ("alpha", "hedge_lost", "hedged")


def test_the_delay_is_a_percentile_of_first_byte_latency_with_a_floor_and_a_fallback() -> None:
    plan = HedgingSettings(enabled=True, percentile=90, min_samples=20, fallback_s=2.0)
    book = LocalHedges(plan, clock=lambda: 1000.0)
    target = Target("openai/alpha", "openai", "oa", "alpha")
    for _ in range(19):
        book.observe(target, 0.4, hedge=False)
    assert book.delay_s(target) == 2.0  # 19 samples: the fallback
    book.observe(target, 3.0, hedge=False)
    delay = book.delay_s(target)
    assert 0.4 <= delay < 0.4 * 2 ** (1 / 8)  # the upper edge of 0.4 s's bucket
    floored = LocalHedges(plan.model_copy(update={"floor_s": 1.0}), clock=lambda: 1000.0)
    for _ in range(20):
        floored.observe(target, 0.4, hedge=False)
    assert floored.delay_s(target) == 1.0
    assert EDGES_MS[0] == 10


@pytest.mark.slow
def test_the_fleet_spends_no_more_hedges_than_its_attempts_earned(
    sim: Simulator, workers: Workers, redis_url: str, namespace: str
) -> None:
    hedging = {**QUICK, "budget_share": 0.1, "burst": 100}
    # A round trip slower than the default 0.25 s on a loaded machine drops its samples
    # (evidence is never retried): counting every one needs them all to land.
    store = {"url": redis_url, "namespace": namespace, "timeout_s": 2.0}
    # A hedge is counted by the primary it cut (hedge_lost): a slow primary (0.4 s) must not
    # reach a first-byte timeout first (0.5 s by default; under load it did, and a turn that
    # spent a hedge counted none). Nor may a late first byte add warm-up attempts.
    sections: dict[str, Any] = {"redis": store, "first_byte_timeout_s": 2.0}
    # The warm-up waits 5 s before any hedge: it only earns.
    config = settings(sim.url, hedging={**hedging, "fallback_s": 5.0}, **sections)

    async def warm_up() -> int:
        guard = open_guard(config)
        book = hedge_book(config, guard)
        assert isinstance(book, FleetHedges)
        async with make_client() as client:
            chain = Chain.from_settings(config, client, guard=guard, hedges=book)
            results = await asyncio.gather(*(chain.run(make_request()) for _ in range(40)))
        await book.aclose()
        await guard.aclose()
        return sum(a.outcome is not AttemptOutcome.SKIPPED for r in results for a in r.attempts)

    async def bucket() -> int:
        redis = Redis.from_url(redis_url)
        try:
            return int(await redis.hget(Keys(namespace).hedge_budget, "milli") or 0)
        finally:
            await redis.aclose()

    warm = asyncio.run(warm_up())  # 40 (more if a first byte was late under load)
    assert asyncio.run(bucket()) == 100 * warm  # each attempt earned 0.1 hedge

    # Twenty slow turns at once over four processes: each wants a hedge, 4 or so are earned.
    sim.set_faults("alpha", Fault(latency_s=0.4))  # within its first-byte timeout
    requests = tuple(make_request().model_dump_json() for _ in range(5))
    job = Job(sim.url, {**sections, "hedging": hedging}, requests=requests)
    with workers.fleet([job] * 4) as fleet:
        fleet.go()
        reports = fleet.reports()
    turns = [t for r in reports for t in r.turns]
    hedges = sum(any(a.outcome == "hedge_lost" for a in t.attempts) for t in turns)
    assert len(turns) == 20
    assert all(t.status == "ok" for t in turns)
    # Every hedged primary earns 0.1 as it is cut: at most two more than those earned.
    assert warm // 10 <= hedges <= warm // 10 + 2
    # Nothing lost or spent twice: what the normal attempts earned, less the hedges.
    calls = sum(a.outcome != "skipped" for t in turns for a in t.attempts)
    assert asyncio.run(bucket()) == 100 * (warm + calls - hedges) - 1000 * hedges


async def test_the_fleet_book_keeps_first_byte_evidence_in_redis(
    redis_url: str, namespace: str
) -> None:
    config = settings("http://127.0.0.1:1", redis={"url": redis_url, "namespace": namespace})
    guard = open_guard(config)
    book = hedge_book(config, guard)
    target = Target("openai/alpha", "openai", "oa", "alpha")
    try:
        await guard.circuits.fleet.load_scripts()
        for _ in range(60):
            book.observe(target, 0.4, hedge=False)
        book.observe(target, 3.0, hedge=True)
        await asyncio.sleep(0.05)  # the samples ride the guard's auto-pipeline
        store = HedgeStore(guard.redis, namespace=namespace)
        counts = await store.counts("oa", "alpha")
        assert sum(counts.values()) == 61
        # 60 normal attempts x 0.05 = 3 hedges; the hedge itself earned nothing.
        assert [await book.take() for _ in range(4)] == [True, True, True, False]
    finally:
        await guard.aclose()


async def test_ten_attempts_at_a_tenth_earn_exactly_one_hedge() -> None:
    # In floats, ten tenths make 0.9999999999999999: the bucket counts thousandths.
    book = LocalHedges(HedgingSettings(enabled=True, budget_share=0.1))
    target = Target("openai/alpha", "openai", "oa", "alpha")
    for _ in range(10):
        book.observe(target, None, hedge=False)
    assert [await book.take(), await book.take()] == [True, False]


def test_the_simulator_draws_first_byte_latencies_from_a_seeded_mix() -> None:
    def draws(seed: int) -> list[float]:
        state = SimState(seed)
        state.set_faults("alpha", (Fault(latency_mix=((0.9, 0.4), (0.1, 3.0))),))
        return [fault.latency_s for fault in (state.take("alpha") for _ in range(1000)) if fault]

    first = draws(7)
    assert first == draws(7)
    assert set(first) == {0.4, 3.0}
    assert 70 <= first.count(3.0) <= 130
    with pytest.raises(ValueError, match="latency_mix"):
        Fault(latency_mix=((0.8, 0.4), (0.3, 3.0)))
