"""Real `celery worker` processes on the real Redis: turns complete, none is lost."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import budgets
from tests.chainkit import FLEET_SECTIONS, write_worker_config
from tests.test_async_producer import celery_worker
from tests.workerkit import celery_worker_process, stop, wait_for_heartbeats
from worker.cli.main import main
from worker.fleet import Producer, StreamRestarted
from worker.fleet.app import TASK_NAME, make_app
from worker.fleet.enqueue import enqueue_turn
from worker.settings import load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnRequest

RELEVO = [sys.executable, "-m", "worker.cli"]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_sim")]


@pytest.fixture
def config(fleet_toml: Path) -> Path:
    return fleet_toml


@pytest.fixture
def start_worker(
    config: Path, redis_url: str, namespace: str
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Starts a worker process and returns once it consumes (it has written its
    heartbeat): a turn sent then is not left waiting out its deadline for a slow start."""
    started: list[subprocess.Popen[bytes]] = []
    queue = load_settings(config, require_secrets=False).worker.queue

    def start(name: str) -> subprocess.Popen[bytes]:
        proc = celery_worker_process(config, queue=queue, name=f"{name}@%h", threads=20)
        started.append(proc)
        # Each process started here writes one heartbeat, and a killed one's stays.
        wait_for_heartbeats(redis_url, namespace, [proc], count=len(started))
        return proc

    yield start
    stop(started)


def request(i: int = 0, **fields: object) -> TurnRequest:
    return TurnRequest.model_validate(
        {
            "tenant_id": "acme",
            "messages": [Message(role="user", content=f"question {i}")],
            "deadline_s": 10,
            **fields,
        }
    )


def test_turns_complete_through_worker_processes(
    config: Path, sim: Simulator, start_worker: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    start_worker("a")
    start_worker("b")
    app = make_app(load_settings(config, require_secrets=False))
    sim.set_faults("alpha", Fault(status=503, rate=0.3))
    handles = [enqueue_turn(request(i), app=app) for i in range(30)]
    results = [h.get(timeout_s=60) for h in handles]
    assert all(r.status is Status.OK for r in results)
    assert {r.turn_id for r in results} == {h.turn_id for h in handles}
    assert any(r.step == 1 for r in results)
    assert any(r.step == 0 for r in results)


def test_a_killed_worker_loses_no_turn_and_its_billed_call_is_charged(
    config: Path,
    sim: Simulator,
    redis_url: str,
    namespace: str,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    first = start_worker("doomed")
    settings = load_settings(config, require_secrets=False)
    app = make_app(settings)
    sim.set_faults("alpha", Fault(latency_s=3))
    turn = request(tenant_id="kill-test")
    handle = enqueue_turn(turn, app=app)
    deadline = time.monotonic() + 20
    while sim.calls("alpha") == 0:
        assert time.monotonic() < deadline, "the first worker never called the model"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    start_worker("rescuer")
    result = handle.get(timeout_s=60)
    assert result.status is Status.OK
    assert result.turn_id == turn.turn_id
    assert sim.calls("alpha") == 2  # the killed attempt, and the rescuer's

    async def books() -> budgets.BudgetReport:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await budgets.Ledger(client, namespace=namespace).report("kill-test")
        finally:
            await client.aclose()

    # The killed call reached the provider, who bills it: its hold stays until it is
    # reclaimed (`hold_ttl_s`), and is then charged. The rescuer's call costs what it cost.
    report = asyncio.run(books())
    killed = report.reserved_micros + report.day.reclaimed_micros
    assert report.day.spent_micros - report.day.reclaimed_micros == result.cost_micros
    assert killed > 0
    assert report.day.reclaimed_charges in (0, 1)


def test_a_malformed_payload_fails_at_once_and_is_never_retried(
    config: Path, sim: Simulator, start_worker: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    start_worker("a")
    app = make_app(load_settings(config, require_secrets=False))
    sent = app.send_task(TASK_NAME, args=[{"tenant_id": "a|b", "messages": "nope"}])
    raw = sent.get(timeout=30, disable_sync_subtasks=False)
    assert raw["status"] == "failed"
    assert raw["reason"] == "invalid_input"
    assert "tenant_id" in raw["error"]
    assert "messages" in raw["error"]
    assert sent.state == "SUCCESS"  # an answer, not an exception Celery would retry
    assert sim.calls() == 0


def test_a_turn_sent_under_a_task_id_of_its_own_is_answered_there(
    config: Path, sim: Simulator, start_worker: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    start_worker("a")
    app = make_app(load_settings(config, require_secrets=False))
    turn = request(tenant_id="own-id")
    sent = app.send_task(TASK_NAME, args=[turn.model_dump(mode="json")])  # a uuid, not turn_id
    assert sent.id != turn.turn_id
    raw = sent.get(timeout=30, disable_sync_subtasks=False)
    assert (raw["turn_id"], raw["status"]) == (turn.turn_id, "ok")
    assert sim.calls() == 1


def test_the_same_turn_delivered_twice_is_run_and_reported_once(
    config: Path, sim: Simulator, start_worker: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    start_worker("a")
    start_worker("b")
    app = make_app(load_settings(config, require_secrets=False))
    sim.set_faults("alpha", Fault(latency_s=1))
    turn = request(tenant_id="twice")
    first = enqueue_turn(turn, app=app)
    second = enqueue_turn(turn, app=app)
    one, two = first.get(timeout_s=60), second.get(timeout_s=60)
    assert one == two
    assert sim.calls("alpha") == 1


def test_a_stream_run_again_after_its_worker_died_reads_as_the_rerun_alone(
    config: Path,
    sim: Simulator,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A worker killed mid-stream: its turn is redelivered and run again. Every reader's
    text is the stored result's: a live `handle.stream()` is told to start over, and a
    reader that connects after the rerun began (`stream()`, `relevo tail`) sees the rerun
    alone. Without a fresh stream per run, they got the first run's text, then the rerun's."""
    doomed = start_worker("doomed")
    settings = load_settings(config, require_secrets=False)
    # The first call drips its 40 pieces over 10 s (a tail process starts meanwhile, however
    # loaded the machine); the rerun's call streams at once.
    sim.set_faults("alpha", Fault(tokens=40, token_interval_s=0.25, times=1), Fault(tokens=40))
    turn = request(tenant_id="rerun", stream=True)

    async def scenario() -> tuple[str, list[str], int, tuple[int | None, bytes, bytes]]:
        async with Producer.from_settings(settings) as producer:
            handle = await producer.enqueue(turn)
            # `relevo tail` from as soon as the turn is sent (before: an unknown turn) to its end.
            pipe = asyncio.subprocess.PIPE
            live = await asyncio.create_subprocess_exec(
                *RELEVO, "tail", turn.turn_id, "--config", str(config), stdout=pipe, stderr=pipe
            )
            try:
                assert live.stdout is not None
                pieces: list[str] = []
                restarts = 0

                async def read_live() -> None:
                    nonlocal restarts
                    while True:
                        try:
                            async for text in handle.stream(timeout_s=90):
                                pieces.append(text)  # noqa: PERF401 - the kill waits for them
                            return
                        except StreamRestarted:
                            restarts += 1
                            pieces.clear()  # what the caller showed is void

                reader = asyncio.create_task(read_live())
                deadline = time.monotonic() + 20
                while len(pieces) < 8:
                    assert time.monotonic() < deadline, "the first run never streamed"
                    await asyncio.sleep(0.02)
                printed = await asyncio.wait_for(live.stdout.read(1), 20)  # the first run's text
                doomed.send_signal(signal.SIGKILL)
                await asyncio.to_thread(doomed.wait)
                shown_before = "".join(pieces)
                start_worker("rescuer")
                result = await handle.result(timeout_s=90)
                await asyncio.wait_for(reader, 30)
                assert result.status is Status.OK
                assert result.reply is not None
                assert shown_before
                assert result.reply.text.startswith(shown_before)
                # Connected after the rerun: the rerun's text alone, and no restart.
                again = [text async for text in producer.turn(handle.turn_id).stream(timeout_s=10)]
                rest, err = await asyncio.wait_for(live.communicate(), 30)
                tailed = (live.returncode, printed + rest, err)
                return result.reply.text, ["".join(pieces), "".join(again)], restarts, tailed
            finally:
                # A failed test must not leave `relevo tail` running: the garbage collector
                # would report it (ResourceWarning) in whichever test comes next.
                if live.returncode is None:
                    live.kill()
                    await live.wait()

    text, read, restarts, (tail_exit, tail_out, tail_err) = asyncio.run(scenario())
    assert read == [text, text]
    assert restarts == 1
    assert sim.calls("alpha") == 2  # the killed run's call, and the rerun's
    live_tail, err = tail_out.decode(), tail_err.decode()
    assert tail_exit == 0, err
    assert "runs again" in err
    # `relevo tail` cannot take printed text back: the rerun's starts on a line of its own.
    assert live_tail.endswith("\n" + text + "\n")
    assert main(["tail", turn.turn_id, "--config", str(config)]) == 0
    assert capsys.readouterr().out == text + "\n"


def test_a_lost_broker_connection_leaves_the_running_turn_to_its_one_answer(
    private_redis: tuple[str, subprocess.Popen[bytes]],
    sim: Simulator,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The worker's broker connection killed mid-call: the call under way answers the turn,
    once, and the delivery kombu puts back as it reconnects is answered from the turn store
    (no model called again). Celery is told not to cancel the turn: under the threads pool
    it cannot, and Celery 6 would try by default (pinned in `celery_app`)."""
    url, _ = private_redis
    config = write_worker_config(
        tmp_path / "chain.toml",
        sim=sim.url,
        redis_url=url,
        namespace=namespace,
        sections=FLEET_SECTIONS,
    )
    app = make_app(load_settings(config, require_secrets=False))
    pinned = ("worker_cancel_long_running_tasks_on_connection_loss", "worker_soft_shutdown_timeout")
    assert [app.conf.changes.get(key) for key in pinned] == [False, 0]
    client = redis.Redis.from_url(url)
    try:
        with celery_worker(config, threads=4):
            sim.set_faults("alpha", Fault(latency_s=1.5, times=1))
            handle = enqueue_turn(request(deadline_s=30), app=app)
            deadline = time.monotonic() + 30
            while sim.calls("alpha") < 1:
                assert time.monotonic() < deadline, "the turn never started"
                time.sleep(0.02)
            consumers = [c["id"] for c in client.client_list() if c.get("cmd") == "brpop"]
            assert consumers
            for consumer in consumers:  # a private server: only this worker's
                client.client_kill_filter(_id=consumer)
            result = handle.get(timeout_s=60)
            assert (result.status, result.step) == (Status.OK, 0)  # the call under way answered
            # Put back and taken again: nothing left queued or unacknowledged.
            while client.llen(namespace) or client.hlen("unacked"):
                assert time.monotonic() < deadline, "the delivery put back was never consumed"
                time.sleep(0.05)
            time.sleep(0.5)
            assert (sim.calls("alpha"), sim.calls("beta")) == (1, 0)
    finally:
        client.close()
        app.close()
