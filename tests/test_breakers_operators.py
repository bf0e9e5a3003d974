"""Operator views and commands, key names and TTLs, policies, scripts and the public surface."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from breakers import (
    BreakerState,
    Cooldown,
    CooldownReport,
    Exhausted,
    FleetBreakers,
    Gone,
    HeldTurns,
    InvalidNameError,
    InvalidPolicyError,
    KillSwitch,
    Operators,
    Outcome,
    Pair,
    Policy,
    StoreUnavailableError,
    UnknownScopeError,
    Verdict,
    connect,
    in_memory,
    validate_name,
)
from breakers.keys import Keys
from breakers.testing import ManualClock
from tests.netkit import free_port

V = Verdict

SCOPE = "vendor:openai"
POLICY = Policy(min_calls_in_window=3, break_s=0.2, max_break_s=1, probe_ttl_s=5)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = connect(redis_url, timeout_s=2.0)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC))


@pytest.fixture
def store(redis: Redis, namespace: str, clock: ManualClock) -> FleetBreakers:
    return FleetBreakers(
        redis, namespace=namespace, policy=POLICY, scopes=["vendor:configured"], clock_ms=clock
    )


@pytest.mark.parametrize(
    "name",
    ["vendor:openai", "model:openai/gpt-5@azure-east", "llama3:8b", "a", "x" * 200, "w-1.2_3"],
)
def test_plain_names_are_accepted(name: str) -> None:
    assert validate_name(name) == name
    assert Keys("ns").breaker(name) == "{ns}:br:" + name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "must not be empty"),
        ("x" * 201, "at most 200 characters"),
        ("vendor:*", "only"),
        ("vendor:{openai}", "only"),
        ("vendor openai", "only"),
        ("vendor:open\nai", "only"),
        ("model:../x", "'..'"),
        (":leading", "start with"),
        ("acct|model", "only"),
    ],
)
def test_names_that_could_break_a_key_are_rejected_with_a_reason(name: str, why: str) -> None:
    with pytest.raises(InvalidNameError, match=why):
        validate_name(name, "scope")
    with pytest.raises(InvalidNameError):
        Outcome(name, V.FAILURE)


def test_namespace_is_validated_and_is_the_cluster_hash_tag() -> None:
    keys = Keys("relevo")
    assert keys.kill == "{relevo}:kill"
    assert keys.cooldown("acct", "llama3:8b") == "{relevo}:cool:acct|llama3:8b"
    with pytest.raises(InvalidNameError):
        Keys("re levo")


@pytest.mark.parametrize(
    "bad",
    [
        {"window_s": 0},
        {"failure_rate_threshold": 1.5},
        {"min_calls_in_window": 2.5},
        {"probes": 0},
        {"break_s": 10, "max_break_s": 5},
        {"break_jitter_ratio": 1},
        {"probe_ttl_s": math.nan},
    ],
)
def test_policy_rejects_values_out_of_range(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidPolicyError):
        Policy(**bad)  # type: ignore[arg-type]


async def test_every_key_a_worker_writes_has_a_ttl(
    store: FleetBreakers, redis: Redis, clock: ManualClock
) -> None:
    ns = store.keys.namespace
    await store.record([Outcome(SCOPE, V.FAILURE)] * 3)
    clock.advance(POLICY.break_s)
    assert await store.acquire_probe(SCOPE, "w1")
    await store.record(
        [
            Outcome("model:m", V.SUCCESS),
            Cooldown("acct", "m", seconds=5),
            Exhausted("acct"),
            Gone("acct", "retired"),
        ]
    )
    await KillSwitch(redis, namespace=ns).on("alice", "test")
    await HeldTurns(redis, namespace=ns).hold("turn-1", "{}")
    keys = sorted([k.decode() async for k in redis.scan_iter(match="{" + ns + "}:*")])
    assert len(keys) >= 9
    without_ttl = [k for k in keys if await redis.pttl(k) < 0]
    assert without_ttl == [store.keys.held, store.keys.kill]  # a person's, not a worker's
    await redis.delete(store.keys.held, store.keys.kill)


async def test_report_lists_state_rate_opened_at_probe_holder_and_marks(
    store: FleetBreakers, clock: ManualClock
) -> None:
    ops = Operators(store)
    await store.record([Outcome("model:a", V.FAILURE), Outcome("model:a", V.SUCCESS)])
    await store.record([Outcome(SCOPE, V.FAILURE)] * 3)
    await store.record([Cooldown("acct", "m", seconds=5), Exhausted("acct", seconds=60)])
    clock.advance(0.25)
    assert await store.acquire_probe(SCOPE, "worker-7")
    report = await ops.report()
    by_scope = {s.scope: s for s in report.scopes}
    assert list(by_scope) == ["model:a", "vendor:configured", SCOPE]
    assert by_scope["model:a"].failure_rate == 0.5
    assert by_scope["vendor:configured"].failure_rate is None
    opened = by_scope[SCOPE]
    assert opened.state is BreakerState.HALF_OPEN
    assert opened.probe_holders == ("worker-7",)
    assert (report.now_ms, opened.opened_at_ms) == (clock(), clock() - 250)
    # Its own window was emptied when it opened: the report shows the one that opened it.
    assert (opened.failures_in_window, opened.calls_in_window) == (0, 0)
    assert opened.window_shown == (3, 3)
    assert opened.failure_rate == 1.0
    assert not opened.opened_by_operator
    assert [(c.pair, c.remaining_s) for c in report.cooldowns] == [(Pair("acct", "m"), 4.75)]
    assert [(e.account, e.remaining_s) for e in report.exhausted] == [("acct", 59.75)]


async def test_a_reopened_breaker_shows_its_failed_probe_and_a_forced_one_its_operator(
    store: FleetBreakers, clock: ManualClock
) -> None:
    ops = Operators(store)
    await store.record([Outcome(SCOPE, V.FAILURE)] * 2 + [Outcome(SCOPE, V.SUCCESS)] * 2)
    await store.record([Outcome(SCOPE, V.FAILURE)])
    first = {s.scope: s for s in (await ops.report()).scopes}[SCOPE]
    assert (first.state, first.window_shown) == (BreakerState.OPEN, (3, 5))
    clock.advance(0.25)
    assert await store.acquire_probe(SCOPE, "worker-7")
    await store.record([Outcome(SCOPE, V.FAILURE, "worker-7")])
    reopened = {s.scope: s for s in (await ops.report()).scopes}[SCOPE]
    assert (reopened.state, reopened.window_shown) == (BreakerState.OPEN, (1, 1))
    await ops.force_open("vendor:configured", seconds=30)
    forced = {s.scope: s for s in (await ops.report()).scopes}["vendor:configured"]
    assert forced.opened_by_operator
    assert (forced.window_shown, forced.failure_rate) == ((0, 0), None)


async def test_a_gone_mark_is_listed_as_gone_and_an_operator_clears_it(
    store: FleetBreakers, redis: Redis, clock: ManualClock
) -> None:
    ops = Operators(store)
    await store.record([Gone("acct", "retired"), Cooldown("acct", "busy", seconds=5)])
    clock.advance(10)
    listed = {c.pair.model: (c.gone, c.remaining_s) for c in (await ops.report()).cooldowns}
    assert listed == {"retired": (True, 3590.0)}  # "busy" cooled down
    await store.record([Cooldown("acct", "busy", seconds=5)])
    with capture_logs() as logs:
        cleared = await ops.clear_gone("acct", "retired", who="alice")
        busy = await ops.clear_gone("acct", "busy", who="alice")
        nothing = await ops.clear_gone("acct", "retired", who="alice")
    assert cleared == CooldownReport(Pair("acct", "retired"), 3590.0, gone=True)
    assert busy == CooldownReport(Pair("acct", "busy"), 5.0, gone=False)  # left in place
    assert nothing is None
    state = await store.check([], [("acct", "retired"), ("acct", "busy")])
    assert state.cooldowns == {Pair("acct", "retired"): 0.0, Pair("acct", "busy"): 5.0}
    assert [(c.pair.model, c.gone) for c in (await ops.report()).cooldowns] == [("busy", False)]
    assert await redis.exists(store.keys.cooldown("acct", "retired")) == 0
    assert [(e["event"], e["who"], e["model"]) for e in logs] == [
        ("breakers.gone_cleared", "alice", "retired")
    ]


async def test_a_gone_mark_an_earlier_release_wrote_is_cleared_by_its_length(
    store: FleetBreakers, redis: Redis
) -> None:
    """Written before the gone index existed: only a gone mark outlasts the cooldown cap."""
    await store.record([Gone("acct", "retired")])
    await redis.delete(store.keys.gone_index)
    cleared = await Operators(store).clear_gone("acct", "retired", who="alice")
    assert cleared is not None
    assert cleared.gone
    assert (await store.check([], [("acct", "retired")])).cooldowns == {
        Pair("acct", "retired"): 0.0
    }


async def test_force_open_pins_until_closed_and_close_reopens_traffic(
    store: FleetBreakers, clock: ManualClock
) -> None:
    ops = Operators(store)
    assert await ops.force_open("vendor:configured") is BreakerState.CLOSED
    scope = (await store.check(["vendor:configured"])).scopes["vendor:configured"]
    assert scope.state is BreakerState.OPEN
    assert scope.retry_in_s == math.inf
    clock.advance(3600)
    assert not await store.acquire_probe("vendor:configured", "w1")
    assert await store.record([Outcome("vendor:configured", V.SUCCESS, "w1")]) == []
    assert await ops.force_close("vendor:configured") is BreakerState.OPEN
    assert await store.acquire_probe("vendor:configured", "w1")


async def test_force_open_for_seconds_then_half_opens(
    store: FleetBreakers, clock: ManualClock
) -> None:
    await Operators(store).force_open("vendor:configured", seconds=60)
    clock.advance(59.999)
    scope = (await store.check(["vendor:configured"])).scopes["vendor:configured"]
    assert (scope.state, scope.retry_in_s) == (BreakerState.OPEN, 0.001)
    clock.advance(0.001)
    scope = (await store.check(["vendor:configured"])).scopes["vendor:configured"]
    assert scope.state is BreakerState.HALF_OPEN


async def test_reset_forgets_failures_in_the_window(store: FleetBreakers) -> None:
    ops = Operators(store)
    await store.record([Outcome(SCOPE, V.FAILURE)] * 2)
    assert await ops.reset(SCOPE) is BreakerState.CLOSED
    assert await store.record([Outcome(SCOPE, V.FAILURE)]) == []  # two more needed now
    assert SCOPE in await ops.scopes()


async def test_unknown_scope_is_a_clear_error(store: FleetBreakers) -> None:
    with pytest.raises(UnknownScopeError, match=r"unknown breaker scope 'vendor:nope'.*configured"):
        await Operators(store).force_open("vendor:nope")


async def test_operators_on_a_dead_redis_get_our_error() -> None:
    port = free_port()
    dead = connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    store = FleetBreakers(dead, scopes=[SCOPE])
    with pytest.raises(StoreUnavailableError, match="Redis did not answer"):
        await Operators(store).force_close(SCOPE)
    with pytest.raises(StoreUnavailableError):
        await KillSwitch(dead).status()
    await dead.aclose()


async def test_evalsha_with_time_survives_a_script_flush_on_fakeredis() -> None:
    redis = in_memory()
    store = FleetBreakers(redis, policy=POLICY)
    await store.record([Outcome(SCOPE, V.FAILURE)])
    await redis.script_flush()
    assert await store.record([Outcome(SCOPE, V.FAILURE)] * 2) != []  # reloaded, then ran
    assert (await store.check([SCOPE])).scopes[SCOPE].state is BreakerState.OPEN
    await redis.aclose()
