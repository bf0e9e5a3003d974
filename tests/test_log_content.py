"""No prompt, reply, tool argument or tool output in any line a fleet logs, at any level.

A real `relevo worker` node (its own process and two `celery worker` processes, all
writing one stream) runs turns whose prompt, tool arguments, tool output and reply each
carry a canary; every line of every process is searched for them.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog

from tests.chainkit import KEY
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.turnstore import TurnKeys
from worker.observability.logs import configure_logging
from worker.settings import load_settings
from worker.simulator import Fault, Simulator
from worker.types import Status

RELEVO = [sys.executable, "-m", "worker.cli"]
PROMPT = "CANARYPROMPT7f3a"
ARGUMENT = "CANARYARGUMENT9c1d"
OUTPUT = "CANARYOUTPUT4b2e"
REPLY = "CANARYREPLY5e8f"
ANSWER_ARGUMENT = "CANARYANSWERARG2d6c"
CANARIES = (PROMPT, ARGUMENT, OUTPUT, REPLY, ANSWER_ARGUMENT)


def turn(stream: bool) -> dict[str, Any]:
    """A turn with the canaries in its prompt, an earlier tool call and that tool's output."""
    call = {"id": "call-1", "name": "lookup", "arguments": {"order": ARGUMENT}}
    return {
        "tenant_id": "acme",
        "messages": [
            {"role": "user", "content": f"Where is my order? {PROMPT}"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call-1", "content": f"shipped {OUTPUT}"},
        ],
        "tools": [{"name": "lookup", "parameters": {"type": "object", "properties": {}}}],
        "deadline_s": 20,
        "stream": stream,
    }


def run_node(config: Path, log: Path, level: str, redis_url: str, namespace: str) -> Any:
    env = {**os.environ, "RELEVO_TEST_KEY": KEY}
    args = ["--config", str(config), "--processes", "2", "--threads", "4"]
    with log.open("wb") as out:
        node = subprocess.Popen(
            [*RELEVO, "worker", *args, "--metrics-port", "0", "--log-level", level],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    heartbeats = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    try:
        while heartbeats.zcard(TurnKeys(namespace).workers) < 2:
            assert node.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the node's processes wrote no heartbeat"
            time.sleep(0.1)
    finally:
        heartbeats.close()
    return node


@pytest.mark.slow
@pytest.mark.parametrize("level", ["debug"])  # every line info has, and more
@pytest.mark.usefixtures("fresh_sim")
def test_no_content_in_any_line_of_a_fleets_logs(
    sim: Simulator, fleet_toml: Path, redis_url: str, namespace: str, level: str
) -> None:
    config = fleet_toml
    log = config.parent / "node.log"
    node = run_node(config, log, level, redis_url, namespace)
    try:
        app = make_app(load_settings(config, require_secrets=False))
        sim.set_faults(
            "alpha",
            Fault(
                reply_tool="lookup",
                tool_args={"order": ANSWER_ARGUMENT},
                tool_with_text=True,
                times=2,
            ),
            Fault(refusal=REPLY, times=2),
        )
        results = [
            enqueue_turn(turn(stream), app=app).get(timeout_s=60) for stream in (False, True) * 2
        ]
        app.close()
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=30)
    returned = json.dumps([r.model_dump(mode="json") for r in results])
    assert [r.status for r in results][:2] == [Status.OK, Status.OK]
    # The canaries did reach the replies: what the logs leave out was there to leave out.
    assert ANSWER_ARGUMENT in returned
    assert REPLY in returned
    lines = log.read_text(errors="replace").splitlines()
    assert any("celery.app.trace" in line for line in lines), "Celery's task lines are kept"
    leaked = [line for line in lines if any(c in line for c in CANARIES)]
    assert leaked == []


def test_a_logged_exception_shows_no_frames_locals(capsys: pytest.CaptureFixture[str]) -> None:
    """Whether relevo configured structlog (JSON, console) or the tests run on its defaults,
    a traceback is printed without each frame's local variables."""
    secret = "CANARYLOCAL0a1b"

    def fail(password: str) -> None:
        raise RuntimeError("store unreachable")

    outputs = []
    for configure in (None, "json", "console"):
        if configure is not None:
            configure_logging(level="info", json=configure == "json", stream=sys.stdout)
        try:
            fail(secret)
        except RuntimeError:
            structlog.get_logger("relevo.test").exception("store.failed")
        outputs.append(capsys.readouterr().out)
    assert all("store unreachable" in out for out in outputs)
    assert [secret in out for out in outputs] == [False] * 3


@pytest.mark.parametrize("content", [False, True])
def test_log_content_keeps_celerys_task_values_only_when_asked(content: bool) -> None:
    out = io.StringIO()
    configure_logging(level="debug", json=True, stream=out, content=content)
    trace = logging.getLogger("celery.app.trace")
    fields = {"id": "t1", "name": "relevo.run_turn", "runtime": 0.5, "return_value": REPLY}
    trace.info("Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s", fields)
    (line,) = out.getvalue().splitlines()
    shown = REPLY if content else "[content]"
    assert json.loads(line)["event"] == f"Task relevo.run_turn[t1] succeeded in 0.5s: {shown}"


@pytest.mark.parametrize("content", [False, True])
def test_a_message_celery_cannot_run_is_logged_without_its_body(content: bool) -> None:
    """An unknown task's or an undecodable message's line (`dump_body`) keeps the size."""
    from celery.worker.consumer import consumer

    class Message:
        body = json.dumps([{"messages": [{"role": "user", "content": PROMPT}]}]).encode()

    configure_logging(level="debug", json=True, stream=io.StringIO(), content=content)
    shown = consumer.dump_body(Message(), None)
    assert (PROMPT in shown) is content
    configure_logging(level="debug", json=True, stream=io.StringIO())


def test_a_sent_turn_shows_celery_no_repr_of_its_payload(
    fleet_toml: Path, redis_url: str, namespace: str
) -> None:
    """`argsrepr` (what Celery's lines, `celery inspect` and Flower show of a task's
    arguments) holds no text of the turn; the payload itself is whole."""
    config = fleet_toml
    app = make_app(load_settings(config, require_secrets=False))
    try:
        handle = enqueue_turn(turn(stream=False), app=app)
    finally:
        app.close()
    with redis.Redis.from_url(redis_url) as client:
        (raw,) = client.hvals(f"{{{namespace}}}:fair:msgs")
        client.delete(*client.keys(f"{{{namespace}}}:*"))
    message = json.loads(raw.decode().split("|", 4)[4])
    assert message["headers"]["id"] == handle.turn_id
    assert (message["headers"]["argsrepr"], message["headers"]["kwargsrepr"]) == ("[content]", "{}")
    assert PROMPT in base64.b64decode(message["body"]).decode()
