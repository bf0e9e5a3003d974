"""The operator commands (`relevo breakers`, `kill-switch`, `replay-held`, `budgets`, `handoffs`)
on the real Redis server, called in-process through `worker.cli.main.main`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import celery
import pytest
import structlog
from celery import Celery
from celery import _state as celery_state
from celery.result import AsyncResult
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

import breakers
import budgets
from breakers import (
    BreakerState,
    Cooldown,
    Exhausted,
    FleetBreakers,
    Gone,
    Outcome,
    Pair,
    Policy,
    Verdict,
)
from tests.chainkit import turn
from tests.netkit import free_port
from tests.test_async_producer import celery_worker as worker_process
from worker.adapters import make_client
from worker.cli.main import main
from worker.fleet import AsyncTurnHandle, Producer, StreamEvent
from worker.fleet.app import make_app
from worker.fleet.audit import AuditTrail
from worker.fleet.enqueue import TurnHandle, enqueue_turn
from worker.fleet.heartbeat import Heartbeat, beat
from worker.fleet.replay import Delivery, Replayed, ReplaySummary, chain_runner, replay_held
from worker.fleet.runner import TurnRunner
from worker.fleet.testing import InProcessWorker
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.guard.redis_guard import open_guard
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Status, TurnResult

ROOT = Path(__file__).parent.parent
T = TypeVar("T")
# A break long enough that a loaded machine still reads it open, short enough to wait out.
POLICY = Policy(min_calls_in_window=3, break_s=1.0, max_break_s=2)
SCOPE = "vendor:openai"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` binds structlog to this test's captured stderr; later tests must not log there."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def ns(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the operator commands at the real Redis, under this test's namespace."""
    monkeypatch.setenv("RELEVO_REDIS__URL", redis_url)
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", namespace)
    return namespace


def relevo(*args: str) -> int:
    return main(["--log-level", "warning", *args])


def out_json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def on_redis(url: str, work: Callable[[Redis], Awaitable[T]]) -> T:
    """Run `work` with a fresh client on its own loop, closing the client after."""

    async def go() -> T:
        client = breakers.connect(url, timeout_s=2.0)
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def fleet(client: Redis, namespace: str) -> FleetBreakers:
    return FleetBreakers(client, namespace=namespace, policy=POLICY)


def state_of(url: str, namespace: str, scope: str = SCOPE) -> BreakerState:
    async def work(client: Redis) -> BreakerState:
        return (await fleet(client, namespace).check([scope])).scopes[scope].state

    return on_redis(url, work)


def seed_fleet(url: str, namespace: str) -> None:
    """vendor:openai open, model:beta@an closed with 1 failure in 3, a cooldown and a mark."""

    async def work(client: Redis) -> None:
        store = fleet(client, namespace)
        await store.record([Outcome(SCOPE, Verdict.FAILURE)] * 3)
        verdicts = (Verdict.SUCCESS, Verdict.SUCCESS, Verdict.FAILURE)
        await store.record([Outcome("model:beta@an", v) for v in verdicts])
        await store.record([Cooldown("oa", "alpha", 30), Exhausted("an", 60)])

    on_redis(url, work)


# -- relevo breakers -------------------------------------------------------------------


def test_breakers_table_shows_scopes_cooldowns_and_marks(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_fleet(redis_url, ns)
    assert relevo("breakers") == 0
    out = capsys.readouterr().out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "open" in rows[SCOPE]
    assert "closed" in rows["model:beta@an"]
    assert "1/3 (33%)" in rows["model:beta@an"]
    assert "oa|alpha" in out
    assert "Exhausted accounts" in out
    assert "an " in out.split("Exhausted accounts", 1)[1]


def test_breakers_json_has_rates_opened_at_and_probe_holders(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_fleet(redis_url, ns)
    assert relevo("breakers", "--json") == 0
    report = out_json(capsys)
    scopes = {s["scope"]: s for s in report["scopes"]}
    vendor = scopes[SCOPE]
    assert (vendor["state"], vendor["pinned"]) == ("open", False)
    assert vendor["opened_at"].startswith(report["now"][:10])
    assert 0 < vendor["retry_in_s"] <= 1.0
    model = scopes["model:beta@an"]
    assert (model["state"], model["calls_in_window"], model["failures_in_window"]) == (
        "closed",
        3,
        1,
    )
    assert model["failure_rate"] == pytest.approx(1 / 3)
    (cool,) = report["cooldowns"]
    assert (cool["account"], cool["model"]) == ("oa", "alpha")
    assert 25 < cool["remaining_s"] <= 30
    assert [e["account"] for e in report["exhausted"]] == ["an"]

    time.sleep(1.05)  # the break elapses: half-open, and one worker takes the probe
    on_redis(redis_url, lambda c: fleet(c, ns).acquire_probe(SCOPE, "turn-7:0"))
    assert relevo("breakers", "--json") == 0
    vendor = {s["scope"]: s for s in out_json(capsys)["scopes"]}[SCOPE]
    assert vendor["state"] == "half_open"
    assert vendor["probe_holders"] == ["turn-7:0"]


def test_open_close_reset_change_the_state_every_worker_sees(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    on_redis(redis_url, lambda c: fleet(c, ns).record([Outcome(SCOPE, Verdict.SUCCESS)]))

    assert relevo("breakers", "open", SCOPE) == 0
    assert capsys.readouterr().out.strip() == f"{SCOPE}: closed -> open (pinned until closed)"
    assert state_of(redis_url, ns) is BreakerState.OPEN

    assert relevo("breakers", "close", SCOPE) == 0
    assert capsys.readouterr().out.strip() == f"{SCOPE}: open -> closed"
    assert state_of(redis_url, ns) is BreakerState.CLOSED

    assert relevo("breakers", "open", SCOPE, "--for", "0.2", "--json") == 0
    assert out_json(capsys) == {"scope": SCOPE, "before": "closed", "after": "open", "for_s": 0.2}
    assert state_of(redis_url, ns) is BreakerState.OPEN
    time.sleep(0.25)
    assert state_of(redis_url, ns) is BreakerState.HALF_OPEN

    assert relevo("breakers", "reset", SCOPE) == 0
    assert capsys.readouterr().out.strip() == f"{SCOPE}: half_open -> closed"
    assert state_of(redis_url, ns) is BreakerState.CLOSED


def test_configured_scopes_can_be_opened_before_any_call(
    ns: str, redis_url: str, tmp_path: Path
) -> None:
    config = simulated_example_config(tmp_path, "http://127.0.0.1:8900", redis_url, ns)
    assert relevo("breakers", "open", "vendor:anthropic", "--config", str(config)) == 0
    assert state_of(redis_url, ns, "vendor:anthropic") is BreakerState.OPEN


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("open", "openai"),
            "scope 'openai' is not a breaker scope: scopes are vendor:<vendor> or "
            "model:<model>@<provider>; known scopes: model:beta@an, vendor:openai",
        ),
        (("close", "model:gpt-5"), "scope 'model:gpt-5' is not a breaker scope"),
        (("reset", "a b"), "scope 'a b' must start with a letter or digit"),
        (("open", "*"), "scope '*' must start with a letter or digit"),
    ],
)
def test_invalid_scope_is_a_one_line_error(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    seed_fleet(redis_url, ns)
    assert relevo("breakers", *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"relevo: {message}")
    assert len(err.strip().splitlines()) == 1


def test_a_scope_the_fleet_has_not_used_is_set_with_a_warning(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's own example: no --config, and no worker has called that model yet."""
    scope = "model:openai/gpt-5@openai"
    assert relevo("breakers", "open", scope) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"{scope}: closed -> open (pinned until closed)"
    assert captured.err.strip() == (
        f"relevo: warning: the fleet has not used scope {scope!r} yet; setting it anyway "
        "(check the spelling, or pass --config FILE to check it against the chain)"
    )
    assert state_of(redis_url, ns, scope) is BreakerState.OPEN
    # Known now: no second warning.
    assert relevo("breakers", "close", scope) == 0
    assert capsys.readouterr().err == ""


def test_a_scope_outside_the_configured_chain_is_refused(
    ns: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = simulated_example_config(tmp_path, "http://127.0.0.1:8900", redis_url, ns)
    assert relevo("breakers", "open", "vendor:nobody", "--config", str(config)) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"relevo: unknown breaker scope 'vendor:nobody': the chain in {config} does not use it "
        "and the fleet has not used it; known scopes: "
    )
    assert "vendor:anthropic" in err
    assert len(err.strip().splitlines()) == 1
    assert state_of(redis_url, ns, "vendor:nobody") is BreakerState.CLOSED


def test_open_for_a_non_positive_duration_is_a_usage_error(ns: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        relevo("breakers", "open", SCOPE, "--for", "-3")
    assert exit_.value.code == 2


def test_clear_gone_ends_a_gone_mark_and_refuses_a_rate_limit_s_cooldown(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [("oa", "retired"), ("oa", "alpha")]

    async def seed(client: Redis) -> None:
        await fleet(client, ns).record([Gone("oa", "retired"), Cooldown("oa", "alpha", 30)])

    async def skips(client: Redis) -> dict[Pair, float]:
        return dict((await fleet(client, ns).check([], pairs)).cooldowns)

    on_redis(redis_url, seed)
    assert relevo("breakers", "--json") == 0
    assert {c["model"]: c["gone"] for c in out_json(capsys)["cooldowns"]} == {
        "retired": True,
        "alpha": False,
    }
    assert relevo("breakers", "clear-gone", "oa", "retired", "--who", "alice") == 0
    done = capsys.readouterr()
    assert done.out.startswith("oa|retired: gone mark cleared (")
    assert "breakers.gone_cleared" in done.err
    assert "alice" in done.err
    assert relevo("breakers", "clear-gone", "oa", "alpha") == 2
    assert "cooling down after a rate limit" in capsys.readouterr().err
    assert relevo("breakers", "clear-gone", "oa", "retired", "--json") == 0
    nothing = {"account": "oa", "model": "retired", "cleared": False, "left_s": None}
    assert out_json(capsys) == nothing
    assert relevo("breakers", "clear-gone", "oa", "not a model") == 2
    left = on_redis(redis_url, skips)
    assert left[Pair("oa", "retired")] == 0
    assert left[Pair("oa", "alpha")] > 0


# -- relevo kill-switch ----------------------------------------------------------------


def test_kill_switch_on_status_off_round_trip(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("kill-switch", "status", "--json") == 0
    assert out_json(capsys)["on"] is False

    assert relevo("kill-switch", "on", "--reason", "incident 42", "--who", "alice") == 0
    assert "kill switch ON" in capsys.readouterr().out
    switch = on_redis(redis_url, lambda c: breakers.KillSwitch(c, namespace=ns).status())
    assert switch is not None
    assert (switch.who, switch.reason) == ("alice", "incident 42")

    assert relevo("kill-switch", "status") == 0
    out = capsys.readouterr().out
    assert "kill switch: ON" in out
    assert "who: alice" in out
    assert "why: incident 42" in out
    assert relevo("kill-switch", "status", "--json") == 0
    status = out_json(capsys)
    assert (status["on"], status["who"], status["reason"]) == (True, "alice", "incident 42")
    assert status["since_ms"] == switch.since_ms

    assert relevo("kill-switch", "off", "--who", "alice") == 0
    assert "kill switch OFF" in capsys.readouterr().out
    assert relevo("kill-switch", "status") == 0
    assert capsys.readouterr().out.startswith("kill switch: off")
    assert on_redis(redis_url, lambda c: breakers.KillSwitch(c, namespace=ns).status()) is None


@pytest.mark.parametrize(
    ("args", "confirmed"),
    [
        (("kill-switch", "on", "--reason", "incident 43"), "kill switch ON since "),
        (("kill-switch", "off"), "kill switch OFF"),
        (("budgets", "set", "acme", "--daily", "5", "--monthly", "9"), "acme: daily $5.00"),
        (("breakers", "open", "vendor:openai"), "vendor:openai: "),
    ],
)
def test_an_action_prints_its_confirmation_and_keeps_its_log_lines_in_the_audit_trail(
    ns: str,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    confirmed: str,
) -> None:
    """Without --log-level, no "audit.action" (or breakers) log line on the terminal."""
    seed_fleet(redis_url, ns)
    if args[-1] == "off":
        assert relevo("kill-switch", "on", "--reason", "to turn off") == 0
        capsys.readouterr()
    assert main([*args, "--who", "alice"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(confirmed)
    assert "audit.action" not in captured.err
    assert "breakers." not in captured.err
    trail = on_redis(redis_url, lambda c: AuditTrail(c, namespace=ns).latest(2))
    assert [(e.who, e.outcome == "requested") for e in trail] == [("alice", False), ("alice", True)]


def test_kill_switch_on_names_the_workers_that_may_not_have_seen_it(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live process on local breakers is named; a silent one is counted; a healthy one
    is neither."""
    now_ms = int(time.time() * 1000)
    keys = TurnKeys(ns)

    def process(pid: int, *, local: bool) -> Heartbeat:
        return Heartbeat(
            host="node-a", pid=pid, version="x", in_flight=0, local_breakers=local,
            started_ms=now_ms - 60_000,
        )  # fmt: skip

    async def write(client: Redis) -> None:
        await beat(client, keys, process(1, local=False))
        await beat(client, keys, process(2, local=True))
        gone = process(3, local=False).model_copy(update={"seen_ms": now_ms - 40_000})
        await client.set(keys.worker(gone.process), gone.model_dump_json())
        await client.zadd(keys.workers, {gone.process: gone.seen_ms})

    on_redis(redis_url, write)
    assert relevo("kill-switch", "on", "--reason", "drill") == 0
    out = capsys.readouterr().out
    assert "Every worker process that reaches Redis has seen it." in out
    assert "1 worker process(es) could not reach Redis at their last heartbeat" in out
    assert out.count("node-a:") == 1
    assert "node-a:2" in out
    assert "1 worker process(es) silent for more than 15 s" in out


def test_kill_switch_who_defaults_to_the_user(
    ns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("USER", "bob")
    assert relevo("kill-switch", "on", "--reason", "deploy") == 0
    assert "by bob: deploy" in capsys.readouterr().out


def test_kill_switch_blank_reason_is_refused(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("kill-switch", "on", "--reason", "  ") == 2
    assert "--reason must be 1-1000 characters" in capsys.readouterr().err
    assert on_redis(redis_url, lambda c: breakers.KillSwitch(c, namespace=ns).status()) is None


# -- relevo replay-held ----------------------------------------------------------------


def simulated_example_config(tmp_path: Path, sim_url: str, redis_url: str, namespace: str) -> Path:
    """examples/simulated.toml pointed at `sim_url`, with [redis] and a queue of its own."""
    text = (
        (ROOT / "examples" / "simulated.toml").read_text().replace("http://127.0.0.1:8900", sim_url)
    )
    path = tmp_path / "relevo.toml"
    redis = f'[redis]\nurl = "{redis_url}"\nnamespace = "{namespace}"\n'
    # Celery's result keys are not namespaced: let the ones these tests write go soon.
    worker = f'[worker]\nqueue = "{namespace}"\nresult_ttl_s = 300\n'
    path.write_text(f"{text}\n{redis}\n{worker}")
    return path


def run_turns(config: Path, count: int) -> list[TurnResult]:
    """Run `count` turns through the chain with the Redis guard (no turn store)."""

    async def go() -> list[TurnResult]:
        settings = load_settings(config)
        guard = open_guard(settings)
        try:
            async with make_client() as http:
                chain = Chain.from_settings(settings, http, guard=guard)
                return [await chain.run(turn()) for _ in range(count)]
        finally:
            await guard.aclose()

    return asyncio.run(go())


def hold_on_runner(
    config: Path, url: str, namespace: str, count: int, *, stream: bool = False
) -> dict[str, str]:
    """Run `count` turns as a worker's task does, with the switch on: each is refused, held
    and its "rejected" result saved in the turn store. Their payloads by turn id."""
    on_redis(url, lambda c: breakers.KillSwitch(c, namespace=namespace).on("ops", "incident 42"))
    settings = load_settings(config)
    # A first look at the switch that times out on a loaded machine would see it off (the
    # runner has no memory of it yet) and run the turn: give Redis the time it takes.
    patient = settings.redis.model_copy(update={"timeout_s": 2.0})
    runner = TurnRunner(settings.model_copy(update={"redis": patient}))
    try:
        results = [runner.answer(turn(stream=stream).model_dump(mode="json")) for _ in range(count)]
    finally:
        runner.close()
    assert {r["status"] for r in results} == {"rejected"}
    on_redis(url, lambda c: breakers.KillSwitch(c, namespace=namespace).off("ops"))
    held = on_redis(url, lambda c: breakers.HeldTurns(c, namespace=namespace).held())
    assert {t.turn_id for t in held} == {r["turn_id"] for r in results}
    return {t.turn_id: t.payload for t in held}


@asynccontextmanager
async def replaying(
    config: Path,
    client: Redis,
    namespace: str,
    emit: Callable[[dict[str, Any]], None],
    **options: Any,
) -> AsyncIterator[asyncio.Task[ReplaySummary]]:
    """`replay_held` of the held turns through `config`'s chain, as a task on this loop."""
    settings = load_settings(config)
    delivery = Delivery(TurnStore(client, namespace=namespace))
    async with make_client() as http:
        chain = Chain.from_settings(settings, http, guard=open_guard(settings, client))
        held = breakers.HeldTurns(client, namespace=namespace)
        switch = breakers.KillSwitch(client, namespace=namespace)
        yield asyncio.create_task(
            replay_held(held, switch, chain_runner(chain, delivery), emit, **options)
        )


async def until(done: Callable[[], bool], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not done():  # noqa: ASYNC110 - the simulator's counts are not awaitable
            await asyncio.sleep(0.02)


@pytest.fixture
def config(ns: str, redis_url: str, sim: Simulator, tmp_path: Path) -> Path:
    """The simulated chain on the real Redis under `ns`, with the simulator reset."""
    sim.reset()
    return simulated_example_config(tmp_path, sim.url, redis_url, ns)


@pytest.fixture
def patient_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's Redis timeout a loaded machine meets (as `hold_on_runner` gives its runner)."""
    monkeypatch.setenv("RELEVO_REDIS__TIMEOUT_S", "2")


@pytest.fixture
def patient_primary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung call to the primary waits (20 s to its first byte): no fallback meanwhile."""
    monkeypatch.setenv("RELEVO_PROVIDERS__ANTHROPIC_SIM__FIRST_BYTE_TIMEOUT_S", "20")


def held_count(url: str, namespace: str) -> int:
    return on_redis(url, lambda c: breakers.HeldTurns(c, namespace=namespace).count())


def stored(url: str, namespace: str, turn_id: str) -> TurnResult | None:
    return on_redis(url, lambda c: TurnStore(c, namespace=namespace).result(turn_id))


def out_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@contextmanager
def celery_worker(settings: Settings) -> Iterator[Celery]:
    """A real Celery worker in this process on the real Redis (the test's own queue); its app."""
    runner = TurnRunner(settings)
    app = make_app(settings, runner=lambda: runner)
    before_current, before_default = (
        celery.current_app._get_current_object(),
        celery_state.default_app,
    )
    # The threads pool runs each task on Celery's current app.
    app.set_current()
    app.set_default()
    try:
        with InProcessWorker(app, concurrency=4):
            yield app
    finally:
        runner.close()
        before_current.set_current()
        celery_state.set_default_app(before_default)
        # A worker started here tells Celery this process runs tasks: results would not wait.
        celery_state._set_task_join_will_block(False)


def test_held_turns_are_refused_while_the_switch_is_on_then_replayed_after_off(
    ns: str, redis_url: str, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.reset()
    config = simulated_example_config(tmp_path, sim.url, redis_url, ns)
    assert relevo("kill-switch", "on", "--reason", "incident 42") == 0
    held = run_turns(config, 3)
    assert {r.status for r in held} == {Status.REJECTED}
    assert sim.calls() == 0
    capsys.readouterr()

    assert relevo("replay-held", "--config", str(config)) == 7
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "kill switch is on (incident 42" in captured.err
    assert held_count(redis_url, ns) == 3

    assert relevo("kill-switch", "off") == 0
    assert "3 held turn(s)" in capsys.readouterr().out
    # Turns run in a process of their own (no turn store): no one reads a replayed result
    # unless the operator asks for them.
    flag = "--include-expired"
    assert relevo("replay-held", "--config", str(config), "--limit", "2", flag) == 0
    lines = out_lines(capsys)
    assert sorted(line["turn_id"] for line in lines) == sorted(r.turn_id for r in held[:2])
    assert held_count(redis_url, ns) == 1

    assert relevo("replay-held", "--config", str(config), flag) == 0
    (last,) = out_lines(capsys)
    assert last["turn_id"] == held[2].turn_id
    assert (last["status"], last["step"]) == ("ok", 0)
    assert sim.calls() == 3
    assert held_count(redis_url, ns) == 0


def test_replayed_results_replace_the_rejections_every_reader_sees(
    ns: str, redis_url: str, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Turns refused on a real Celery worker: after the replay, `relevo result`, Celery's
    result backend and `TurnHandle.get` all say "ok" where they said "rejected"."""
    sim.reset()
    settings = load_settings(simulated_example_config(tmp_path, sim.url, redis_url, ns))
    assert relevo("kill-switch", "on", "--reason", "incident 43") == 0
    with celery_worker(settings) as app:
        handles = [enqueue_turn(turn(), app=app) for _ in range(3)]
        assert {h.get(timeout_s=20).status for h in handles} == {Status.REJECTED}
    ids = sorted(h.turn_id for h in handles)
    assert relevo("result", ids[0]) == 5
    assert relevo("kill-switch", "off") == 0
    capsys.readouterr()

    assert relevo("replay-held", "--config", str(tmp_path / "relevo.toml")) == 0
    lines = out_lines(capsys)
    assert sorted(line["turn_id"] for line in lines) == ids
    assert {line["status"] for line in lines} == {"ok"}
    assert sim.calls() == 3
    for turn_id in ids:
        assert relevo("result", turn_id) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "ok"
    reader = make_app(settings)  # a reader that has not seen the rejections
    for turn_id in ids:
        raw = AsyncResult(turn_id, app=reader).get(timeout=5)
        assert (raw["turn_id"], raw["status"]) == (turn_id, "ok")
        assert TurnHandle(turn_id, AsyncResult(turn_id, app=reader)).get(5).status is Status.OK
    # Nothing is left to replay, and running it again calls no model.
    assert relevo("replay-held", "--config", str(tmp_path / "relevo.toml")) == 0
    assert capsys.readouterr().out == ""
    assert sim.calls() == 3


def test_held_turns_replay_concurrently_within_the_bound(
    ns: str, redis_url: str, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.reset()
    config = simulated_example_config(tmp_path, sim.url, redis_url, ns)
    ids = hold_on_runner(config, redis_url, ns, 8)
    sim.set_faults("claude-sim", Fault(latency_s=0.5))
    capsys.readouterr()
    started = time.monotonic()
    assert relevo("replay-held", "--config", str(config), "--concurrency", "4") == 0
    elapsed = time.monotonic() - started
    # Eight 0.5 s calls, four at a time: two waves. One at a time is 4 s, no bound 0.5 s.
    assert 1.0 <= elapsed < 2.5
    assert sorted(line["turn_id"] for line in out_lines(capsys)) == sorted(ids)
    assert sim.calls("claude-sim", "ok") == 8
    with pytest.raises(SystemExit) as exit_:
        relevo("replay-held", "--config", str(config), "--concurrency", "0")
    assert exit_.value.code == 2


@pytest.mark.usefixtures("patient_primary")
def test_an_interrupted_replay_holds_its_unfinished_turns_again_and_a_rerun_ends_each_once(
    ns: str, redis_url: str, sim: Simulator, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payloads = hold_on_runner(config, redis_url, ns, 6)
    # Two calls answer at once; every later one hangs until the replay is interrupted.
    sim.set_faults("claude-sim", Fault(times=2), Fault(latency_s=30))
    lines: list[dict[str, Any]] = []
    summary = ReplaySummary()

    async def interrupted() -> int:
        client = breakers.connect(redis_url, timeout_s=2.0)
        try:
            async with replaying(
                config, client, ns, lines.append, concurrency=4, summary=summary
            ) as replay:
                # Two replayed, four in flight (all of the rest: none is left in the stream).
                await until(lambda: summary.replayed == 2 and sim.calls("claude-sim") == 6)
                replay.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await replay
            return await breakers.HeldTurns(client, namespace=ns).count()
        finally:
            await client.aclose()

    assert asyncio.run(interrupted()) == 4
    assert (summary.replayed, summary.given_back, summary.not_given_back) == (2, 4, 0)
    first = {line["turn_id"] for line in lines}
    assert len(first) == 2
    assert {line["status"] for line in lines} == {"ok"}
    for turn_id in payloads:
        result = stored(redis_url, ns, turn_id)
        assert result is not None
        assert result.status is (Status.OK if turn_id in first else Status.REJECTED)

    # One replayed turn held again too, as if a replayer died after storing it: not run again.
    again = sorted(first)[0]
    on_redis(redis_url, lambda c: breakers.HeldTurns(c, namespace=ns).hold(again, payloads[again]))
    sim.clear()
    capsys.readouterr()
    assert relevo("replay-held", "--config", str(config)) == 0
    second = {line["turn_id"]: line for line in out_lines(capsys)}
    assert set(second) == (set(payloads) - first) | {again}
    assert second[again]["replay"] == "skipped"
    assert all("replay" not in line for turn_id, line in second.items() if turn_id != again)
    assert sim.calls("claude-sim", "ok") == 6  # each turn answered exactly once
    assert {stored(redis_url, ns, t).status for t in payloads} == {Status.OK}
    assert held_count(redis_url, ns) == 0


@pytest.mark.usefixtures("patient_primary")
def test_an_interrupted_replay_leaves_a_streaming_turn_s_readers_on_its_rejection(
    ns: str, redis_url: str, sim: Simulator, config: Path
) -> None:
    """Its text so far is void: a reader that showed it is told to drop it, and every
    reader ends (none waits on a run that will not finish) on the stored "rejected"."""
    (turn_id,) = hold_on_runner(config, redis_url, ns, 1, stream=True)
    sim.set_faults("claude-sim", Fault(tokens=20, stall_after_tokens=2, stall_after_s=30))

    async def interrupted() -> tuple[list[StreamEvent], list[StreamEvent], TurnResult]:
        client = breakers.connect(redis_url, timeout_s=2.0)
        reader = AsyncTurnHandle(turn_id, TurnStore(client, namespace=ns))
        try:
            async with replaying(config, client, ns, lambda line: None) as replay:
                await replay_running(client, ns, turn_id, lambda: not replay.done())
                live: list[StreamEvent] = []
                async for event in reader.events(timeout_s=20):
                    live.append(event)
                    if len(live) == 2:  # the two pieces sent before the stall
                        replay.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await replay
            later = [event async for event in reader.events(timeout_s=5)]
            return live, later, await reader.result(timeout_s=5)
        finally:
            await client.aclose()

    live, later, result = asyncio.run(interrupted())
    assert [bool(e.text) for e in live] == [True, True, False]
    assert live[-1].restart
    assert later == []
    assert result.status is Status.REJECTED
    assert held_count(redis_url, ns) == 1


@pytest.mark.usefixtures("patient_primary")
def test_ctrl_c_holds_the_turns_in_flight_again(
    ns: str, redis_url: str, sim: Simulator, config: Path
) -> None:
    """The real `python -m worker.cli` process: SIGINT mid-replay, exit 130, nothing lost."""
    payloads = hold_on_runner(config, redis_url, ns, 3)
    sim.set_faults("claude-sim", Fault(latency_s=30))
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "worker.cli", "--log-level", "warning"]
    proc = subprocess.Popen(
        [*cmd, "replay-held", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while sim.calls("claude-sim") < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never started its turns"
            time.sleep(0.05)
        assert held_count(redis_url, ns) == 0
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out == ""
    assert err.strip() == (
        "relevo: interrupted; replayed 0, 3 unfinished turn(s) held again "
        "(run replay-held again to resume)"
    )
    assert held_count(redis_url, ns) == 3
    assert {stored(redis_url, ns, t).status for t in payloads} == {Status.REJECTED}


@pytest.mark.slow
@pytest.mark.usefixtures("patient_store")
def test_a_held_streaming_turn_streams_its_text_when_replayed(
    ns: str, redis_url: str, sim: Simulator, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Held by a worker process while the switch is on; `relevo replay-held` (a process of
    its own) streams the turn's text as it runs, over the stored rejection, to `relevo tail`
    and to a producer's `handle.stream()`, and a reader that comes later reads it whole.
    Every reader's text is the stored result's. Without it: no text at all, ever."""
    settings = load_settings(config, require_secrets=False)
    assert relevo("kill-switch", "on", "--reason", "incident 44") == 0
    with worker_process(config, threads=4):
        turn_id = asyncio.run(held_streaming_turn(settings))
    assert relevo("kill-switch", "off") == 0
    capsys.readouterr()
    sim.set_faults("claude-sim", Fault(tokens=12, token_interval_s=0.1))
    tail = ["tail", turn_id, "--config", str(config), "--idle-timeout", "20"]

    async def replay_and_read() -> tuple[list[tuple[float, str]], float, bytes, int]:
        cli = [sys.executable, "-m", "worker.cli", "--log-level", "warning"]
        replay = await asyncio.create_subprocess_exec(
            *cli, "replay-held", "--config", str(config), stdout=asyncio.subprocess.PIPE
        )
        try:
            async with Producer.from_settings(settings) as producer:
                await replay_running(producer.redis, ns, turn_id, lambda: replay.returncode is None)
                # Both start once the run has begun, the stored result still "rejected".
                tailed = asyncio.create_task(asyncio.to_thread(relevo, *tail))
                stream = producer.turn(turn_id).stream(timeout_s=30)
                pieces = [(time.monotonic(), text) async for text in stream]
            replayed_out, _ = await asyncio.wait_for(replay.communicate(), 60)
            ended = time.monotonic()
            assert replay.returncode == 0
            return pieces, ended, replayed_out, await tailed
        finally:
            if replay.returncode is None:
                replay.kill()
                await replay.wait()

    pieces, replay_ended, replayed_out, tail_exit = asyncio.run(replay_and_read())
    line = json.loads(replayed_out)
    text = line["reply"]["text"]
    assert (line["turn_id"], line["status"]) == (turn_id, "ok")
    assert len(pieces) > 1
    assert pieces[0][0] < replay_ended  # as it came, not after
    assert "".join(piece for _, piece in pieces) == text
    assert (tail_exit, capsys.readouterr().out) == (0, text + "\n")
    answer = stored(redis_url, ns, turn_id)
    assert answer is not None
    assert answer.reply is not None
    assert answer.reply.text == text
    # A reader after the replay: the whole text, then the end.
    assert relevo(*tail) == 0
    assert capsys.readouterr().out == text + "\n"


async def held_streaming_turn(settings: Settings) -> str:
    """Send a streaming turn; the worker, with the switch on, holds it: its id."""
    async with Producer.from_settings(settings) as producer:
        # Room in the queue for a worker that starts slowly on a loaded machine.
        handle = await producer.enqueue(turn(stream=True, deadline_s=30))
        result = await handle.result(timeout_s=60)
    assert (result.status, result.reason) == (Status.REJECTED, "kill_switch")
    return handle.turn_id


async def replay_running(
    redis: Redis, namespace: str, turn_id: str, replaying: Callable[[], bool]
) -> None:
    """Wait until the turn's stream begins with a replay's run (its text may follow):
    before it, a reader meets the hold's ended stream and ends."""
    key = TurnKeys(namespace).chunks(turn_id)
    async with asyncio.timeout(30):
        while True:
            first = await redis.xrange(key, count=1)
            holder = (first[0][1] or {}).get(b"run") if first else None
            if isinstance(holder, bytes) and holder.startswith(b"replay@"):
                return
            assert replaying(), "the replay ended before its run began"
            await asyncio.sleep(0.02)


def test_a_result_that_cannot_be_stored_is_printed_counted_and_fails_the_command(
    ns: str,
    redis_url: str,
    config: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payloads = hold_on_runner(config, redis_url, ns, 2)

    async def down(self: TurnStore, result: TurnResult, *, end_stream: bool = False) -> TurnResult:
        raise RedisConnectionError("Redis went away")

    monkeypatch.setattr(TurnStore, "replace", down)
    capsys.readouterr()
    assert relevo("replay-held", "--config", str(config)) == 4
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert sorted(line["turn_id"] for line in lines) == sorted(payloads)
    for line in lines:
        assert (line["status"], line["replay"]) == ("ok", "not_stored")
        assert line["store_error"] == "ConnectionError: Redis went away"
        assert line["payload"] == payloads[line["turn_id"]]
    assert captured.err.strip() == (
        "relevo: 2 replayed result(s) could not be stored (readers may still see them "
        "rejected; the results are in the output); replayed 0, 0 still held"
    )
    assert {stored(redis_url, ns, t).status for t in payloads} == {Status.REJECTED}


def test_a_held_payload_that_is_not_a_turn_is_reported_not_lost_silently(
    ns: str, redis_url: str, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = simulated_example_config(tmp_path, sim.url, redis_url, ns)
    on_redis(redis_url, lambda c: breakers.HeldTurns(c, namespace=ns).hold("t-bad", '{"x": 1}'))
    assert relevo("replay-held", "--config", str(config)) == 4
    captured = capsys.readouterr()
    (line,) = [json.loads(text) for text in captured.out.splitlines()]
    assert (line["turn_id"], line["status"], line["payload"]) == ("t-bad", "invalid", '{"x": 1}')
    assert "not valid turn requests" in captured.err
    assert held_count(redis_url, ns) == 0


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    redis = breakers.connect(redis_url, timeout_s=2.0)
    try:
        yield redis
    finally:
        await redis.aclose()


async def test_replace_overwrites_only_a_missing_or_rejected_result(
    client: Redis, namespace: str
) -> None:
    store = TurnStore(client, namespace=namespace, ttl_s=60)
    rejected = TurnResult(
        turn_id="t1",
        tenant_id="acme",
        status=Status.REJECTED,
        reason="kill_switch",
        primary_model="m",
    )
    ok = TurnResult(turn_id="t1", tenant_id="acme", status=Status.OK, primary_model="m", step=0)
    assert await store.save(rejected) == rejected
    await client.expire(store.keys.result("t1"), 5)
    assert await store.replace(ok) == ok
    assert await store.result("t1") == ok
    assert 5 < await client.ttl(store.keys.result("t1")) <= 60
    # The first replay's answer stands, as does any result that is not a rejection.
    later = ok.model_copy(update={"cost_micros": 7})
    assert await store.replace(later) == ok
    failed = ok.model_copy(update={"turn_id": "t2", "status": Status.FAILED})
    assert await store.save(failed) == failed
    assert await store.replace(ok.model_copy(update={"turn_id": "t2"})) == failed
    # None stood: the replay's is saved.
    fresh = ok.model_copy(update={"turn_id": "t3"})
    assert await store.replace(fresh) == fresh
    assert await store.result("t3") == fresh


async def test_replay_stops_at_the_next_batch_when_the_switch_comes_back_on(
    client: Redis, namespace: str
) -> None:
    held = breakers.HeldTurns(client, namespace=namespace)
    switch = breakers.KillSwitch(client, namespace=namespace)
    for i in range(3):
        await held.hold(f"t-{i}", "{}")
    lines: list[dict[str, Any]] = []

    async def run_one(turn: breakers.HeldTurn) -> Replayed:
        await switch.on("carol", "again")
        return Replayed({"turn_id": turn.turn_id, "status": "enqueued"})

    summary = await replay_held(held, switch, run_one, lines.append, batch=1, concurrency=1)
    assert lines == [{"turn_id": "t-0", "status": "enqueued"}]
    assert summary.replayed == 1
    assert summary.stopped_by is not None
    assert summary.stopped_by.who == "carol"
    assert await held.count() == 2


async def test_a_failing_replay_step_gives_back_the_turns_it_took(
    client: Redis, namespace: str
) -> None:
    held = breakers.HeldTurns(client, namespace=namespace)
    switch = breakers.KillSwitch(client, namespace=namespace)
    for i in range(3):
        await held.hold(f"t-{i}", "{}")
    lines: list[dict[str, Any]] = []
    summary = ReplaySummary()

    async def run_one(turn: breakers.HeldTurn) -> Replayed:
        if turn.turn_id == "t-1":
            raise RuntimeError("queue is down")
        await asyncio.sleep(0 if turn.turn_id == "t-0" else 5)
        return Replayed({"turn_id": turn.turn_id})

    with pytest.raises(RuntimeError, match="queue is down"):
        await replay_held(held, switch, run_one, lines.append, batch=3, summary=summary)
    # t-0 finished; t-1 failed and t-2 was still running: both are held again.
    assert lines == [{"turn_id": "t-0"}]
    assert sorted(t.turn_id for t in await held.held()) == ["t-1", "t-2"]
    assert (summary.replayed, summary.given_back) == (1, 2)


# -- relevo budgets --------------------------------------------------------------------


def test_budgets_set_show_and_list(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("budgets", "set", "acme", "--daily", "5.00", "--monthly", "100")
    assert relevo(*args, "--fallback-cap", "1.50", "--overdraft", "0.004") == 0
    assert capsys.readouterr().out.strip() == (
        "acme: daily $5.00, monthly $100.00, fallback cap $1.50 per day, overdraft $0.004"
    )

    async def spend(client: Redis) -> None:
        ledger = budgets.Ledger(client, namespace=ns)
        await ledger.settle("acme", "t1:0", 250_000, provider="oa", fallback=False)
        await ledger.settle("acme", "t1:1", 1_250, provider="an", fallback=True)

    on_redis(redis_url, spend)

    assert relevo("budgets", "show", "acme") == 0
    out = capsys.readouterr().out
    day = next(line for line in out.splitlines() if "day " in line)
    assert "$5.00" in day
    assert "$0.25125" in day
    assert "$4.74875" in day
    assert "Fallback cap: $1.50 per day, $1.49875 left" in out
    assert "Held in flight: $0.00 expected, $0.00 at worst; overdraft $0.004" in out
    assert next(line for line in out.splitlines() if line.startswith("│ an")).count("$0.00125") == 2

    assert relevo("budgets", "show", "acme", "--json") == 0
    report = out_json(capsys)
    assert report["limits"] == {
        "daily_micros": 5_000_000,
        "monthly_micros": 100_000_000,
        "fallback_cap_micros": 1_500_000,
        "overdraft_micros": 4_000,
    }
    assert report["day"]["spent_micros"] == 251_250
    assert report["month"]["remaining_micros"] == 100_000_000 - 251_250
    assert report["day"]["fallback_by_provider"] == {"an": 1_250}

    assert relevo("budgets", "set", "beta", "--daily", "1", "--monthly", "$20", "--json") == 0
    assert out_json(capsys) == {
        "tenant": "beta",
        "daily_micros": 1_000_000,
        "monthly_micros": 20_000_000,
        "fallback_cap_micros": None,
        "overdraft_micros": 0,
    }
    assert relevo("budgets", "list") == 0
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if "│" in line}
    assert "$4.74875" in rows["acme"]
    assert "$20.00" in rows["beta"]
    assert relevo("budgets", "list", "--json") == 0
    assert [r["tenant"] for r in out_json(capsys)] == ["acme", "beta"]


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        ("-1", "--daily: '-1' must not be negative"),
        ("abc", "--daily: 'abc' is not an amount of dollars"),
        ("1.0000001", "--daily: '1.0000001' has more than 6 decimals"),
        ("1e3", "--daily: '1e3' is not an amount of dollars"),
    ],
)
def test_budgets_set_refuses_bad_amounts(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str], amount: str, message: str
) -> None:
    assert relevo("budgets", "set", "acme", "--daily", amount, "--monthly", "100") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"relevo: {message}")
    assert len(err.strip().splitlines()) == 1
    assert on_redis(redis_url, lambda c: budgets.Ledger(c, namespace=ns).tenants()) == []


def test_budgets_set_refuses_a_daily_limit_above_the_monthly_one(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("budgets", "set", "acme", "--daily", "50", "--monthly", "20") == 2
    assert capsys.readouterr().err.strip() == (
        "relevo: --daily $50.00 is more than --monthly $20.00: a day's limit cannot exceed "
        "the month's"
    )
    assert on_redis(redis_url, lambda c: budgets.Ledger(c, namespace=ns).tenants()) == []


def test_budgets_set_warns_of_an_overdraft_above_the_daily_limit(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("budgets", "set", "acme", "--daily", "1", "--monthly", "20", "--overdraft", "1.5")
    assert relevo(*args, "--json") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["overdraft_micros"] == 1_500_000
    assert captured.err.strip() == (
        "relevo: warning: --overdraft $1.50 is more than --daily $1.00: worst cases in flight "
        "may take a day's spend to $2.50"
    )
    assert (
        relevo("budgets", "set", "acme", "--daily", "1", "--monthly", "1", "--overdraft", "1") == 0
    )
    assert capsys.readouterr().err == ""


def test_budgets_bad_fallback_cap_names_its_option(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("budgets", "set", "acme", "--daily", "5", "--monthly", "100", "--fallback-cap", "x")
    assert relevo(*args) == 2
    assert capsys.readouterr().err.startswith("relevo: --fallback-cap: 'x' is not an amount")


@pytest.mark.parametrize("tenant", ["a|b", "*", "../x", "", "x" * 65, "acmé"])
@pytest.mark.parametrize("action", ["set", "show"])
def test_invalid_tenant_ids_are_refused(
    ns: str, capsys: pytest.CaptureFixture[str], tenant: str, action: str
) -> None:
    extra = ("--daily", "5", "--monthly", "100") if action == "set" else ()
    assert relevo("budgets", action, tenant, *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("relevo: tenant id ")
    assert len(err.strip().splitlines()) == 1


def test_budgets_show_of_an_unknown_tenant_is_a_clear_error(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert relevo("budgets", "show", "nobody") == 2
    assert capsys.readouterr().err.strip() == (
        "relevo: tenant 'nobody' has no configured limits and no recorded spend"
    )


# -- relevo handoffs -------------------------------------------------------------------


def test_handoffs_newest_first(ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def push(client: Redis) -> None:
        stream = budgets.Handoffs(client, namespace=ns)
        for i in range(3):
            await stream.push("acme", f"turn-{i}", "tenant_budget_exhausted", "{}")

    on_redis(redis_url, push)
    assert relevo("handoffs", "--count", "2") == 0
    out = capsys.readouterr().out
    assert out.index("turn-2") < out.index("turn-1")
    assert "turn-0" not in out
    assert "tenant_budget_exhausted" in out
    assert relevo("handoffs", "--json") == 0
    items = out_json(capsys)
    assert [(h["tenant"], h["turn_id"]) for h in items] == [
        ("acme", f"turn-{i}") for i in (2, 1, 0)
    ]
    assert items[0]["reason"] == "tenant_budget_exhausted"


def test_handoffs_count_must_be_positive(ns: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        relevo("handoffs", "--count", "0")
    assert exit_.value.code == 2


# -- where Redis is --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("breakers",),
        ("breakers", "close", SCOPE),
        ("kill-switch", "status"),
        ("budgets", "list"),
        ("budgets", "set", "acme", "--daily", "1", "--monthly", "2"),
        ("handoffs",),
    ],
)
def test_unreachable_redis_is_one_line_and_exit_6(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__URL", f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    assert relevo(*args) == 6
    err = capsys.readouterr().err
    assert err.startswith("relevo: Redis at redis://:***@127.0.0.1:")
    assert "did not answer" in err
    assert "hunter2" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_redis_url_in_the_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__URL", "http://127.0.0.1:6379")
    assert relevo("breakers") == 2
    assert capsys.readouterr().err.strip() == (
        "relevo: RELEVO_REDIS__URL: not a valid value "
        "(String should match pattern '^(redis|rediss|unix|sentinel)://')"
    )


def test_a_missing_config_file_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert relevo("breakers", "--config", "/nonexistent/relevo.toml") == 2
    err = capsys.readouterr().err
    assert err.startswith("relevo: cannot read configuration file /nonexistent/relevo.toml")


def test_config_file_redis_section_is_used(
    redis_url: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RELEVO_REDIS__URL", raising=False)
    monkeypatch.delenv("RELEVO_REDIS__NAMESPACE", raising=False)
    config = simulated_example_config(tmp_path, "http://127.0.0.1:8900", redis_url, namespace)
    assert relevo("kill-switch", "on", "--reason", "drill", "--config", str(config)) == 0
    switch = on_redis(redis_url, lambda c: breakers.KillSwitch(c, namespace=namespace).status())
    assert switch is not None
    assert switch.reason == "drill"


def test_console_script_smoke(ns: str, redis_url: str) -> None:
    """The real `python -m worker.cli.main` process: a table, then JSON."""
    seed_fleet(redis_url, ns)
    env = {**os.environ, "RELEVO_REDIS__URL": redis_url, "RELEVO_REDIS__NAMESPACE": ns}
    cmd = [sys.executable, "-m", "worker.cli", "--log-level", "warning"]
    done = subprocess.run(
        [*cmd, "breakers"], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert SCOPE in done.stdout
    done = subprocess.run(
        [*cmd, "kill-switch", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["on"] is False
