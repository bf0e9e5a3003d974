"""The fleet's Redis down or hung: every producer call raises `FleetUnavailable` within
seconds, naming that Redis; operator commands name the store that failed."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from tests.chainkit import turn, worker_config
from tests.netkit import free_port
from tests.test_store_faults import restart_empty
from worker.cli.common import OperatorError, operator_redis
from worker.errors import RelevoError
from worker.fleet import (
    FleetUnavailable,
    Producer,
    TurnHandle,
    TurnNotSent,
    enqueue_turn,
    make_app,
)
from worker.fleet.broker import SEND_TIMEOUT_S, celery_app
from worker.fleet.enqueue import send_turn
from worker.fleet.fairqueue import FairKeys
from worker.fleet.turnstore import TurnKeys
from worker.settings import RedisSettings, Settings, load_settings

TURN = {"tenant_id": "acme", "messages": [{"role": "user", "content": "hi"}]}
# A send gives up after SEND_TIMEOUT_S (kombu's default: 6 s of retries, or never with
# Redis hung); so does a read of the turn store. Celery's result store tries four times.
# A loaded machine gets room.
SEND_S = SEND_TIMEOUT_S + 2.5
WAIT_S = 4 * SEND_TIMEOUT_S + 3.0


def settings_on(url: str) -> Settings:
    text = worker_config(sim="http://127.0.0.1:9", redis_url=url, namespace="down")
    return load_settings(data=tomllib.loads(text), require_secrets=False)


@pytest.fixture(
    params=[
        "nothing listening",
        pytest.param("hung", marks=pytest.mark.redis),  # a redis-server stopped (SIGSTOP)
    ]
)
def down(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(a Redis URL with a password that does not answer, its host:port)."""
    if request.param == "nothing listening":
        address = f"127.0.0.1:{free_port()}"
    else:
        url, proc = request.getfixturevalue("private_redis")
        address = url.removeprefix("redis://").removesuffix("/0")
        proc.send_signal(signal.SIGSTOP)
    return f"redis://:hunter2@{address}/0", address


def named(exc: FleetUnavailable, address: str) -> None:
    assert isinstance(exc, RelevoError)
    assert f"the fleet's Redis at redis://:***@{address}/0 did not answer" in str(exc)
    assert "hunter2" not in str(exc)


async def test_every_producer_call_raises_fleet_unavailable_promptly(
    down: tuple[str, str],
) -> None:
    """Without the translation: kombu's OperationalError after 6 s of retries (or never,
    with Redis hung), and redis-py's ConnectionError from the handle."""
    url, address = down
    async with Producer.from_settings(settings_on(url)) as producer:
        started = time.monotonic()
        with pytest.raises(FleetUnavailable) as sent:
            await producer.enqueue(TURN)
        assert time.monotonic() - started < SEND_S
        named(sent.value, address)
        handle = producer.turn("some-turn")
        reads: dict[str, Callable[[], Awaitable[Any]]] = {
            "peek": handle.peek,
            "running": handle.running,
            "result": lambda: handle.result(timeout_s=60),
            "stream": lambda: anext(handle.stream(timeout_s=60)),
            "events": lambda: anext(handle.events(timeout_s=60)),
        }
        for what, read in reads.items():
            started = time.monotonic()
            with pytest.raises(FleetUnavailable) as failed:
                await read()
            assert time.monotonic() - started < SEND_S, what
            # The turn store's client names no password.
            assert f"the fleet's Redis at redis://{address}/0 did not answer" in str(failed.value)


def test_enqueue_turn_and_get_raise_fleet_unavailable_promptly(down: tuple[str, str]) -> None:
    """Without the translation: kombu's OperationalError after 6 s, and Celery's result
    store a RuntimeError after about 20 s of reconnects."""
    url, address = down
    app = make_app(settings_on(url))
    try:
        started = time.monotonic()
        with pytest.raises(FleetUnavailable) as sent:
            enqueue_turn(TURN, app=app)
        assert time.monotonic() - started < SEND_S
        named(sent.value, address)
        started = time.monotonic()
        with pytest.raises(FleetUnavailable) as waited:
            TurnHandle("some-turn", AsyncResult("some-turn", app=app)).get(timeout_s=60)
        assert time.monotonic() - started < WAIT_S
        named(waited.value, address)
    finally:
        app.close()


async def test_a_negative_timeout_is_refused_naming_it(redis_url: str) -> None:
    settings = settings_on(redis_url)
    async with Producer.from_settings(settings) as producer:
        handle = producer.turn("some-turn")
        with pytest.raises(ValueError, match=r"^timeout_s: "):
            await handle.result(timeout_s=-1)
        with pytest.raises(ValueError, match=r"^timeout_s: "):
            await anext(handle.stream(timeout_s=-0.5))
        with pytest.raises(ValueError, match=r"^timeout_s: "):
            await anext(handle.events(timeout_s=float("nan")))
    app = make_app(settings)
    with pytest.raises(ValueError, match=r"^timeout_s: "):
        TurnHandle("some-turn", AsyncResult("some-turn", app=app)).get(timeout_s=-1)
    app.close()


@pytest.mark.parametrize("failing", ["shared", "fleet"])
def test_an_operator_error_names_the_redis_that_failed(redis_url: str, failing: str) -> None:
    """With the shared state on a store of its own, the message names that store when it
    fails (and the fleet's when that one does), whichever client the error comes through.
    Without it, every failure named the fleet's Redis (`url`)."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    where = RedisSettings(
        url=dead if failing == "fleet" else redis_url,
        shared_url=dead if failing == "shared" else redis_url,
    )

    async def run() -> None:
        # As `relevo replay-held` opens them: the shared state's client, then the fleet's.
        async with operator_redis(where, shared=True) as shared, operator_redis(where) as fleet:
            await (shared if failing == "shared" else fleet).ping()

    with pytest.raises(OperatorError) as raised:
        asyncio.run(run())
    message = str(raised.value)
    assert message.startswith(f"Redis at {dead} did not answer")
    setting = "RELEVO_REDIS__SHARED_URL" if failing == "shared" else "RELEVO_REDIS__URL"
    assert message.endswith(f"check --config or {setting}")


def test_relevo_kill_switch_names_the_shared_store_that_failed(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli.main import main

    dead = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("RELEVO_REDIS__URL", redis_url)
    monkeypatch.setenv("RELEVO_REDIS__SHARED_URL", dead)
    assert main(["kill-switch", "status"]) == 6
    err = capsys.readouterr().err
    assert err.startswith(f"relevo: Redis at {dead} did not answer")
    assert "RELEVO_REDIS__SHARED_URL" in err


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        (("maxmemory", "1"), "OOM: its memory is full (maxmemory)"),
        (("min-replicas-to-write", "1"), "NOREPLICAS: fewer replicas in sync than"),
    ],
    ids=["full", "no-replicas"],
)
def test_a_redis_that_refuses_writes_is_said_to_refuse_them(
    private_redis: tuple[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    setting: tuple[str, str],
    why: str,
) -> None:
    """A full Redis (noeviction) or one short of replicas answers every write with an
    error: the producer and the operator are told it refused the write, and why, not
    that it did not answer; the password stays out of both."""
    from worker.cli.main import main

    url, _ = private_redis
    admin = redis.Redis.from_url(url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set(*setting)
    admin.config_set("requirepass", "hunter2")
    admin.close()
    address = url.removeprefix("redis://").removesuffix("/0")
    secret_url = f"redis://:hunter2@{address}/0"
    app = make_app(settings_on(secret_url))
    try:
        with pytest.raises(FleetUnavailable) as sent:
            enqueue_turn(TURN, app=app)
    finally:
        app.close()
    refused = f"the fleet's Redis at redis://:***@{address}/0 refused the write ({why}"
    assert str(sent.value).startswith(refused), str(sent.value)
    monkeypatch.setenv("RELEVO_REDIS__URL", secret_url)
    assert main(["kill-switch", "on", "--reason", "INC-1", "--who", "alice"]) == 6
    err = capsys.readouterr().err
    assert f"Redis at redis://:***@{address}/0 refused the write ({why}" in err
    assert "hunter2" not in str(sent.value) + err


# -- a Redis blip while a turn is recorded ---------------------------------------------


@contextmanager
def killed_then_back(proc: subprocess.Popen[bytes], url: str, after_s: float) -> Iterator[None]:
    """The redis-server killed now, and a new, empty one on its port `after_s` later."""
    proc.kill()
    proc.wait(timeout=10)
    back: list[subprocess.Popen[bytes]] = []
    timer = threading.Timer(after_s, lambda: back.append(restart_empty(proc, url)))
    timer.start()
    try:
        yield
    finally:
        timer.join()
        for server in back:
            server.kill()
            server.wait(timeout=10)


@pytest.fixture
def producer_app(
    private_redis: tuple[str, subprocess.Popen[bytes]], namespace: str
) -> Iterator[Any]:
    """A producer's app on the private Redis, its broker connection already open."""
    url, _ = private_redis
    text = worker_config(sim="http://127.0.0.1:9", redis_url=url, namespace=namespace)
    app = celery_app(load_settings(data=tomllib.loads(text), require_secrets=False))
    # ignore_result: no subscription to a result channel outlives the server it was on.
    send_turn(app, turn(), ignore_result=True)
    try:
        yield app
    finally:
        app.close()


@pytest.mark.slow
def test_a_blip_shorter_than_the_publish_retry_policy_costs_the_enqueue_a_moment(
    private_redis: tuple[str, subprocess.Popen[bytes]], producer_app: Any, namespace: str
) -> None:
    """Redis restarted under the producer: the record's write is tried again as the publish
    is, and the turn lands recorded and published. Without it: FleetUnavailable at once."""
    url, proc = private_redis
    # Wider than the fleet's own (two quick tries more), so a loaded machine's restart fits.
    producer_app.conf.task_publish_retry_policy = {
        "max_retries": 30,
        "interval_start": 0.05,
        "interval_step": 0.05,
        "interval_max": 0.1,
    }
    with killed_then_back(proc, url, after_s=0.4):
        started = time.monotonic()
        sent = send_turn(producer_app, turn(), ignore_result=True)
        assert time.monotonic() - started >= 0.3  # it waited out the blip
        # A new, empty server, after the record's retries began: the record and the
        # message are both on it, written after the blip.
        client = redis.Redis.from_url(url)
        assert client.zscore(TurnKeys(namespace).sent, sent.id) is not None
        assert client.hexists(FairKeys(namespace).index(), sent.id)
        client.close()


@pytest.mark.slow
def test_an_outage_longer_than_the_publish_retry_policy_fails_naming_the_record(
    private_redis: tuple[str, subprocess.Popen[bytes]], producer_app: Any
) -> None:
    """As many tries as the publish gets (three: `task_publish_retry_policy`), then our own
    error, saying nothing was recorded: the turn will not run."""
    url, proc = private_redis
    proc.kill()
    proc.wait(timeout=10)
    started = time.monotonic()
    with pytest.raises(TurnNotSent) as failed:
        send_turn(producer_app, turn(), ignore_result=True)
    assert time.monotonic() - started < SEND_S
    assert re.fullmatch(
        re.escape(f"the fleet's Redis at {url} did not answer (ConnectionError) ")
        + r"recording the turn \(3 tries in \d+\.\d s; nothing was recorded: it will not run\)",
        str(failed.value),
    )
