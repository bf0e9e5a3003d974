"""Redis trouble while turns run: no answered turn goes missing, no served call goes uncharged.

A worker's runner on a redis-server of the test's own, which is stopped (SIGSTOP: every
command hangs, as under `DEBUG SLEEP`) while turns are answered, then resumed.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from multiprocessing.synchronize import Event as EventType

import pytest
from structlog.testing import capture_logs

import breakers
import budgets
from tests.chainkit import KEY, settings, turn
from tests.conftest import _answers
from tests.netkit import free_port
from worker.cli.main import main
from worker.fleet.replay import replay_fleet
from worker.fleet.runner import TurnRunner
from worker.fleet.startup import warn_if_not_persistent
from worker.fleet.turnstore import TurnStore
from worker.guard.protocol import Refusal
from worker.settings import RedisSettings, Settings
from worker.simulator import Fault, Simulator
from worker.turn.capability import Fit, fit_turn
from worker.turn.pricing import reservation_micros
from worker.types import Status, TurnResult

pytestmark = pytest.mark.slow

REJOIN_CHECK_S = 0.2


@pytest.fixture
def runner_on(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[TurnRunner, subprocess.Popen[bytes]]]:
    """A worker's runner on the private Redis (its store timeout short, its rejoin quick)."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, proc = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.25}
    runner = TurnRunner(configured(sim, redis | {"rejoin_check_s": REJOIN_CHECK_S}))
    try:
        yield runner, proc
    finally:
        proc.send_signal(signal.SIGCONT)
        runner.close()


def configured(sim: Simulator, redis: dict[str, object], **budget: object) -> Settings:
    return settings(sim.url, redis=redis, budgets=budget, first_byte_timeout_s=5.0)


def worst_case(config: Settings, model: str) -> int:
    """The reservation of one `turn()` attempt on `model`."""
    request, prices = turn(), config.models[model]
    fit = fit_turn(request, prices)
    assert isinstance(fit, Fit)
    margin = config.budgets.input_margin_pct
    return reservation_micros(fit.input_tokens, request.max_tokens, prices, input_margin_pct=margin)


def run(runner: TurnRunner, n: int) -> list[TurnResult]:
    return [
        TurnResult.model_validate(runner.answer(turn().model_dump(mode="json"))) for _ in range(n)
    ]


def wait_for(check: object, timeout_s: float) -> float:
    """Seconds until `check()` is true; fails after `timeout_s`."""
    began = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - began < timeout_s, "not within the time allowed"
        time.sleep(0.02)
    return time.monotonic() - began


def stored(runner: TurnRunner, turn_ids: list[str]) -> tuple[list[TurnResult | None], int]:
    """What `relevo result` would read for each turn, and the tenant's spend today."""
    return read_books(runner.settings.redis, turn_ids)


def read_books(config: RedisSettings, turn_ids: list[str]) -> tuple[list[TurnResult | None], int]:
    async def read() -> tuple[list[TurnResult | None], int]:
        client = breakers.connect(config.url, timeout_s=2.0)
        try:
            store = TurnStore(client, namespace=config.namespace)
            results = [await store.result(turn_id) for turn_id in turn_ids]
            report = await budgets.Ledger(client, namespace=config.namespace).report("acme")
            return results, report.day.spent_micros
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_a_stalled_store_loses_no_result_and_no_spend(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]],
) -> None:
    runner, redis_server = runner_on
    before = run(runner, 2)
    redis_server.send_signal(signal.SIGSTOP)
    during = run(runner, 4)
    assert not runner.guard.circuits.fleet_view
    assert len(runner.guard.backlog) > 0  # results and spend kept for later
    redis_server.send_signal(signal.SIGCONT)
    # Rejoined and written by the timers, with no turn arriving to trigger it.
    rejoin_s = wait_for(lambda: runner.guard.circuits.fleet_view, 3.0)
    wait_for(lambda: len(runner.guard.backlog) == 0, 3.0)
    answered = before + during
    assert [r.status for r in answered] == [Status.OK] * 6
    results, spent = stored(runner, [r.turn_id for r in answered])
    assert [r.turn_id if r else None for r in results] == [r.turn_id for r in answered]
    assert spent == sum(r.cost_micros for r in answered) > 0
    assert rejoin_s < 3 * REJOIN_CHECK_S + 0.5


def test_while_the_store_is_away_a_tenant_spends_only_its_offline_allowance(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, redis_server = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.25, "rejoin_check_s": 30}
    # Room for one worst-case reservation of this turn, and not for that turn's cost plus one.
    allowance = Decimal(worst_case(configured(sim, redis), "openai/alpha") + 1) / 1_000_000
    runner = TurnRunner(configured(sim, redis, offline_allowance_usd=str(allowance)))
    try:
        run(runner, 1)
        redis_server.send_signal(signal.SIGSTOP)
        offline = run(runner, 3)
    finally:
        redis_server.send_signal(signal.SIGCONT)
        runner.close()
    assert [r.status for r in offline] == [Status.OK, Status.DEGRADED, Status.DEGRADED]
    assert {r.reason for r in offline[1:]} == {Refusal.BUDGET_UNREACHABLE}
    assert sim.calls("alpha") == 2  # the refused turns called no model


def test_while_the_store_is_away_turns_in_flight_count_against_the_allowance(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twelve turns at once, as a worker's threads run them: only the calls whose worst
    cases fit the allowance together start; the others degrade before any call."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, redis_server = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.25, "rejoin_check_s": 30}
    worst = worst_case(configured(sim, redis), "openai/alpha")
    allowance = Decimal(2 * worst + worst // 2) / 1_000_000
    runner = TurnRunner(configured(sim, redis, offline_allowance_usd=str(allowance)))
    try:
        run(runner, 1)
        sim.set_faults("alpha", Fault(latency_s=1.0))  # long enough to be in flight together
        redis_server.send_signal(signal.SIGSTOP)
        with ThreadPoolExecutor(12) as threads:
            offline = list(threads.map(lambda _: run(runner, 1)[0], range(12)))
    finally:
        redis_server.send_signal(signal.SIGCONT)
        runner.close()
    statuses = sorted(r.status for r in offline)
    assert statuses == [Status.DEGRADED] * 10 + [Status.OK] * 2
    assert {r.reason for r in offline if r.status is Status.DEGRADED} == {
        Refusal.BUDGET_UNREACHABLE
    }
    assert sim.calls("alpha") == 1 + 2
    assert sum(r.cost_micros for r in offline) <= allowance * 1_000_000


def test_while_the_store_is_away_each_process_keeps_to_its_own_allowance(
    sim: Simulator,
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two worker processes, twelve turns at once in each while Redis is stopped: each
    process starts only the calls its own allowance fits, so the tenant's offline spend
    stays within two allowances, and the books hold all of it once Redis answers."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    url, redis_server = private_redis
    redis = {"url": url, "namespace": namespace, "timeout_s": 0.25, "rejoin_check_s": 0.2}
    worst = worst_case(configured(sim, redis), "openai/alpha")
    allowance = Decimal(2 * worst + worst // 2) / 1_000_000
    spawn = multiprocessing.get_context("spawn")
    go, resumed, out = spawn.Event(), spawn.Event(), spawn.Queue()
    cues = [Cues(spawn.Event(), go, resumed, out) for _ in range(2)]
    processes = [
        spawn.Process(target=offline_process, args=(sim.url, redis, str(allowance), cue))
        for cue in cues
    ]
    for process in processes:
        process.start()
    try:
        for cue in cues:
            assert cue.ready.wait(60), "a worker process did not start"
        sim.set_faults("alpha", Fault(latency_s=1.0))  # in flight together in each process
        redis_server.send_signal(signal.SIGSTOP)
        go.set()
        ran = [out.get(timeout=60) for _ in processes]
        redis_server.send_signal(signal.SIGCONT)
        resumed.set()
        unsent = [out.get(timeout=60) for _ in processes]
    finally:
        redis_server.send_signal(signal.SIGCONT)
        resumed.set()
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    assert unsent == [0, 0]  # each backlog reached Redis
    warm = [TurnResult.model_validate_json(r) for r, _ in ran]
    offline = [TurnResult.model_validate_json(r) for _, each in ran for r in each]
    for _, each in ran:  # each process: two calls fit its allowance, ten degrade before a call
        statuses = sorted(TurnResult.model_validate_json(r).status for r in each)
        assert statuses == [Status.DEGRADED] * 10 + [Status.OK] * 2
    assert sim.calls("alpha") == 2 + 4
    offline_spend = sum(r.cost_micros for r in offline)
    assert 0 < offline_spend <= 2 * allowance * 1_000_000
    _, spent = read_books(RedisSettings(url=url, namespace=namespace), [])
    assert spent == offline_spend + sum(r.cost_micros for r in warm)


@dataclass(frozen=True)
class Cues:
    """How the test and one of its worker processes keep in step."""

    ready: EventType  # the process ran a turn while Redis answered
    go: EventType  # Redis is stopped: run the turns
    resumed: EventType  # Redis answers again: deliver the backlog
    out: multiprocessing.Queue[object]  # the results, then what the backlog still holds


def offline_process(sim_url: str, redis: dict[str, object], allowance: str, cues: Cues) -> None:
    """One worker process of the test above: a turn while Redis answers, twelve at once
    once it is stopped, then its backlog delivered once it answers again."""
    os.environ["RELEVO_TEST_KEY"] = KEY
    config = settings(
        sim_url, redis=redis, budgets={"offline_allowance_usd": allowance}, first_byte_timeout_s=5.0
    )
    runner = TurnRunner(config)
    try:
        (warm,) = run(runner, 1)
        cues.ready.set()
        cues.go.wait(60)
        with ThreadPoolExecutor(12) as threads:
            offline = list(threads.map(lambda _: run(runner, 1)[0], range(12)))
        cues.out.put((warm.model_dump_json(), [r.model_dump_json() for r in offline]))
        cues.resumed.wait(60)
        deadline = time.monotonic() + 20
        while len(runner.guard.backlog) and time.monotonic() < deadline:
            time.sleep(0.05)
        cues.out.put(len(runner.guard.backlog))
    finally:
        runner.close()


def test_turns_the_kill_switch_refused_during_a_stall_are_all_replayed(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]],
) -> None:
    """The switch is on and Redis stalls: the turns refused meanwhile are held when Redis
    answers again, on the backlog's timer, and a replay runs every one of them."""
    runner, redis_server = runner_on
    url, namespace = runner.settings.redis.url, runner.settings.redis.namespace
    kill_switch(url, namespace, "on")
    refused = run(runner, 1)
    redis_server.send_signal(signal.SIGSTOP)
    refused += run(runner, 3)
    assert not runner.guard.circuits.fleet_view
    redis_server.send_signal(signal.SIGCONT)
    wait_for(lambda: len(runner.guard.backlog) == 0, 5.0)
    assert [r.status for r in refused] == [Status.REJECTED] * 4
    kill_switch(url, namespace, "off")

    async def replay() -> list[TurnResult | None]:
        client = breakers.connect(url, timeout_s=2.0)
        try:
            await replay_fleet(runner.settings, client, lambda _: None)
            store = TurnStore(client, namespace=namespace)
            return [await store.result(r.turn_id) for r in refused]
        finally:
            await client.aclose()

    replayed = asyncio.run(replay())
    assert [r.status if r else None for r in replayed] == [Status.OK] * 4


def restart_empty(proc: subprocess.Popen[bytes], url: str) -> subprocess.Popen[bytes]:
    """Kill the redis-server and start a new, empty one on the same port."""
    proc.kill()
    proc.wait(timeout=10)
    port = url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]
    args = [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--port",
        port,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    new = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: _answers(url), 10.0)
    return new


@contextmanager
def emptied(proc: subprocess.Popen[bytes], url: str) -> Iterator[None]:
    """The store restarted empty for the block (`restart_empty`); that server ends after it."""
    restarted = restart_empty(proc, url)
    try:
        yield
    finally:
        restarted.kill()
        restarted.wait(timeout=10)


def kill_switch(url: str, namespace: str, action: str) -> breakers.KillSwitchState | None:
    async def act() -> breakers.KillSwitchState | None:
        client = breakers.connect(url, timeout_s=2.0)
        switch = breakers.KillSwitch(client, namespace=namespace)
        try:
            if action == "on":
                return await switch.on("alice", "incident 9")
            if action == "off":
                return await switch.off("alice")
            return await switch.status()
        finally:
            await client.aclose()

    return asyncio.run(act())


def test_a_store_restarted_empty_does_not_lift_the_kill_switch(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]],
) -> None:
    runner, redis_server = runner_on
    url, namespace = runner.settings.redis.url, runner.settings.redis.namespace
    assert [r.status for r in run(runner, 1)] == [Status.OK]
    kill_switch(url, namespace, "on")
    assert [r.status for r in run(runner, 1)] == [Status.REJECTED]
    with emptied(redis_server, url):
        assert [r.status for r in run(runner, 1)] == [Status.REJECTED]
        restored = kill_switch(url, namespace, "status")
        assert restored is not None
        assert restored.who == "alice"
        assert "restored" in restored.reason
        assert runner.guard.circuits.resets == 1
        assert runner.metrics.registry.get_sample_value("relevo_store_resets_total") == 1
        # A person's word ends it, and no worker turns it back on.
        kill_switch(url, namespace, "off")
        assert [r.status for r in run(runner, 2)] == [Status.OK, Status.OK]


@pytest.fixture
def operator(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., int]:
    """`relevo kill-switch ...` on the runner's store, as an operator runs it."""
    config = runner_on[0].settings.redis
    monkeypatch.setenv("RELEVO_REDIS__URL", config.url)
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", config.namespace)
    monkeypatch.setenv("RELEVO_REDIS__REJOIN_CHECK_S", str(config.rejoin_check_s))
    monkeypatch.setenv("RELEVO_REDIS__TIMEOUT_S", str(config.timeout_s))
    return lambda *args: main(["--log-level", "warning", "kill-switch", *args])


def test_a_switch_turned_off_stays_off_when_an_idle_fleet_s_store_restarts_empty(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]], operator: Callable[..., int]
) -> None:
    runner, redis_server = runner_on
    assert [r.status for r in run(runner, 1)] == [Status.OK]
    assert operator("on", "--reason", "incident 5") == 0
    assert [r.status for r in run(runner, 1)] == [Status.REJECTED]  # held
    assert operator("off") == 0
    time.sleep(5 * REJOIN_CHECK_S)  # no turn: the worker only looks
    with emptied(redis_server, runner.settings.redis.url):
        assert [r.status for r in run(runner, 2)] == [Status.OK, Status.OK]
        config = runner.settings.redis
        assert kill_switch(config.url, config.namespace, "status") is None


def test_an_idle_worker_restores_the_switch_after_an_empty_restart_without_a_turn(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]], operator: Callable[..., int]
) -> None:
    runner, redis_server = runner_on
    url, namespace = runner.settings.redis.url, runner.settings.redis.namespace
    assert operator("on", "--reason", "incident 7") == 0
    time.sleep(5 * REJOIN_CHECK_S)  # the worker, which ran no turn, looked
    with emptied(redis_server, url):
        wait_for(lambda: kill_switch(url, namespace, "status") is not None, 3.0)
        restored = kill_switch(url, namespace, "status")
        assert restored is not None
        assert restored.reason == "incident 7 [restored: the store lost its data]"
        assert [r.status for r in run(runner, 1)] == [Status.REJECTED]


def test_while_the_store_is_away_a_switch_turned_off_since_the_last_turn_rejects_nothing(
    runner_on: tuple[TurnRunner, subprocess.Popen[bytes]], operator: Callable[..., int]
) -> None:
    runner, redis_server = runner_on
    assert operator("on", "--reason", "incident 6") == 0
    assert [r.status for r in run(runner, 1)] == [Status.REJECTED]
    assert operator("off") == 0
    time.sleep(5 * REJOIN_CHECK_S)
    redis_server.send_signal(signal.SIGSTOP)
    assert [r.status for r in run(runner, 2)] == [Status.OK, Status.OK]
    assert not runner.guard.circuits.fleet_view


def test_a_worker_warns_at_start_when_the_store_keeps_nothing_on_disk(
    private_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, _ = private_redis  # started with --appendonly no
    with capture_logs() as logs:
        warn_if_not_persistent(RedisSettings(url=url))
        warn_if_not_persistent(RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0"))
    # A dead Redis says nothing either way.
    assert [e["event"] for e in logs] == ["worker.store_not_persistent"]
