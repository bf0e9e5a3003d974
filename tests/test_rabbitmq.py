"""RabbitMQ as the broker: real `celery worker` processes run turns from a quorum queue, with
results, turn records and the fair queue in Redis.

The fleet tests use the machine's RabbitMQ (guest on 127.0.0.1:5672) with queues named
after each test's own namespace, deleted after; the broker restart uses a private node
(`tests.rabbitkit.PrivateRabbit`), so stopping it disturbs no one. Skipped locally when no
RabbitMQ can be had; never in CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amqp.exceptions import NotFound, PreconditionFailed
from celery import Celery
from kombu.connection import Connection
from redis.asyncio import Redis

from tests.chainkit import KEY, write_worker_config
from tests.conftest import skip_unless_ci
from tests.netkit import free_port
from tests.rabbitkit import PrivateRabbit, delete_queues, machine_url, private_rabbit_missing
from tests.workerkit import celery_worker_process, stop
from worker.cli.main import main
from worker.fleet import Producer
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn, send_turn
from worker.fleet.errors import FleetUnavailable
from worker.fleet.exporter import FleetCollector
from worker.fleet.fairqueue import FairQueue
from worker.fleet.heartbeat import read_heartbeats
from worker.fleet.rabbitmq import outbox_key
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.settings import FairnessSettings, Settings, load_settings
from worker.simulator import Simulator
from worker.types import Message, Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim")


RELEVO = [sys.executable, "-m", "worker.cli"]

SECTIONS = """
[retry]
base_delay_s = 0.01

[broker]
url = "{broker}"

[worker]
queue = "{namespace}"
visibility_timeout_s = {visibility_s}
restore_interval_s = 1
sweep_interval_s = 0.5
"""
# A turn record is re-sent once it is older than the visibility timeout and restore interval.
DUE_S = 7


@pytest.fixture(scope="module")
def amqp_url() -> str:
    url = machine_url()
    if url is None:
        skip_unless_ci("no RabbitMQ listening on 127.0.0.1:5672")
    assert url is not None
    return url


def rabbit_config(path: Path, *, broker: str, deadline_s: float = 5, **config: Any) -> Path:
    """The two-model chain on `broker` (`config`: `write_worker_config`'s `sim`, `redis_url`
    and `namespace`); the sweeper re-sends a turn lost for `DUE_S` (the default deadline)."""
    fill = {"broker": broker, "visibility_s": deadline_s + 1}
    return write_worker_config(path, sections=SECTIONS, deadline_s=deadline_s, fill=fill, **config)


class Fleet:
    """`celery worker` processes (threads pool) on one configuration; their logs in a file."""

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.env = env or {}
        self.settings = load_settings(config, require_secrets=False)
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, threads: int = 20) -> subprocess.Popen[bytes]:
        queue = self.settings.worker.queue
        with self.log.open("ab") as out:
            proc = celery_worker_process(
                self.config,
                queue=queue,
                name=f"{name}@%h",
                threads=threads,
                env=self.env,
                output=out,
            )
        self.procs.append(proc)
        return proc

    def wait_consuming(self, url: str, consumers: int, timeout_s: float = 60.0) -> None:
        """Until `consumers` consumers take from the fleet's queue (a worker started)."""
        until = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(NotFound), Connection(url) as connection:
                declared = connection.channel().queue_declare(
                    self.settings.worker.queue, passive=True
                )
                if declared.consumer_count >= consumers:
                    return
            assert time.monotonic() < until, f"{consumers} workers never consumed"
            assert all(p.poll() is None for p in self.procs), f"a worker exited: {self.log}"
            time.sleep(0.2)

    def stop(self) -> None:
        stop(self.procs, timeout_s=20)


@pytest.fixture(scope="module")
def rabbit_ns() -> str:
    return f"rmq_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def fleet(
    amqp_url: str,
    redis_url: str,
    sim: Simulator,
    rabbit_ns: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    """Two worker processes on the machine's RabbitMQ, fair dispatch on."""
    root = tmp_path_factory.mktemp("rabbit")
    config = rabbit_config(
        root / "chain.toml", sim=sim.url, redis_url=redis_url, broker=amqp_url, namespace=rabbit_ns
    )
    workers = Fleet(config, root / "workers.log")
    workers.start("a")
    workers.start("b")
    try:
        workers.wait_consuming(amqp_url, 2)
        yield workers
    finally:
        workers.stop()
        delete_queues(amqp_url, rabbit_ns)


@pytest.fixture
def own_config(
    amqp_url: str, redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> Iterator[Path]:
    """A configuration on the machine's RabbitMQ with this test's own queue, deleted after."""
    yield rabbit_config(
        tmp_path / "c.toml", sim=sim.url, redis_url=redis_url, broker=amqp_url, namespace=namespace
    )
    delete_queues(amqp_url, namespace)


def fifo(config: Path) -> Settings:
    """The configuration's settings with fair dispatch off: turns go straight to RabbitMQ."""
    settings = load_settings(config, require_secrets=False)
    return settings.model_copy(update={"fairness": FairnessSettings(enabled=False)})


def request(tenant: str = "acme", deadline_s: float = 5, **fields: object) -> TurnRequest:
    return TurnRequest.model_validate(
        {
            "tenant_id": tenant,
            "messages": [Message(role="user", content="Where is my order?")],
            "deadline_s": deadline_s,
            "max_tokens": 16,
            **fields,
        }
    )


def relevo(*args: str) -> int:
    return main(["--log-level", "warning", *args])


def test_the_fleets_queue_is_a_quorum_queue_and_publishes_are_confirmed(
    amqp_url: str, own_config: Path, namespace: str
) -> None:
    """The app's settings, and what RabbitMQ holds once a turn is sent."""
    app = make_app(fifo(own_config))
    (queue,) = app.conf.task_queues
    assert (queue.name, queue.queue_arguments) == (namespace, {"x-queue-type": "quorum"})
    assert queue.exchange.type == "topic"  # native delayed delivery binds only topic exchanges
    assert app.conf.broker_transport_options["confirm_publish"] is True
    assert app.conf.worker_detect_quorum_queues is True
    try:
        enqueue_turn(request(), app=app)
        with Connection(amqp_url) as connection:
            channel = connection.channel()
            _, ready, _ = channel.queue_declare(namespace, passive=True)
            assert ready == 1
            # A classic queue of the same name is refused: the one declared is a quorum queue.
            with pytest.raises(PreconditionFailed, match="x-queue-type"):
                channel.queue_declare(
                    namespace,
                    durable=True,
                    auto_delete=False,
                    arguments={"x-queue-type": "classic"},
                )
    finally:
        app.close()


def test_a_broker_that_does_not_answer_names_rabbitmq_without_its_password(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    url = f"amqp://guest:hunter2-not-here@127.0.0.1:{free_port()}//"
    config = rabbit_config(
        tmp_path / "c.toml", sim=sim.url, redis_url=redis_url, broker=url, namespace=namespace
    )
    app = make_app(load_settings(config, require_secrets=False))
    began = time.monotonic()
    with pytest.raises(FleetUnavailable) as failed:
        enqueue_turn(request(), app=app)
    assert time.monotonic() - began < 10
    assert "the fleet's RabbitMQ at amqp://guest:***@127.0.0.1:" in str(failed.value)
    assert "hunter2" not in str(failed.value)
    assert failed.value.rabbitmq
    assert not failed.value.refused


def test_a_redis_that_does_not_answer_is_named_not_the_broker(
    amqp_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    """RabbitMQ answers, the Redis that keeps the turn's record does not: the error says so."""
    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    config = rabbit_config(
        tmp_path / "c.toml", sim=sim.url, redis_url=redis_url, broker=amqp_url, namespace=namespace
    )
    app = make_app(load_settings(config, require_secrets=False))
    try:
        with pytest.raises(FleetUnavailable) as failed:
            enqueue_turn(request(), app=app)
    finally:
        app.close()
        delete_queues(amqp_url, namespace)
    assert str(failed.value).startswith(f"the fleet's Redis at {redis_url} did not answer")
    assert not failed.value.rabbitmq


def test_turns_of_several_tenants_run_once_each_through_worker_processes(
    fleet: Fleet, sim: Simulator
) -> None:
    app = make_app(fleet.settings)
    try:
        handles = [enqueue_turn(request(f"t{i % 3}"), app=app) for i in range(30)]
        results = [h.get(timeout_s=60) for h in handles]
    finally:
        app.close()
    assert {r.status for r in results} == {Status.OK}, (results[0].reason, results[0].error)
    assert sorted(r.turn_id for r in results) == sorted(h.turn_id for h in handles)
    assert sim.calls() == 30


def test_the_async_producer_streams_and_reads_results(fleet: Fleet, sim: Simulator) -> None:
    async def go() -> tuple[str, TurnResult, TurnResult]:
        async with Producer.from_settings(fleet.settings) as producer:
            streamed = await producer.enqueue(request(stream=True))
            plain = await producer.enqueue(request("beta"))
            text = "".join([chunk async for chunk in streamed.stream(timeout_s=30)])
            return text, await streamed.result(timeout_s=30), await plain.result(timeout_s=30)

    text, streamed, plain = asyncio.run(go())
    assert streamed.status is Status.OK
    assert text == streamed.reply.text
    assert plain.status is Status.OK
    assert sim.calls() == 2


def test_the_kill_switch_holds_turns_and_replay_held_answers_them(
    fleet: Fleet,
    sim: Simulator,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)  # replay-held runs the held turns itself
    config = str(fleet.config)
    assert relevo("kill-switch", "on", "--config", config, "--reason", "drill") == 0
    app = make_app(fleet.settings)
    try:
        handles = [enqueue_turn(request(), app=app) for _ in range(3)]
        assert {h.get(timeout_s=30).status for h in handles} == {Status.REJECTED}
    finally:
        app.close()
        assert relevo("kill-switch", "off", "--config", config) == 0
    capsys.readouterr()
    assert relevo("replay-held", "--config", config) == 0
    replayed = capsys.readouterr().out
    assert all(h.turn_id in replayed for h in handles)
    assert sim.calls() == 3


@pytest.mark.slow
def test_two_relevo_worker_nodes_on_one_machine_take_turns_under_their_own_names(
    own_config: Path, amqp_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """Celery's remote-control queue is exclusive on RabbitMQ and named after the node:
    with `--node-name` two nodes on one host name both run, answer `inspect ping`, and
    their heartbeats (what the console lists) carry their names."""
    nodes = Fleet(own_config, tmp_path / "nodes.log")
    env = {**os.environ, "RELEVO_TEST_KEY": KEY}
    with nodes.log.open("ab") as out:
        for name in ("left", "right"):
            args = ["--config", str(own_config), "--processes", "1", "--threads", "4"]
            nodes.procs.append(
                subprocess.Popen(
                    [*RELEVO, "worker", *args, "--metrics-port", "0", "--node-name", name],
                    env=env,
                    stdout=out,
                    stderr=out,
                )
            )
    app = make_app(nodes.settings)
    try:
        nodes.wait_consuming(amqp_url, 2)
        replies = app.control.ping(destination=["relevo-0@left", "relevo-0@right"], timeout=5)
        assert sorted(name for reply in replies for name in reply) == [
            "relevo-0@left",
            "relevo-0@right",
        ]
        handles = [enqueue_turn(request(), app=app) for _ in range(4)]
        assert {h.get(timeout_s=30).status for h in handles} == {Status.OK}
        assert all(proc.poll() is None for proc in nodes.procs), nodes.log.read_text()[-2000:]
        assert heartbeat_hosts(redis_url, namespace) == {"left", "right"}
    finally:
        app.close()
        nodes.stop()


def heartbeat_hosts(redis_url: str, namespace: str) -> set[str]:
    async def read() -> set[str]:
        client = Redis.from_url(redis_url)
        try:
            return {b.host for b in (await read_heartbeats(client, TurnKeys(namespace))).beats}
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_the_exporter_reads_the_queue_depth_from_rabbitmq(own_config: Path, namespace: str) -> None:
    """Turns sent to a queue no worker consumes: the gauge counts them on the broker."""
    settings = fifo(own_config)
    app = make_app(settings)
    try:
        for _ in range(3):
            enqueue_turn(request(), app=app)
        depth = {
            tuple(s.labels.values()): s.value
            for family in FleetCollector(settings).collect()
            if family.name == "relevo_queue_depth"
            for s in family.samples
        }
        assert depth == {(namespace,): 3}
    finally:
        app.close()


def test_a_turn_lost_between_the_outbox_and_rabbitmq_is_resent_by_the_sweeper(
    own_config: Path, redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    """A dispatcher that took a turn from the outbox and died before publishing it: the
    turn's record is still there, and a worker's sweeper sends it again."""
    fleet = Fleet(own_config, tmp_path / "workers.log")
    app = make_app(fleet.settings)
    try:
        handle = enqueue_turn(request(), app=app)

        async def lose() -> bytes | None:
            client = Redis.from_url(redis_url)
            try:
                outbox = outbox_key(namespace)
                fair = FairQueue(client, namespace=namespace, queue=outbox)
                await fair.dispatch(most=10, depth=10)
                return await client.rpop(outbox)  # type: ignore[no-any-return]
            finally:
                await client.aclose()

        message = asyncio.run(lose())
        assert message is not None
        assert handle.turn_id.encode() in message  # the lost turn's message
        fleet.start("sweeper")
        assert fleet.settings.broker.url is not None
        fleet.wait_consuming(fleet.settings.broker.url, 1)
        result = handle.get(timeout_s=DUE_S + 30)
        assert (result.status, result.turn_id) == (Status.OK, handle.turn_id)
        assert sim.calls() == 1
    finally:
        app.close()
        fleet.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_broker_restart_mid_run_loses_no_turn_and_answers_each_once(
    redis_url: str, sim: Simulator, tmp_path: Path, namespace: str
) -> None:
    """1,000 turns, half through the fair queue and half straight to the broker, while a
    private RabbitMQ node stops and starts again: every turn is stored, answered, and the
    provider was called once per turn."""
    missing = private_rabbit_missing()
    if missing is not None:
        skip_unless_ci(missing)
    turns = 1000
    with PrivateRabbit() as rabbit:
        config = rabbit_config(
            tmp_path / "c.toml",
            sim=sim.url,
            redis_url=redis_url,
            broker=rabbit.url,
            namespace=namespace,
            # Turns wait out the restart: none ends at its deadline, the sweeper re-sends none.
            deadline_s=120,
        )
        # A busy machine's Redis answering past the default 0.25 s is not what this tests.
        fleet = Fleet(config, tmp_path / "workers.log", env={"RELEVO_REDIS__TIMEOUT_S": "2"})
        senders = Senders([make_app(fleet.settings), make_app(fifo(config))], lanes=4)
        try:
            fleet.start("a", threads=50)
            fleet.start("b", threads=50)
            fleet.wait_consuming(rabbit.url, 2)
            ids = [uuid.uuid4().hex for _ in range(turns)]
            senders.pause_at(turns // 3)
            restart = threading.Thread(target=restart_when_paused, args=(rabbit, senders))
            restart.start()
            senders.send(ids)
            restart.join()
            results = wait_results(fleet.settings, ids, timeout_s=120)
        finally:
            senders.close()
            fleet.stop()
    assert not senders.errors, senders.errors[:3]
    assert senders.refused > 0, "the restart came after every turn was sent"
    assert len(results) == turns, f"{turns - len(results)} turns lost"
    reasons = {(r.status, r.reason) for r in results.values()}
    assert reasons == {(Status.OK, None)}
    # Each turn answered once: every provider call is one of a stored result's attempts
    # (a second run's calls would be in no result), and no turn waited for the sweeper.
    called = sum(1 for r in results.values() for a in r.attempts if a.outcome != "skipped")
    assert sim.calls() == called
    assert "turn.resent" not in (tmp_path / "workers.log").read_text()


def restart_when_paused(rabbit: PrivateRabbit, senders: Senders) -> None:
    """Stop the broker once the senders reach their pause, let them go on against the stopped
    broker, and start it again a second later. Without the pause a fast machine sent every
    turn before `rabbitmqctl stop_app` had taken effect."""
    senders.paused.wait(timeout=60)
    try:
        rabbit.stop_app()
        senders.resume()
        time.sleep(1)
    finally:
        senders.resume()
        rabbit.start_app()


class Senders:
    """Sends turns on a few threads, each turn again after `FleetUnavailable` (the same
    turn id is safe to send twice), alternating between the apps."""

    def __init__(self, apps: list[Celery], *, lanes: int) -> None:
        self.apps = apps
        self.lanes = lanes
        self.sent = 0
        self.refused = 0
        self.errors: list[str] = []
        self.paused = threading.Event()
        self._pause_at: int | None = None
        self._go_on = threading.Event()
        self._lock = threading.Lock()

    def pause_at(self, sent: int) -> None:
        """Hold every lane once `sent` turns are sent, until `resume`."""
        self._pause_at = sent

    def resume(self) -> None:
        self._go_on.set()

    def send(self, ids: list[str]) -> None:
        threads = [
            threading.Thread(target=self._lane, args=(ids[lane :: self.lanes], lane))
            for lane in range(self.lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _lane(self, ids: list[str], lane: int) -> None:
        for at, turn_id in enumerate(ids):
            if self._pause_at is not None and self.sent >= self._pause_at:
                self.paused.set()
                self._go_on.wait(timeout=60)
            turn = request(f"t{at % 5}", deadline_s=120, turn_id=turn_id)
            app = self.apps[(at + lane) % len(self.apps)]
            until = time.monotonic() + 90
            while True:
                try:
                    send_turn(app, turn, ignore_result=True)
                    break
                except FleetUnavailable as exc:
                    with self._lock:
                        self.refused += 1
                    if time.monotonic() > until:
                        self.errors.append(str(exc))
                        return
                    time.sleep(0.2)
            with self._lock:
                self.sent += 1

    def close(self) -> None:
        for app in self.apps:
            app.close()


def wait_results(settings: Settings, ids: list[str], timeout_s: float) -> dict[str, TurnResult]:
    async def go() -> dict[str, TurnResult]:
        client = settings.redis.connect(timeout_s=5.0)
        store = TurnStore(client, namespace=settings.redis.namespace)
        found: dict[str, TurnResult] = {}
        until = time.monotonic() + timeout_s
        try:
            while len(found) < len(ids) and time.monotonic() < until:
                missing = [i for i in ids if i not in found]
                for at in range(0, len(missing), 200):
                    chunk = missing[at : at + 200]
                    got = await asyncio.gather(*(store.result(i) for i in chunk))
                    found.update({i: r for i, r in zip(chunk, got, strict=True) if r is not None})
                if len(found) < len(ids):
                    await asyncio.sleep(0.5)
        finally:
            await client.aclose()
        return found

    return asyncio.run(go())
