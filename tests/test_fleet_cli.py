"""`relevo worker`, `enqueue`, `result` and `tail`, against the real Redis and real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.chainkit import KEY
from tests.netkit import free_port
from worker.cli.main import main
from worker.fleet.loop import LoopThread
from worker.fleet.runner import TurnRunner
from worker.observability.logs import configure_logging
from worker.settings import load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnRequest

RELEVO = [sys.executable, "-m", "worker.cli"]


@pytest.fixture
def config(fleet_toml: Path, fresh_sim: Simulator, provider_key: str) -> Path:
    return fleet_toml


@pytest.fixture
def runner(config: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[TurnRunner]:
    configure_logging(level="warning")
    made = TurnRunner(load_settings(config), loop=LoopThread())
    yield made
    made.close()


def turn(**fields: object) -> TurnRequest:
    return TurnRequest.model_validate(
        {"tenant_id": "acme", "messages": [Message(role="user", content="hello")], **fields}
    )


def test_result_prints_a_finished_turn(
    config: Path, runner: TurnRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    request = turn()
    runner.answer(request.model_dump(mode="json"))
    assert main(["result", request.turn_id, "--config", str(config)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["turn_id"] == request.turn_id
    assert printed["status"] == "ok"


def test_result_of_an_unknown_turn_is_a_clear_error(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["result", "never-ran", "--config", str(config)]) == 2
    assert "unknown turn 'never-ran'" in capsys.readouterr().err


def test_tail_prints_a_streaming_turns_content(
    config: Path, runner: TurnRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    request = turn(stream=True)
    result = runner.answer(request.model_dump(mode="json"))
    assert main(["tail", request.turn_id, "--config", str(config)]) == 0
    assert capsys.readouterr().out.strip() == result["reply"]["text"]


def test_a_turn_run_twice_by_a_runner_calls_the_model_once(
    runner: TurnRunner, sim: Simulator
) -> None:
    payload = turn().model_dump(mode="json")
    assert runner.answer(payload) == runner.answer(payload)
    assert sim.calls("alpha") == 1


def start_node(config: Path, env: dict[str, str], *, threads: int) -> subprocess.Popen[bytes]:
    """`relevo worker` with two processes of `threads` threads, no metrics port."""
    args = ["--config", str(config), "--processes", "2", "--threads", str(threads)]
    return subprocess.Popen(
        [*RELEVO, "worker", *args, "--metrics-port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_enqueue_wait_through_relevo_worker(config: Path, sim: Simulator, tmp_path: Path) -> None:
    env = {**os.environ, "RELEVO_TEST_KEY": KEY}
    node = start_node(config, env, threads=8)
    try:
        sim.set_faults("alpha", Fault(status=529))
        request = tmp_path / "turn.json"
        request.write_text(turn(deadline_s=10).model_dump_json())
        done = subprocess.run(
            [*RELEVO, "enqueue", "--config", str(config), "--input", str(request), "--wait"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["status"] == Status.OK
        assert result["step"] == 1
        queued = subprocess.run(
            [*RELEVO, "enqueue", "--config", str(config), "--input", str(request)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert queued.stdout.strip() == json.loads(request.read_text())["turn_id"]
    finally:
        node.send_signal(signal.SIGTERM)
        started = time.monotonic()
        node.wait(timeout=30)
        assert time.monotonic() - started < 30


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_worker_processes_end_when_relevo_worker_is_killed(config: Path) -> None:
    """A parent killed alone (SIGKILL) leaves no Celery child consuming under PID 1."""
    env = {**os.environ, "RELEVO_TEST_KEY": KEY}
    node = start_node(config, env, threads=4)
    deadline = time.monotonic() + 30
    while len(children := children_of(node.pid)) < 2:
        assert time.monotonic() < deadline, "relevo worker did not start its processes"
        time.sleep(0.1)
    time.sleep(3)  # the children are up and consuming
    node.kill()
    node.wait(timeout=10)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in children):
        assert time.monotonic() < deadline, f"orphaned worker processes: {children}"
        time.sleep(0.2)


def healthz(port: int) -> tuple[int, str]:
    """`relevo worker`'s `/healthz`: its status and body (0 while nothing answers)."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except httpx.HTTPError:
        return 0, ""
    return response.status_code, response.text


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_healthz_names_a_worker_process_that_stopped_beating(config: Path) -> None:
    """The liveness probe asks the node itself: a process whose event loop is stuck
    (here, stopped) fails it within a few beats; it passes again once it beats."""
    port = free_port()
    env = {**os.environ, "RELEVO_TEST_KEY": KEY, "RELEVO_OBSERVABILITY__LIVENESS_STALE_S": "6"}
    args = ["--config", str(config), "--processes", "2", "--threads", "4"]
    node = subprocess.Popen(
        [*RELEVO, "worker", *args, "--metrics-port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stopped = None
    try:
        wait_for(lambda: len(children_of(node.pid)) == 2, "relevo worker started no processes")
        wait_for(
            lambda: healthz(port) == (200, "ok: 2 of 2 worker processes beat within 6 s\n"),
            f"both processes never beat: {healthz(port)}",
        )
        stopped = children_of(node.pid)[0]
        os.kill(stopped, signal.SIGSTOP)
        wait_for(lambda: healthz(port)[0] == 503, "/healthz still 200 with a process stopped")
        _, body = healthz(port)
        assert body.startswith("stale: 1 of 2 worker processes beat within 6 s"), body
        assert f"pid {stopped} last beat" in body
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        wait_for(lambda: healthz(port)[0] == 200, "/healthz stayed 503 once the process beat")
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=30)
