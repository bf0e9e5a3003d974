"""A send that fails says whether the turn will run: `TurnRecorded` (it runs: keep its id)
or `TurnNotSent` (it does not), and `relevo enqueue` exits 10 or 6.

Redis stalls (`DEBUG SLEEP`, on a redis-server of the test's own) while a turn is sent.
What the exception says is checked against what Redis holds once it answers again: a
turn runs exactly when its record is there (the workers' sweeper sends a recorded turn
the broker does not have, `tests/test_sweeper.py`).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.signals import before_task_publish

from tests.chainkit import turn, worker_config
from tests.test_offline_room import stalled_for
from worker.cli.common import EXIT_RECORDED, EXIT_UNAVAILABLE
from worker.cli.main import main
from worker.fleet import TurnNotSent, TurnRecorded
from worker.fleet.broker import celery_app
from worker.fleet.enqueue import send_turn
from worker.fleet.turnstore import TurnKeys
from worker.settings import load_settings

pytestmark = pytest.mark.slow

STALL_S = 3


@pytest.fixture
def config_text(private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str) -> str:
    url, _ = private_redis
    return worker_config(sim="http://127.0.0.1:9", redis_url=url, namespace=namespace)


@pytest.fixture
def app(config_text: str) -> Iterator[Celery]:
    """A producer's app on the private Redis, its broker connection already open."""
    made = celery_app(load_settings(data=tomllib.loads(config_text), require_secrets=False))
    send_turn(made, turn(), ignore_result=True)
    try:
        yield made
    finally:
        made.close()


def recorded(url: str, namespace: str, turn_id: str) -> bool:
    """Whether the fleet has the turn's record (once Redis answers again)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        return client.zscore(TurnKeys(namespace).sent, turn_id) is not None
    finally:
        client.close()


@contextmanager
def stall_at_publish(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Redis stalls (stopped: SIGSTOP) as the turn is published, after its record was
    written, until the block ends: longer than the publish's retries."""

    def stall(**_: Any) -> None:
        proc.send_signal(signal.SIGSTOP)

    before_task_publish.connect(stall, weak=False)
    try:
        yield
    finally:
        before_task_publish.disconnect(stall)
        proc.send_signal(signal.SIGCONT)


def test_a_stall_while_the_turn_is_sent_says_whether_it_will_run(
    app: Celery, private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> None:
    """Stalled before the send: whichever step fails, the exception's type matches what
    Redis holds once it wakes. Without it: a FleetUnavailable either way, and a turn
    recorded while the caller was told the send failed."""
    url, _ = private_redis
    request = turn()
    with stalled_for(url, STALL_S), pytest.raises((TurnRecorded, TurnNotSent)) as failed:
        send_turn(app, request, ignore_result=True)
    time.sleep(0.5)  # a stalled write lands once Redis wakes
    will_run = isinstance(failed.value, TurnRecorded)
    assert recorded(url, namespace, request.turn_id) is will_run
    assert failed.value.turn_id == request.turn_id  # type: ignore[attr-defined]


def test_a_publish_that_fails_after_the_record_raises_turn_recorded(
    app: Celery, private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> None:
    url, proc = private_redis
    request = turn()
    with stall_at_publish(proc), pytest.raises(TurnRecorded) as failed:
        send_turn(app, request, ignore_result=True)
    assert failed.value.acknowledged
    assert failed.value.turn_id == request.turn_id
    assert "it is recorded" in str(failed.value)
    assert recorded(url, namespace, request.turn_id)


def test_relevo_enqueue_exits_10_with_the_id_of_a_recorded_turn_and_6_for_none(
    private_redis: tuple[str, subprocess.Popen[bytes]],
    namespace: str,
    config_text: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, proc = private_redis
    config = tmp_path / "chain.toml"
    config.write_text(config_text)
    request = tmp_path / "turn.json"
    request.write_text(turn().model_copy(update={"turn_id": "recorded-turn"}).model_dump_json())
    command = ["enqueue", "--config", str(config), "--input", str(request)]
    with stall_at_publish(proc):
        assert main(command) == EXIT_RECORDED
    out, err = capsys.readouterr()
    assert out == "recorded-turn\n"
    assert recorded(url, namespace, "recorded-turn")
    assert "turn recorded-turn will run: keep its id" in err
    # Stalled before the send: nothing recorded, exit 6 and no id.
    request.write_text(turn().model_copy(update={"turn_id": "never-recorded"}).model_dump_json())
    with stalled_for(url, STALL_S):
        assert main(command) == EXIT_UNAVAILABLE
    out, _ = capsys.readouterr()
    assert out == ""
    time.sleep(0.5)
    assert not recorded(url, namespace, "never-recorded")


def test_the_example_web_app_accepts_a_turn_recorded_before_its_publish_failed(
    private_redis: tuple[str, subprocess.Popen[bytes]], config_text: str, namespace: str
) -> None:
    """202 with the turn id, not a 503 that has the client send it again under a new id."""
    from starlette.testclient import TestClient

    from examples.webapp import create_app

    url, proc = private_redis
    settings = load_settings(data=tomllib.loads(config_text), require_secrets=False)
    web = create_app(settings, authenticate=lambda _: "acme")
    body = {"messages": [{"role": "user", "content": "Where is my order?"}]}
    with TestClient(web) as client:
        with stall_at_publish(proc):
            sent = client.post("/turns", json=body)
        assert sent.status_code == 202, sent.text
        turn_id = sent.json()["turn_id"]
        assert recorded(url, namespace, turn_id)
        assert client.get(f"/turns/{turn_id}").status_code == 202  # pending, found


def test_a_publish_stalled_after_an_earlier_send_failed_still_says_recorded(
    app: Celery, private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> None:
    """A send that timed out leaves the producer's broker channel closed; the next send's
    record lands and its publish stalls. Without the fix, kombu's retry published on the
    closed channel and the caller got an AttributeError for a turn that will run."""
    url, proc = private_redis
    with stalled_for(url, STALL_S), pytest.raises((TurnRecorded, TurnNotSent)):
        send_turn(app, turn(), ignore_result=True)
    time.sleep(0.5)
    request = turn()

    def stall(**_: Any) -> None:
        proc.send_signal(signal.SIGSTOP)
        threading.Timer(STALL_S, proc.send_signal, args=(signal.SIGCONT,)).start()

    before_task_publish.connect(stall, weak=False)
    failed: TurnRecorded | None = None
    try:
        # It runs or it raises TurnRecorded: the record is written before the publish.
        send_turn(app, request, ignore_result=True)
    except TurnRecorded as exc:
        failed = exc
    finally:
        before_task_publish.disconnect(stall)
    assert failed is None or failed.turn_id == request.turn_id
    time.sleep(STALL_S)
    assert recorded(url, namespace, request.turn_id)
