"""`Producer`: async enqueueing, results and streams, on the real Redis and a real worker."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import threading
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from celery.signals import before_task_publish

from tests.chainkit import worker_config, write_worker_config
from tests.workerkit import celery_worker_process, stop
from worker.errors import InputError, RelevoError
from worker.fleet import AsyncTurnHandle, Producer, TurnHandle, TurnTimeout, UnknownTurn
from worker.fleet.turnstore import TurnStore
from worker.settings import LimitsSettings, Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim")


SECTIONS = "[retry]\nbase_delay_s = 0.01\n"


def write_fleet_config(path: Path, *, sim: str, redis_url: str) -> Path:
    """The two-model chain on a namespace (and queue) of its own."""
    namespace = f"relevo-test-{uuid.uuid4().hex[:12]}"
    return write_worker_config(
        path, sim=sim, redis_url=redis_url, namespace=namespace, sections=SECTIONS
    )


@contextmanager
def celery_worker(config: Path, *, threads: int) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery worker` process (threads pool) running `config`'s turns."""
    queue = load_settings(config, require_secrets=False).worker.queue
    name = f"producer-{queue}@%h"
    proc = celery_worker_process(config, queue=queue, name=name, threads=threads)
    try:
        yield proc
    finally:
        stop([proc])


def request(i: int = 0, **fields: object) -> TurnRequest:
    return TurnRequest.model_validate(
        {"tenant_id": "acme", "messages": [Message(role="user", content=f"question {i}")], **fields}
    )


@pytest.fixture(scope="module")
def fleet_config(sim: Simulator, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("producer") / "chain.toml"
    return write_fleet_config(path, sim=sim.url, redis_url=redis_url)


@pytest.fixture(scope="module")
def worker(fleet_config: Path) -> Iterator[subprocess.Popen[bytes]]:
    """One worker for the module: 200 threads, so 200 turns run at once."""
    with celery_worker(fleet_config, threads=200) as proc:
        yield proc


@pytest.fixture
async def producer(fleet_config: Path) -> AsyncIterator[Producer]:
    async with Producer.from_settings(load_settings(fleet_config, require_secrets=False)) as made:
        yield made


@pytest.fixture
def lone_settings(sim: Simulator, redis_url: str, namespace: str) -> Settings:
    """Settings whose queue no worker consumes: what is sent stays there."""
    text = worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace)
    return load_settings(data=tomllib.loads(text), require_secrets=False)


@pytest.fixture
async def lone(lone_settings: Settings) -> AsyncIterator[Producer]:
    async with Producer.from_settings(lone_settings) as made:
        yield made
        # What was sent stays queued: leave the shared Redis as it was.
        pattern = f"{{{lone_settings.redis.namespace}}}:*"
        await made.redis.delete(lone_settings.worker.queue)
        async for key in made.redis.scan_iter(match=pattern):
            await made.redis.delete(key)


async def test_validation_errors_raise_before_anything_is_sent(
    lone_settings: Settings, redis_url: str
) -> None:
    queue = lone_settings.worker.queue
    client = redis.Redis.from_url(redis_url)
    limits = LimitsSettings(max_messages=1)
    async with Producer.from_settings(lone_settings) as made:
        namespace = lone_settings.redis.namespace
        strict = Producer(made.app, made.redis, namespace=namespace, limits=limits)
        with pytest.raises(InputError, match=r"^messages: "):
            await strict.enqueue({"tenant_id": "acme", "messages": []})
        with pytest.raises(InputError, match=r"^tenant_id: "):
            await strict.enqueue({"messages": [{"role": "user", "content": "hi"}]})
        with pytest.raises(InputError, match=r"max_messages \(1\)"):
            await strict.enqueue(request(messages=[Message(role="user", content="a")] * 2))
        pending = f"{{{namespace}}}:fair:pending"  # fair dispatch: turns wait there first
        assert client.llen(queue) + client.zcard(pending) == 0
        # The same queue does receive a good turn: the count above measures something.
        await strict.enqueue(request())
        assert client.llen(queue) + client.zcard(pending) == 1
    client.delete(queue, *client.keys(f"{{{namespace}}}:fair:*"))
    client.close()


TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")


async def test_publishing_goes_through_send_task_in_the_callers_context(
    lone: Producer, lone_settings: Settings, redis_url: str
) -> None:
    """A `before_task_publish` handler (trace propagation) sees the turn and the caller's
    context variables, though the publish runs on another thread."""
    seen: dict[str, tuple[str, str]] = {}

    def publishing(headers: dict[str, Any], **_: Any) -> None:
        seen[headers["id"]] = (TRACE.get(), threading.current_thread().name)

    before_task_publish.connect(publishing, weak=False)
    try:
        TRACE.set("trace-123")
        handle = await lone.enqueue(request())
    finally:
        before_task_publish.disconnect(publishing)
    trace, thread = seen[handle.turn_id]
    assert trace == "trace-123"
    assert thread.startswith("relevo-publish")
    client = redis.Redis.from_url(redis_url)
    client.delete(lone_settings.worker.queue)
    client.close()


async def test_an_id_nobody_sent_is_an_unknown_turn_at_once(lone: Producer) -> None:
    """Every reader answers at once, not after its timeout: nothing knows the id."""
    handle = lone.turn("never-sent")
    readers: dict[str, Callable[[], Awaitable[object]]] = {
        "result": lambda: handle.result(timeout_s=60),
        "stream": lambda: anext(handle.stream(timeout_s=60)),
        "events": lambda: anext(handle.events(timeout_s=60)),
        # Celery's result backend, as `enqueue_turn`'s handle waits on it.
        "get": lambda: asyncio.to_thread(
            TurnHandle("never-sent", AsyncResult("never-sent", app=lone.app)).get, 60
        ),
    }
    for what, read in readers.items():
        started = time.monotonic()
        with pytest.raises(UnknownTurn, match="'never-sent'") as raised:
            await read()
        assert time.monotonic() - started < 0.5, what
        assert isinstance(raised.value, RelevoError)
        assert isinstance(raised.value, LookupError)
        assert raised.value.turn_id == "never-sent"


async def test_a_queued_turn_no_worker_takes_waits_out_its_timeout(lone: Producer) -> None:
    sent = await lone.enqueue(request())
    handle = lone.turn(sent.turn_id)  # as another process finds it
    started = time.monotonic()
    with pytest.raises(TurnTimeout, match=sent.turn_id) as raised:
        await handle.result(timeout_s=0.3)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert isinstance(raised.value, TimeoutError)
    with pytest.raises(TurnTimeout):
        _ = [text async for text in handle.stream(timeout_s=0.3)]
    waiting = TurnHandle(sent.turn_id, AsyncResult(sent.turn_id, app=lone.app))
    with pytest.raises(CeleryTimeout):
        await asyncio.to_thread(waiting.get, 0.3)
    assert time.monotonic() - started < 3.0


async def test_a_finished_turn_whose_result_expired_is_unknown(lone: Producer) -> None:
    """Saving the result drops the sent record; once the result expires too, nothing
    tells the turn from one never sent."""
    store = TurnStore(lone.redis, namespace=lone.store.keys.namespace, ttl_s=1)
    sent = await lone.enqueue(request())
    await store.save(finished(sent.turn_id))
    assert (await lone.turn(sent.turn_id).result(timeout_s=5)).status is Status.OK
    await asyncio.sleep(1.1)
    with pytest.raises(UnknownTurn):
        await lone.turn(sent.turn_id).result(timeout_s=5)


async def test_a_stream_waits_within_a_short_read_timeout(
    lone: Producer, lone_settings: Settings
) -> None:
    """On a client with the control path's read timeout (0.25 s), a wait for text is
    shorter than that: the stream times out as a turn, not as a Redis read."""
    client = lone_settings.redis.connect()
    quiet = await lone.enqueue(request())
    try:
        handle = Producer(lone.app, client, namespace=lone_settings.redis.namespace).turn(
            quiet.turn_id
        )
        with pytest.raises(TurnTimeout, match=quiet.turn_id):
            _ = [text async for text in handle.stream(timeout_s=0.8)]
    finally:
        await client.aclose()


async def test_a_handle_needs_a_well_formed_turn_id(lone: Producer) -> None:
    with pytest.raises(InputError, match=r"^turn_id: not a turn id"):
        lone.turn("../../etc/passwd")
    with pytest.raises(InputError, match=r"^turn_id: "):
        lone.turn("x" * 129)


def finished(turn_id: str) -> TurnResult:
    return TurnResult(turn_id=turn_id, tenant_id="acme", status=Status.OK, primary_model="m")


async def test_a_stream_ends_once_a_result_is_stored_whether_or_not_it_streamed(
    lone: Producer,
) -> None:
    store = TurnStore(lone.redis, namespace=lone.store.keys.namespace)
    silent = lone.turn((await lone.enqueue(request())).turn_id)  # queued, then answered
    reader = asyncio.create_task(_texts(silent))
    await asyncio.sleep(0.3)
    assert not reader.done()  # no text, no result: still waiting
    await store.save(finished(silent.turn_id))
    assert await asyncio.wait_for(reader, 2) == []
    # A stream cut short (the worker lost Redis before its end marker), then the result.
    cut = lone.turn(f"cut-{uuid.uuid4().hex}")
    await store.publish(cut.turn_id, "Hel")
    await store.publish(cut.turn_id, "lo")
    await store.save(finished(cut.turn_id))
    assert await asyncio.wait_for(_texts(cut), 2) == ["Hel", "lo"]
    # An ended stream ends at its marker, with or without a result.
    ended = lone.turn(f"ended-{uuid.uuid4().hex}")
    for text in ("a", "\n", "b\r\n"):
        await store.publish(ended.turn_id, text)
    await store.end_stream(ended.turn_id)
    assert await asyncio.wait_for(_texts(ended), 2) == ["a", "\n", "b\r\n"]


async def _texts(handle: AsyncTurnHandle) -> list[str]:
    return [text async for text in handle.stream(timeout_s=10)]


@pytest.mark.slow
async def test_many_waiters_hold_no_thread_each(
    producer: Producer, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    sim.set_faults("alpha", Fault(latency_s=1.0))
    handles = await asyncio.gather(*(producer.enqueue(request(i)) for i in range(200)))
    await handles[0].peek()  # the Redis client's first connection, before counting
    baseline = threading.active_count()
    peak = baseline
    waiting = [asyncio.create_task(handle.result(timeout_s=60)) for handle in handles]

    async def sample() -> None:
        nonlocal peak
        while not all(task.done() for task in waiting):
            peak = max(peak, threading.active_count())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    await asyncio.sleep(0.3)
    still_waiting = sum(not task.done() for task in waiting)
    results = await asyncio.gather(*waiting)
    await sampler
    assert still_waiting > 100, "the waiters did not wait at the same time"
    assert peak <= baseline, f"{peak - baseline} threads more while 200 callers waited"
    assert [r.turn_id for r in results] == [h.turn_id for h in handles]
    assert all(r.status is Status.OK for r in results)


@pytest.mark.slow
async def test_stream_yields_a_streaming_turns_text_in_order_then_ends(
    producer: Producer, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    sim.set_faults("alpha", Fault(tokens=12, token_interval_s=0.05))
    handle = await producer.enqueue(request(stream=True))
    texts: list[str] = []
    stored_at_first_text: TurnResult | None = None
    async for text in handle.stream(timeout_s=30):
        if not texts:
            stored_at_first_text = await handle.peek()
        texts.append(text)
    result = await handle.result(timeout_s=10)
    assert result.status is Status.OK
    assert result.reply is not None
    assert len(texts) > 1
    assert "".join(texts) == result.reply.text
    assert stored_at_first_text is None, "the text came only after the turn had ended"
    # Read again, by id, after the end: the whole stream from its start.
    assert [text async for text in producer.turn(handle.turn_id).stream(timeout_s=5)] == texts


@pytest.mark.slow
async def test_stream_of_a_turn_that_does_not_stream_ends_with_it(
    producer: Producer, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    sim.set_faults("alpha", Fault(latency_s=0.5))
    handle = await producer.enqueue(request())
    # By id, the reader cannot know the turn does not stream: it ends on the result.
    assert [text async for text in producer.turn(handle.turn_id).stream(timeout_s=30)] == []
    assert await handle.peek() is not None
    started = time.monotonic()
    assert [text async for text in handle.stream(timeout_s=5)] == []
    assert time.monotonic() - started < 1.0
