"""Several OS processes sharing one real Redis: the fleet behaves as one breaker."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest

from breakers import (
    BreakerState,
    Cooldown,
    FleetBreakers,
    KillSwitch,
    Outcome,
    Pair,
    Policy,
    ResilientBreakers,
    TransitionKind,
    Verdict,
    connect,
)
from tests.netkit import free_port

V = Verdict

pytestmark = pytest.mark.slow

SCOPE = "vendor:openai"
PROCESSES = 6
POLICY = Policy(
    window_s=30,
    min_calls_in_window=3,
    consecutive_failures_threshold=1000,
    break_s=0.4,
    max_break_s=0.8,
    probe_ttl_s=0.6,
)
SPAWN = multiprocessing.get_context("spawn")


def _store(url: str, namespace: str) -> FleetBreakers:
    return FleetBreakers(connect(url, timeout_s=2.0), namespace=namespace, policy=POLICY)


def _child(main: Callable[..., Coroutine[Any, Any, Any]], out: Queue[Any], *args: Any) -> None:
    out.put(asyncio.run(main(*args)))


def in_parent(url: str, ns: str, fn: Callable[[FleetBreakers], Awaitable[Any]]) -> Any:
    """Run `fn(store)` in this process with a client it closes afterwards."""

    async def go() -> Any:
        store = _store(url, ns)
        try:
            return await fn(store)
        finally:
            await store.redis.aclose()

    return asyncio.run(go())


def run_processes(main: Callable[..., Coroutine[Any, Any, Any]], *args: Any, n: int) -> list[Any]:
    """Run `main(index, *args)` in `n` spawned processes; return what each returned."""
    out: Queue[Any] = SPAWN.Queue()
    procs = [SPAWN.Process(target=_child, args=(main, out, i, *args)) for i in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    return results


async def wait_for(store: FleetBreakers, wanted: BreakerState, limit_s: float = 5) -> None:
    deadline = time.monotonic() + limit_s
    while (await store.check([SCOPE])).scopes[SCOPE].state is not wanted:
        assert time.monotonic() < deadline, f"never became {wanted}"
        await asyncio.sleep(0.005)


async def herd(index: int, url: str, ns: str, rounds: int, barrier: Barrier) -> list[bool]:
    """Each round: wait for half-open, everyone asks for the probe; the holder's probe fails."""
    store = _store(url, ns)
    won = []
    for _ in range(rounds):
        barrier.wait()
        await wait_for(store, BreakerState.HALF_OPEN)
        got = await store.acquire_probe(SCOPE, f"worker-{index}")
        won.append(got)
        barrier.wait()  # everyone has asked before the probe's result re-opens the breaker
        if got:
            transitions = await store.record([Outcome(SCOPE, V.FAILURE, f"worker-{index}")])
            assert [t.kind for t in transitions] == [TransitionKind.REOPENED]
    await store.redis.aclose()
    return won


def test_half_open_herd_sends_exactly_one_probe_per_break(redis_url: str, namespace: str) -> None:
    in_parent(redis_url, namespace, lambda s: s.record([Outcome(SCOPE, V.FAILURE)] * 3))
    rounds = 3
    barrier = SPAWN.Barrier(PROCESSES)
    results = run_processes(herd, redis_url, namespace, rounds, barrier, n=PROCESSES)
    for r in range(rounds):
        assert sum(won[r] for won in results) == 1, f"round {r}"


def hold_probe_and_die(url: str, ns: str) -> None:
    async def main() -> None:
        store = _store(url, ns)
        assert await store.acquire_probe(SCOPE, f"doomed-{os.getpid()}")
        os._exit(0)  # dies holding the slot, without recording anything

    asyncio.run(main())


def test_probe_of_a_dead_process_expires_and_others_results_are_ignored(
    redis_url: str, namespace: str
) -> None:
    async def setup(store: FleetBreakers) -> None:
        await store.record([Outcome(SCOPE, V.FAILURE)] * 3)
        await wait_for(store, BreakerState.HALF_OPEN)

    in_parent(redis_url, namespace, setup)
    proc = SPAWN.Process(target=hold_probe_and_die, args=(redis_url, namespace))
    proc.start()
    proc.join(timeout=20)
    assert proc.exitcode == 0

    async def after(store: FleetBreakers) -> None:
        assert not await store.acquire_probe(SCOPE, "survivor")
        assert await store.record([Outcome(SCOPE, V.SUCCESS, "survivor")]) == []
        assert await store.record([Outcome(SCOPE, V.FAILURE)]) == []
        assert (await store.check([SCOPE])).scopes[SCOPE].state is BreakerState.HALF_OPEN
        await asyncio.sleep(POLICY.probe_ttl_s)
        assert await store.acquire_probe(SCOPE, "survivor")
        got = await store.record([Outcome(SCOPE, V.SUCCESS, "survivor")])
        assert [t.kind for t in got] == [TransitionKind.CLOSED]

    in_parent(redis_url, namespace, after)


async def send(index: int, url: str, ns: str, verdicts: list[V], barrier: Barrier) -> list[str]:
    store = _store(url, ns)
    barrier.wait()
    kinds = []
    for verdict in verdicts:
        kinds += [t.kind.value for t in await store.record([Outcome(SCOPE, verdict)])]
    await store.redis.aclose()
    return kinds


def test_one_opened_transition_for_the_whole_fleet(redis_url: str, namespace: str) -> None:
    barrier = SPAWN.Barrier(PROCESSES)
    results = run_processes(send, redis_url, namespace, [V.FAILURE] * 20, barrier, n=PROCESSES)
    assert sorted(k for kinds in results for k in kinds) == ["opened"]


def test_fleet_failing_two_calls_in_three_trips_on_rate(redis_url: str, namespace: str) -> None:
    barrier = SPAWN.Barrier(3)
    pattern = [V.FAILURE, V.SUCCESS, V.FAILURE] * 3
    results = run_processes(send, redis_url, namespace, pattern, barrier, n=3)
    assert sorted(k for kinds in results for k in kinds) == ["opened"]


def test_fleet_below_min_calls_never_trips(redis_url: str, namespace: str) -> None:
    # Two processes failing once each: two calls fleet-wide, under the minimum of three.
    assert POLICY.min_calls_in_window == 3
    results = run_processes(send, redis_url, namespace, [V.FAILURE], SPAWN.Barrier(2), n=2)
    assert results == [[], []]


async def watch_cooldown(index: int, url: str, ns: str, barrier: Barrier) -> tuple[float, float]:
    store = _store(url, ns)
    pair = Pair("acct", "gpt-5")
    barrier.wait()  # ready
    barrier.wait()  # the main process set the cooldown
    first = (await store.check([], [pair])).cooldowns[pair]
    start = time.monotonic()
    while True:
        if (await store.check([], [pair])).cooldowns[pair] <= 0:
            break
        await asyncio.sleep(0.01)
    await store.redis.aclose()
    return first, time.monotonic() - start


def test_cooldown_is_seen_by_every_process_until_it_expires(redis_url: str, namespace: str) -> None:
    barrier = SPAWN.Barrier(PROCESSES + 1)
    out: Queue[Any] = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_child, args=(watch_cooldown, out, i, redis_url, namespace, barrier))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    barrier.wait()
    in_parent(redis_url, namespace, lambda s: s.record([Cooldown("acct", "gpt-5", seconds=1.5)]))
    barrier.wait()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    for first, waited in results:
        assert 0.5 < first <= 1.5
        assert 0.4 < waited < 1.6


async def read_kill_switch(index: int, url: str, ns: str, barrier: Barrier) -> list[str | None]:
    store = _store(url, ns)
    seen = []
    for _ in range(2):
        barrier.wait()  # the main process flipped the switch
        state = (await store.check([SCOPE])).kill_switch
        seen.append(state.who if state else None)
        barrier.wait()
    await store.redis.aclose()
    return seen


def test_kill_switch_is_seen_by_every_process(redis_url: str, namespace: str) -> None:
    barrier = SPAWN.Barrier(PROCESSES + 1)
    out: Queue[Any] = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_child, args=(read_kill_switch, out, i, redis_url, namespace, barrier))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()

    async def flip(on: bool) -> None:
        redis = connect(redis_url, timeout_s=2.0)
        switch = KillSwitch(redis, namespace=namespace)
        await (switch.on("alice", "incident 42") if on else switch.off("alice"))
        await redis.aclose()

    for on in (True, False):
        asyncio.run(flip(on))
        barrier.wait()
        barrier.wait()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    assert results == [["alice", None]] * PROCESSES


async def serve_without_redis(index: int, port: int) -> tuple[float, list[str], bool]:
    fleet = FleetBreakers(connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2), policy=POLICY)
    breakers = ResilientBreakers(fleet, timeout_s=0.2, rejoin_check_s=0.05)
    worst, kinds = 0.0, []
    for verdict in (V.FAILURE, V.SUCCESS, V.FAILURE, V.FAILURE):
        start = time.perf_counter()
        await breakers.check([SCOPE])
        kinds += [t.kind.value for t in await breakers.record([Outcome(SCOPE, verdict)])]
        worst = max(worst, time.perf_counter() - start)
        await asyncio.sleep(0.06)  # the rejoin timer asks Redis meanwhile; it stays down
    view = (await breakers.check([SCOPE])).fleet_view
    await fleet.redis.aclose()
    return worst, kinds, view


def test_processes_keep_serving_with_redis_down_within_the_timeout() -> None:
    port = free_port()
    results = run_processes(serve_without_redis, port, n=3)
    for worst, kinds, fleet_view in results:
        assert worst < 2 * 0.2 + 0.1  # two calls, each bounded by the short timeout
        assert kinds == ["opened"]  # each process's local breaker, same rules
        assert fleet_view is False
