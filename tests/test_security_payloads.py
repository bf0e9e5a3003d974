"""Point 1: task payloads. JSON only, size limits at enqueue and on the worker, bad shapes refused.

The worker-side tests run a real `celery worker` process on the real Redis and
send it what an attacker with broker access could: a pickle that would run
code, payloads over the limits, payloads of the wrong shape.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from tests.test_security_kit import celery_worker, limited_config
from worker.errors import InputError
from worker.fleet.app import TASK_NAME, make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.runner import TurnRunner
from worker.settings import LimitsSettings, Settings, load_settings
from worker.simulator import Simulator
from worker.turn.intake import checked_turn
from worker.types import TurnRequest

# The limits of the workers' configuration (tests/test_security_kit.py).
LIMITS = LimitsSettings(
    max_request_bytes=16_384, max_messages=50, max_tools=8, max_message_chars=4096
)
USER = {"role": "user", "content": "hi"}


def turn(**fields: Any) -> dict[str, Any]:
    return {"tenant_id": "acme", "messages": [USER], **fields}


def tool(i: int) -> dict[str, Any]:
    return {"name": f"t{i}", "description": "x"}


# name -> (payload over one limit, the limit its error must name)
OVER_LIMITS: dict[str, tuple[dict[str, Any], str]] = {
    "bytes": (turn(messages=[{"role": "user", "content": "x" * 20_000}]), "max_request_bytes"),
    "messages": (turn(messages=[USER] * 51), "max_messages"),
    "tools": (turn(tools=[tool(i) for i in range(9)]), "max_tools"),
    "message-chars": (
        turn(messages=[{"role": "user", "content": "x" * 5_000}]),
        "max_message_chars",
    ),
}

# Payloads that are not a turn, and the field their error must name.
DEEP: Any = "bottom"
for _ in range(200):
    DEEP = {"x": [DEEP]}
MALFORMED: dict[str, tuple[object, str]] = {
    "a list": ([turn()], "(root)"),
    "a string": ("hello", "(root)"),
    "a number": (42, "(root)"),
    "null": (None, "(root)"),
    "JSON text of a list": ("[1, 2]", "(root)"),
    "not JSON text": ("{'tenant_id': 'acme'", "(root)"),
    "empty object": ({}, "tenant_id"),
    "numbers as messages": (turn(messages=[1, 2, 3]), "messages.0"),
    "messages as a string": (turn(messages="hello"), "messages"),
    "messages as an object": (turn(messages={"role": "user"}), "messages"),
    "no messages": (turn(messages=[]), "messages"),
    "unknown role": (turn(messages=[{"role": "root", "content": "x"}]), "messages.0.role"),
    "content as a list": (turn(messages=[{"role": "user", "content": [1]}]), "messages.0.content"),
    "nested garbage in content": (
        turn(messages=[{"role": "user", "content": DEEP}]),
        "messages.0.content",
    ),
    "nested garbage as the tenant id": (turn(tenant_id=DEEP), "tenant_id"),
    "tool call on a user message": (
        turn(messages=[{"role": "user", "tool_calls": [{"id": "1", "name": "f"}]}]),
        "messages.0",
    ),
    "tool arguments as a list": (
        turn(
            messages=[
                USER,
                {"role": "assistant", "tool_calls": [{"id": "1", "name": "f", "arguments": [1]}]},
                {"role": "tool", "tool_call_id": "1"},
            ]
        ),
        "messages.1.tool_calls.0.arguments",
    ),
    "last message from the assistant": (
        turn(messages=[USER, {"role": "assistant", "content": "x"}]),
        "(root)",
    ),
    "tenant id as a number": (turn(tenant_id=7), "tenant_id"),
    "max_tokens as a string": (turn(max_tokens="many"), "max_tokens"),
    "max_tokens negative": (turn(max_tokens=-1), "max_tokens"),
    "max_tokens huge": (turn(max_tokens=10**30), "max_tokens"),
    "deadline NaN": (turn(deadline_s=float("nan")), "deadline_s"),
    "deadline infinite": (turn(deadline_s=float("inf")), "deadline_s"),
    "stream as a list": (turn(stream=[True]), "stream"),
    "tools as a string": (turn(tools="all"), "tools"),
    "duplicate tool names": (turn(tools=[tool(1), tool(1)]), "(root)"),
    "tool parameters as a list": (turn(tools=[{"name": "f", "parameters": [1]}]), "tools.0"),
    "lone surrogate": (turn(messages=[{"role": "user", "content": "\ud800"}]), "messages.0"),
    "10,000 messages": (turn(messages=[USER] * 10_000), "messages"),
}


@pytest.mark.parametrize("case", OVER_LIMITS, ids=list(OVER_LIMITS))
@pytest.mark.parametrize("form", ["dict", "json", "model"])
def test_a_turn_over_a_limit_is_refused_naming_the_limit(case: str, form: str) -> None:
    payload, limit = OVER_LIMITS[case]
    given: object = payload
    if form == "json":
        given = json.dumps(payload)
    elif form == "model":
        given = TurnRequest.model_validate(payload)
    with pytest.raises(InputError, match=f"limits.{limit} "):
        checked_turn(given, LIMITS)


def test_a_turn_within_the_limits_passes() -> None:
    request = checked_turn(turn(tools=[tool(i) for i in range(8)]), LIMITS)
    assert len(request.tools) == 8


def test_the_default_limits_are_sensible() -> None:
    limits = LimitsSettings()
    assert limits.max_request_bytes == 16 * 1024 * 1024
    assert (limits.max_messages, limits.max_tools) == (500, 128)
    with pytest.raises(InputError, match=r"limits\.max_messages"):
        checked_turn(turn(messages=[USER] * 501), limits)


# --- the worker, without Celery: every malformed payload is a failed result -------------


@pytest.fixture
def config(sim: Simulator, redis_url: str, namespace: str, tmp_path: Path) -> Path:
    return limited_config(
        tmp_path / "chain.toml", redis_url=redis_url, namespace=namespace, sim=sim.url
    )


@pytest.fixture
def runner(config: Path) -> Iterator[TurnRunner]:
    made = TurnRunner(load_settings(config, require_secrets=False))
    yield made
    made.close()


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_payload_fails_naming_the_field(
    case: str, runner: TurnRunner, sim: Simulator
) -> None:
    payload, field = MALFORMED[case]
    sim.reset()
    result = runner.answer(payload)
    assert result["status"] == "failed"
    assert result["reason"] == "invalid_input"
    assert field in result["error"]
    assert sim.calls() == 0


@pytest.mark.parametrize("case", OVER_LIMITS, ids=list(OVER_LIMITS))
def test_the_worker_refuses_a_payload_over_its_limits(case: str, runner: TurnRunner) -> None:
    payload, limit = OVER_LIMITS[case]
    assert runner.settings.limits == LIMITS
    result = runner.answer(payload)
    assert (result["status"], result["reason"]) == ("failed", "invalid_input")
    assert f"limits.{limit}" in result["error"]


# --- through Celery and a real worker process --------------------------------------------


class Touch:
    """Unpickling this creates a file: proof that a worker ran code from a message."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


@pytest.fixture
def fleet(config: Path, sim: Simulator) -> Iterator[tuple[Celery, Settings]]:
    settings = load_settings(config, require_secrets=False)
    sim.reset()
    # Celery refuses to start as root when pickle is accepted; lift that guard so the
    # only protection under test is `accept_content`.
    with celery_worker(config, settings.worker.queue, env={"C_FORCE_ROOT": "1"}):
        yield make_app(settings), settings


def queued(redis_url: str, settings: Settings) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen(settings.worker.queue))
    finally:
        client.close()


@pytest.mark.slow
def test_a_pickled_message_is_refused_and_its_code_never_runs(
    fleet: tuple[Celery, Settings], tmp_path: Path, redis_url: str
) -> None:
    app, settings = fleet
    marker = tmp_path / "pwned"
    evil = app.send_task(TASK_NAME, args=[Touch(marker)], serializer="pickle")
    deadline = time.monotonic() + 15
    while queued(redis_url, settings) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queued(redis_url, settings) == 0  # taken off the queue, and not put back
    time.sleep(1.0)
    assert not marker.exists()
    # A good turn sent after it comes back: the worker was up and read past the pickle.
    good = enqueue_turn(turn(), app=app, limits=settings.limits).get(timeout_s=60)
    assert good.status == "ok"
    assert evil.state == "PENDING"  # never run, so no result either
    assert queued(redis_url, settings) == 0
    assert (app.conf.accept_content, app.conf.result_accept_content) == (["json"], ["json"])


@pytest.mark.slow
def test_limits_hold_at_enqueue_and_again_on_the_worker(
    fleet: tuple[Celery, Settings], sim: Simulator, redis_url: str
) -> None:
    app, settings = fleet
    for payload, limit in OVER_LIMITS.values():
        with pytest.raises(InputError, match=f"limits.{limit}"):
            enqueue_turn(payload, app=app, limits=settings.limits)
    assert queued(redis_url, settings) == 0
    sent = {
        limit: app.send_task(TASK_NAME, args=[payload]) for payload, limit in OVER_LIMITS.values()
    }
    for limit, handle in sent.items():
        raw = handle.get(timeout=30, disable_sync_subtasks=False)
        assert (raw["status"], raw["reason"]) == ("failed", "invalid_input")
        assert f"limits.{limit}" in raw["error"]
        assert handle.state == "SUCCESS"  # an answer, not an error Celery would retry
    assert sim.calls() == 0


@pytest.mark.slow
def test_malformed_payloads_sent_to_the_broker_fail_and_are_never_retried(
    fleet: tuple[Celery, Settings], sim: Simulator
) -> None:
    app, _ = fleet
    sent = {
        case: app.send_task(TASK_NAME, args=[payload]) for case, (payload, _) in MALFORMED.items()
    }
    for case, handle in sent.items():
        raw = handle.get(timeout=30, disable_sync_subtasks=False)
        assert (raw["status"], raw["reason"]) == ("failed", "invalid_input"), case
        assert MALFORMED[case][1] in raw["error"], case
        assert handle.state == "SUCCESS"
    assert sim.calls() == 0
