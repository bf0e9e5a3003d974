"""The breaker state machine, cooldowns, marks, kill switch and held turns.

Every test runs twice: on fakeredis with Lua (the in-process store) and on the real Redis
server, with the same Lua scripts. Breaks, probe slots, cooldowns and marks elapse on a
`ManualClock` (tests/test_breakers_fleet.py waits for them in real time).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from breakers import (
    BreakerState,
    Cooldown,
    CooldownPolicy,
    Exhausted,
    FleetBreakers,
    HeldTurns,
    KillSwitch,
    Outcome,
    Pair,
    Policy,
    Transition,
    TransitionKind,
    Verdict,
    connect,
    in_memory,
)
from breakers.testing import ManualClock

V = Verdict

SCOPE = "vendor:openai"
FAST = Policy(
    window_s=10,
    min_calls_in_window=3,
    failure_rate_threshold=0.5,
    consecutive_failures_threshold=100,
    break_s=0.2,
    max_break_s=1.0,
    probe_ttl_s=0.3,
)

MakeStore = Callable[..., FleetBreakers]


# The real-Redis case reaches `redis_url` by getfixturevalue, out of the hook's sight: marked here.
@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    if request.param == "fakeredis":
        redis = in_memory()
    else:
        redis = connect(request.getfixturevalue("redis_url"), timeout_s=2.0)
    try:
        yield redis
    finally:
        await redis.aclose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC))


@pytest.fixture
def make_store(client: Redis, namespace: str, clock: ManualClock) -> MakeStore:
    def make(policy: Policy = FAST, **kwargs: object) -> FleetBreakers:
        return FleetBreakers(
            client,
            namespace=namespace,
            policy=policy,
            clock_ms=clock,
            **kwargs,  # type: ignore[arg-type]
        )

    return make


async def record(store: FleetBreakers, *verdicts: V, holder: str | None = None) -> list[Transition]:
    out: list[Transition] = []
    for v in verdicts:
        out += await store.record([Outcome(SCOPE, v, holder)])
    return out


async def state(store: FleetBreakers, scope: str = SCOPE) -> BreakerState:
    return (await store.check([scope])).scopes[scope].state


async def open_then_wait_half_open(store: FleetBreakers, clock: ManualClock) -> None:
    assert await record(store, V.FAILURE, V.FAILURE, V.FAILURE)
    clock.advance(store.policy.break_s - 0.001)
    assert await state(store) is BreakerState.OPEN
    clock.advance(0.001)
    assert await state(store) is BreakerState.HALF_OPEN


async def test_two_failures_in_three_calls_trip_the_breaker(make_store: MakeStore) -> None:
    store = make_store()
    assert await record(store, V.FAILURE, V.SUCCESS) == []
    assert await record(store, V.FAILURE) == [Transition(SCOPE, TransitionKind.OPENED, 0.2)]
    assert await state(store) is BreakerState.OPEN


async def test_alternating_failures_trip_on_rate_where_a_streak_count_never_would(
    make_store: MakeStore,
) -> None:
    store = make_store(Policy(min_calls_in_window=6, consecutive_failures_threshold=2))
    transitions = await record(store, V.SUCCESS, V.FAILURE, V.SUCCESS, V.FAILURE, V.SUCCESS)
    assert transitions == []
    assert [t.kind for t in await record(store, V.FAILURE)] == [TransitionKind.OPENED]


async def test_below_min_calls_never_trips(make_store: MakeStore) -> None:
    store = make_store(Policy(min_calls_in_window=10, consecutive_failures_threshold=100))
    assert await record(store, *[V.FAILURE] * 9) == []
    assert await state(store) is BreakerState.CLOSED


async def test_failures_that_left_the_window_no_longer_count(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    assert await record(store, V.FAILURE, V.FAILURE) == []
    clock.advance(FAST.window_s)
    assert await record(store, V.FAILURE, V.FAILURE) == []  # 2 of 3 calls, but 2 are gone
    assert [t.kind for t in await record(store, V.FAILURE)] == [TransitionKind.OPENED]


def test_the_same_store_on_another_client_keeps_its_clock(
    make_store: MakeStore, clock: ManualClock
) -> None:
    assert make_store().with_redis(in_memory()).clock_ms is clock


async def test_consecutive_failures_trip_and_a_success_resets_the_streak(
    make_store: MakeStore,
) -> None:
    store = make_store(Policy(min_calls_in_window=100, consecutive_failures_threshold=3))
    assert await record(store, V.FAILURE, V.FAILURE, V.SUCCESS, V.FAILURE, V.FAILURE) == []
    assert [t.kind for t in await record(store, V.FAILURE)] == [TransitionKind.OPENED]


async def test_neutral_counts_neither_as_call_nor_as_success(make_store: MakeStore) -> None:
    store = make_store(Policy(min_calls_in_window=4, failure_rate_threshold=1.0))
    assert await record(store, V.FAILURE, V.NEUTRAL, V.FAILURE, V.NEUTRAL, V.FAILURE) == []
    # Had NEUTRAL counted as a call, 4 failures in 6 calls would stay under a 100 % rate.
    assert [t.kind for t in await record(store, V.FAILURE)] == [TransitionKind.OPENED]


async def test_open_breaker_refuses_callers_and_ignores_late_results(
    make_store: MakeStore,
) -> None:
    store = make_store(Policy(min_calls_in_window=3, break_s=5, max_break_s=10))
    await record(store, V.FAILURE, V.FAILURE, V.FAILURE)
    scope = (await store.check([SCOPE])).scopes[SCOPE]
    assert scope.state is BreakerState.OPEN
    assert scope.retry_in_s == 5
    assert not scope.callable
    assert await store.acquire_probe(SCOPE, "w1") is False
    assert await record(store, V.SUCCESS, V.FAILURE) == []
    assert await state(store) is BreakerState.OPEN


async def test_half_open_admits_one_probe_and_only_its_success_closes(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    await open_then_wait_half_open(store, clock)
    assert (await store.check([SCOPE])).scopes[SCOPE].probe_free
    assert await store.acquire_probe(SCOPE, "w1") is True
    assert await store.acquire_probe(SCOPE, "w1") is True  # the holder asking again keeps it
    assert await store.acquire_probe(SCOPE, "w2") is False
    assert not (await store.check([SCOPE])).scopes[SCOPE].probe_free
    # Results of other calls arriving meanwhile neither close nor re-open it.
    assert await record(store, V.SUCCESS, V.FAILURE, holder="w2") == []
    assert await record(store, V.SUCCESS, V.FAILURE) == []
    assert await state(store) is BreakerState.HALF_OPEN
    assert await record(store, V.SUCCESS, holder="w1") == [Transition(SCOPE, TransitionKind.CLOSED)]
    assert await state(store) is BreakerState.CLOSED
    assert await store.acquire_probe(SCOPE, "w2") is True  # closed: anyone may call


async def test_failed_probe_reopens_with_a_longer_jittered_break(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store(Policy(min_calls_in_window=3, break_s=0.2, max_break_s=0.3))
    await open_then_wait_half_open(store, clock)
    assert await store.acquire_probe(SCOPE, "w1")
    (t,) = await record(store, V.FAILURE, holder="w1")
    assert t.kind is TransitionKind.REOPENED
    assert t.break_s is not None
    assert 0.3 * 0.8 <= t.break_s <= 0.3  # doubled, capped at max_break_s, minus jitter
    assert await state(store) is BreakerState.OPEN


async def test_probe_of_a_dead_holder_expires_and_its_late_result_is_ignored(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    await open_then_wait_half_open(store, clock)
    assert await store.acquire_probe(SCOPE, "dead")
    clock.advance(FAST.probe_ttl_s - 0.001)
    assert not await store.acquire_probe(SCOPE, "next")
    clock.advance(0.001)
    assert await store.acquire_probe(SCOPE, "next")
    assert await record(store, V.SUCCESS, holder="dead") == []
    assert [t.kind for t in await record(store, V.FAILURE, holder="next")] == [
        TransitionKind.REOPENED
    ]


async def test_neutral_result_of_the_holder_frees_the_probe_slot(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    await open_then_wait_half_open(store, clock)
    assert await store.acquire_probe(SCOPE, "w1")
    assert await record(store, V.NEUTRAL, holder="w1") == []
    assert await store.acquire_probe(SCOPE, "w2")
    assert await state(store) is BreakerState.HALF_OPEN


async def test_configured_probes_are_admitted_and_no_more(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store(Policy(min_calls_in_window=3, break_s=0.2, probe_ttl_s=5, probes=2))
    await open_then_wait_half_open(store, clock)
    got = [await store.acquire_probe(SCOPE, f"w{i}") for i in range(5)]
    assert got == [True, True, False, False, False]


async def test_concurrent_failures_produce_one_opened_transition(make_store: MakeStore) -> None:
    store = make_store()
    results = await asyncio.gather(*(store.record([Outcome(SCOPE, V.FAILURE)]) for _ in range(30)))
    kinds = [t.kind for batch in results for t in batch]
    assert kinds == [TransitionKind.OPENED]


async def test_model_and_vendor_scopes_record_in_one_call(make_store: MakeStore) -> None:
    store = make_store()
    model = "model:openai/gpt-5@azure-east"
    batch = [Outcome(model, V.FAILURE), Outcome(SCOPE, V.FAILURE)]
    assert await store.record(batch) == []
    assert await store.record(batch) == []
    got = await store.record(batch)
    assert {(t.scope, t.kind) for t in got} == {
        (model, TransitionKind.OPENED),
        (SCOPE, TransitionKind.OPENED),
    }
    states = (await store.check([model, SCOPE, "vendor:anthropic"])).scopes
    assert [s.state for s in states.values()] == [
        BreakerState.OPEN,
        BreakerState.OPEN,
        BreakerState.CLOSED,
    ]


async def test_rate_limit_cools_the_pair_down_until_it_expires(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store(cooldowns=CooldownPolicy(default_cooldown_s=4, max_cooldown_s=5))
    pair, other = Pair("acct-a", "gpt-5"), Pair("acct-a", "gpt-5-mini")
    assert await store.record([Cooldown(*pair, seconds=3), Cooldown(*other)]) == []
    assert (await store.check([], [pair, other])).cooldowns == {pair: 3, other: 4}  # default
    await store.record([Cooldown(*pair, seconds=0.5)])  # a shorter one never shortens it
    assert (await store.check([], [pair])).cooldowns[pair] == 3
    await store.record([Cooldown(*pair, seconds=3600)])  # capped at max_cooldown_s
    assert (await store.check([], [pair])).cooldowns[pair] == 5
    clock.advance(4.999)
    assert (await store.check([], [pair, other])).cooldowns == {pair: 0.001, other: 0.0}
    clock.advance(0.001)
    assert (await store.check([], [pair, other])).cooldowns == {pair: 0.0, other: 0.0}


@pytest.mark.parametrize("seconds", [0, -2.5])
async def test_a_hint_to_retry_now_is_the_shortest_cooldown_not_the_default(
    make_store: MakeStore, clock: ManualClock, seconds: float
) -> None:
    """Retry-After: 0, or a date already past: a 1 ms cooldown (real Redis may drop it sooner)."""
    store = make_store(cooldowns=CooldownPolicy(default_cooldown_s=4, max_cooldown_s=5))
    pair = Pair("acct-a", "gpt-5")
    await store.record([Cooldown(*pair, seconds=seconds)])
    assert (await store.check([], [pair])).cooldowns[pair] <= 0.001
    clock.advance(0.001)
    assert (await store.check([], [pair])).cooldowns == {pair: 0.0}


async def test_rate_limit_adds_nothing_to_the_failure_rate(make_store: MakeStore) -> None:
    store = make_store()
    for _ in range(5):
        got = await store.record([Outcome(SCOPE, V.NEUTRAL), Cooldown("acct", "m", seconds=1)])
        assert got == []
    assert await state(store) is BreakerState.CLOSED


async def test_a_mark_longer_than_the_index_ttl_keeps_the_index_alive(
    make_store: MakeStore, client: Redis
) -> None:
    # The check reads marks from the index: it must not expire before its longest mark.
    store = make_store(cooldowns=CooldownPolicy(exhausted_ttl_s=30))
    await store.record([Exhausted("acct-a", seconds=1_000_000)])
    assert store.index_ttl_ms < 100_000_000 < await client.pttl(store.keys.exhausted_index)
    assert (await store.check([], accounts=["acct-a"])).exhausted == {"acct-a": True}


async def test_exhausted_mark_lasts_its_ttl(make_store: MakeStore, clock: ManualClock) -> None:
    store = make_store(cooldowns=CooldownPolicy(exhausted_ttl_s=30))
    await store.record([Exhausted("acct-a")])
    assert (await store.check([], accounts=["acct-a", "acct-b"])).exhausted == {
        "acct-a": True,
        "acct-b": False,
    }
    clock.advance(29.999)
    assert (await store.check([], accounts=["acct-a"])).exhausted == {"acct-a": True}
    clock.advance(0.001)
    assert (await store.check([], accounts=["acct-a"])).exhausted == {"acct-a": False}


async def test_kill_switch_says_who_why_and_when(client: Redis, make_store: MakeStore) -> None:
    store = make_store()
    switch = KillSwitch(client, namespace=store.keys.namespace)
    assert await switch.status() is None
    assert (await store.check([SCOPE])).kill_switch is None
    on = await switch.on("alice", "provider bill runaway")
    assert on.who == "alice"
    assert on.since_ms > 1_600_000_000_000
    assert (await store.check([SCOPE])).kill_switch == on
    assert await switch.status() == on
    assert await switch.off("bob") == on
    assert await switch.off("bob") is None
    assert (await store.check([SCOPE])).kill_switch is None


async def test_held_turns_are_taken_once_oldest_first(client: Redis, namespace: str) -> None:
    held = HeldTurns(client, namespace=namespace)
    for i in range(5):
        await held.hold(f"turn-{i}", f'{{"n": {i}}}')
    assert [h.turn_id for h in await held.held()] == [f"turn-{i}" for i in range(5)]
    first, second = await asyncio.gather(held.take(3), held.take(3))
    taken = [h.turn_id for h in first + second]
    assert sorted(taken) == [f"turn-{i}" for i in range(5)]
    assert len(set(taken)) == 5
    assert first[0].payload in ('{"n": 0}', '{"n": 3}')
    assert await held.take() == []
    assert await held.count() == 0


async def test_one_pipeline_carries_the_check_and_another_command(make_store: MakeStore) -> None:
    store = make_store()
    await store.load_scripts()
    await store.record([Cooldown("acct", "m", seconds=5)])
    async with store.redis.pipeline(transaction=True) as pipe:
        parse_check = store.check_on(pipe, [SCOPE], [("acct", "m")], ["acct"])
        pipe.incrby(f"{store.keys.namespace}:other-counter", 7)
        parse_record = store.record_on(pipe, [Outcome(SCOPE, V.SUCCESS)])
        checked, counter, recorded = await pipe.execute()
    fleet = await parse_check(checked)
    assert fleet.scopes[SCOPE].state is BreakerState.CLOSED
    assert fleet.cooldowns[Pair("acct", "m")] > 4
    assert counter == 7
    assert await parse_record(recorded) == []
    await store.redis.delete(f"{store.keys.namespace}:other-counter")
