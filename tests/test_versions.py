"""Two releases on one Redis: what a newer one adds is read past, what it changes is unreadable.

For each kind of stored or queued item, on the real Redis: an item with fields this
release does not know reads as if they were not there; an item of a higher schema
version, corrupt JSON or bytes that are not UTF-8 is reported unreadable, that one item
only, and never with its content. What relevo 0.1.0 reads strictly stays of its shape.
Turns given to relevo (intake) are still checked strictly.
"""

from __future__ import annotations

import json
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.signals import before_task_publish
from pydantic import BaseModel, ValidationError
from redis.asyncio import Redis

import breakers
import budgets
from breakers.keys import Keys
from budgets.keys import BudgetKeys
from tests.chainkit import KEY, worker_config
from tests.test_cli_surface import redis_only, relevo
from worker.console.stored import read_result as console_read
from worker.errors import InputError, RelevoError
from worker.fleet import AsyncTurnHandle, TurnHandle, TurnStore, enqueue_turn
from worker.fleet.app import make_app
from worker.fleet.audit import AuditTrail, cli_actor
from worker.fleet.errors import Unreadable
from worker.fleet.heartbeat import Heartbeat, beat, read_heartbeats
from worker.fleet.runner import TurnRunner
from worker.fleet.streams import StreamReader
from worker.fleet.sweeper import Sweeper
from worker.fleet.turnstore import TurnKeys
from worker.observability.metrics import UNREADABLE_TOTAL
from worker.settings import Settings, load_settings
from worker.simulator import Simulator
from worker.turn.intake import checked_turn
from worker.types import (
    Attempt,
    AttemptOutcome,
    Reply,
    Status,
    TurnRequest,
    TurnResult,
    Usage,
    parse_turn_request,
)

SECRET = "sk-live-do-not-echo-0123456789"
ADDED = {"added_by_a_newer_release": {"nested": [1, 2]}}
TURN = {"tenant_id": "acme", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = breakers.connect(redis_url, timeout_s=2.0)
    yield client
    await client.aclose()


@pytest.fixture
def chain_file(
    sim: Simulator, redis_url: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The two-model chain on the simulator, under the test's namespace, with its key."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    path = tmp_path / "chain.toml"
    path.write_text(worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace))
    return path


@pytest.fixture
def settings(chain_file: Path) -> Settings:
    return load_settings(chain_file)


@pytest.fixture(scope="module")
def app(sim: Simulator, redis_url: str) -> Iterator[Celery]:
    """The fleet's app, on a namespace of the module's."""
    namespace = f"relevo-test-{uuid.uuid4().hex[:12]}"
    text = worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace)
    made = make_app(load_settings(data=tomllib.loads(text), require_secrets=False))
    yield made
    made.backend.result_consumer.stop()  # the connection blocking handles wait on
    made.close()


def blocking_get(app: Celery, turn_id: str) -> TurnResult:
    """`TurnHandle.get` of the turn, its wait given up at once after (an AsyncResult
    collected later would unsubscribe on a connection of its own, never closed)."""
    waited = app.AsyncResult(turn_id)
    try:
        return TurnHandle(turn_id, waited).get(timeout_s=5)
    finally:
        app.backend.remove_pending_result(waited)


def result(turn_id: str) -> TurnResult:
    attempt = Attempt(
        model="m", provider="p", provider_model="m-1", outcome=AttemptOutcome.OK, latency_ms=5
    )
    return TurnResult(
        turn_id=turn_id,
        tenant_id="acme",
        status=Status.OK,
        primary_model="m",
        step=0,
        attempts=(attempt,),
        reply=Reply(text=f"the answer, {SECRET}"),
        usage=Usage(input_tokens=3, output_tokens=2),
    )


def with_added_fields(turn_id: str) -> bytes:
    """`result(turn_id)` as a newer release would write it: fields added at every level."""
    data = result(turn_id).model_dump(mode="json") | ADDED
    data["attempts"][0] |= ADDED
    data["usage"] |= ADDED
    data["reply"] |= ADDED
    return json.dumps(data).encode()


# name -> (the stored bytes, whether a newer release wrote them)
UNREADABLE: dict[str, tuple[bytes, bool]] = {
    "newer": (
        json.dumps(result("x").model_dump(mode="json") | {"schema_version": 2}).encode(),
        True,
    ),
    "corrupt JSON": (f'{{"turn_id": "x", "reply": "{SECRET}'.encode(), False),
    "not UTF-8": (b'{"turn_id": "x", "tenant_id": "\xff\xfe"}', False),
    "of another shape": (json.dumps({"turn_id": "x", "status": SECRET}).encode(), False),
    "a version that is no number": (json.dumps({"schema_version": "two"}).encode(), False),
}


async def store_result(redis: Redis, store: TurnStore, turn_id: str, raw: bytes) -> None:
    await redis.set(store.keys.result(turn_id), raw, ex=60)
    await redis.zadd(store.keys.recent, {turn_id: int(time.time() * 1000)})


async def test_a_result_with_fields_a_newer_release_added_reads_everywhere(
    redis: Redis, namespace: str
) -> None:
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    await store_result(redis, store, "t-added", with_added_fields("t-added"))
    expected = result("t-added")
    assert await store.result("t-added") == expected
    assert await store.claim("t-added", "w1", 5) == expected
    assert await store.recent(0) == [expected]
    assert await AsyncTurnHandle("t-added", store).result(timeout_s=1) == expected
    assert (await console_read(redis, store.keys, "t-added")).result == expected


@pytest.mark.parametrize("case", UNREADABLE, ids=list(UNREADABLE))
async def test_a_result_this_release_cannot_read_raises_unreadable_naming_the_turn(
    case: str, redis: Redis, namespace: str
) -> None:
    raw, newer = UNREADABLE[case]
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    await store_result(redis, store, "t-bad", raw)
    await store_result(redis, store, "t-good", result("t-good").model_dump_json().encode())
    with pytest.raises(Unreadable) as caught:
        await AsyncTurnHandle("t-bad", store).result(timeout_s=1)
    error = caught.value
    assert isinstance(error, RelevoError)
    assert (error.turn_id, error.what, error.newer) == ("t-bad", "result", newer)
    assert "turn 't-bad': its result cannot be read by this release" in str(error)
    assert SECRET not in str(error)
    assert "\\x" not in str(error)  # nor a byte of it
    with pytest.raises(Unreadable):
        await store.claim("t-bad", "w1", 5)
    # The one item only: the other turn of the window still reads.
    assert await store.recent(0) == [result("t-good")]
    assert (await console_read(redis, store.keys, "t-bad")).unreadable == error.why


def test_the_blocking_handle_reads_through_celery_s_backend(app: Celery, redis_url: str) -> None:
    import redis as sync_redis

    keys = TurnKeys(app.conf.relevo_namespace)
    with sync_redis.Redis.from_url(redis_url) as client:
        client.set(keys.result("t-added"), with_added_fields("t-added"), ex=60)
        client.set(keys.result("t-newer"), UNREADABLE["newer"][0], ex=60)
        client.set(keys.result("t-corrupt"), UNREADABLE["corrupt JSON"][0], ex=60)
    assert blocking_get(app, "t-added") == result("t-added")
    for turn_id, newer in (("t-newer", True), ("t-corrupt", False)):
        with pytest.raises(Unreadable) as caught:
            blocking_get(app, turn_id)
        assert (caught.value.turn_id, caught.value.newer) == (turn_id, newer)
        assert SECRET not in str(caught.value)


@pytest.fixture
def runner(settings: Settings) -> Iterator[TurnRunner]:
    made = TurnRunner(settings)
    yield made
    made.close()


def test_a_worker_ignores_a_field_it_does_not_know_and_answers_a_newer_turn_unreadable(
    runner: TurnRunner, sim: Simulator, redis_url: str
) -> None:
    sim.reset()
    added = {**TURN, "turn_id": "t-added", **ADDED}
    assert runner.answer(added, version=1, task_id="t-added")["status"] == "ok"
    assert sim.calls() == 1

    newer = {**TURN, "turn_id": "t-newer"}
    answer = runner.answer(newer, version=2, task_id="t-newer")
    assert (answer["status"], answer["reason"]) == ("failed", "unreadable")
    assert "a newer release wrote it (schema version 2" in answer["error"]
    assert sim.calls() == 1  # not run
    stored = runner.loop.run(runner.store.result("t-newer"), timeout_s=5)
    assert stored is not None
    assert stored.reason == "unreadable"  # its sender reads why
    damaged = runner.answer({**TURN, "turn_id": "t-v"}, version="two", task_id="t-v")
    assert damaged["reason"] == "unreadable"
    metric = runner.metrics.registry.get_sample_value
    assert metric(UNREADABLE_TOTAL, {"what": "request", "cause": "newer"}) == 1
    assert metric(UNREADABLE_TOTAL, {"what": "request", "cause": "damaged"}) == 1


def test_intake_still_refuses_a_field_it_does_not_know_naming_it(
    settings: Settings, app: Celery, chain_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    field = "added_by_a_newer_release"
    payload = {**TURN, **ADDED}
    for refuse in (
        lambda: parse_turn_request(payload),
        lambda: checked_turn(json.dumps(payload), settings.limits),
        lambda: enqueue_turn(payload, app=app),
    ):
        with pytest.raises(InputError, match=f"{field}: Extra inputs are not permitted"):
            refuse()
    with pytest.raises(ValidationError, match=field):
        TurnRequest.model_validate(payload)  # what `Chain.run` is given is built strictly
    given = chain_file.with_name("turn.json")
    given.write_text(json.dumps(payload))
    for command in ("turn", "enqueue"):
        assert relevo(command, "--config", str(chain_file), "--input", str(given)) == 2
        assert f"{field}: Extra inputs are not permitted" in capsys.readouterr().err


async def test_the_sweeper_resends_what_it_reads_leaves_a_newer_record_and_drops_a_damaged_one(
    redis: Redis, namespace: str
) -> None:
    store = TurnStore(redis, namespace=namespace, ttl_s=600)
    records = {
        "t-added": json.dumps({**TURN, "turn_id": "t-added", **ADDED}),
        "t-newer": json.dumps({**TURN, "turn_id": "t-newer", "schema_version": 2}),
        "t-damaged": '{"turn_id": "t-damaged", ',
        "t-tagged": json.dumps(
            {**TURN, "messages": [{"role": "user", "content": [{"type": SECRET, "text": "x"}]}]}
        ),
    }
    long_ago = int(time.time() * 1000) - 60_000
    await redis.zadd(store.keys.sent, dict.fromkeys(records, long_ago))
    await redis.hset(store.keys.payloads, mapping=records)
    sent: list[TurnRequest] = []
    unread: list[Unreadable] = []
    sweeper = Sweeper(
        store, sent.append, holder="h", interval_s=1, older_than_s=0, on_unreadable=unread.append
    )
    assert await sweeper.sweep_once() == 1
    assert [t.turn_id for t in sent] == ["t-added"]
    assert sorted((e.turn_id, e.newer) for e in unread) == [
        ("t-damaged", False),
        ("t-newer", True),
        ("t-tagged", False),
    ]
    assert not [e for e in unread if SECRET in str(e)]  # a tag it was given is not quoted
    left = {t.decode() for t in await redis.hkeys(store.keys.payloads)}
    assert left == {"t-added", "t-newer"}  # re-sent (recorded again), and left for its release

    # The next rounds leave the newer record to its release without reporting it again.
    await redis.delete(store.keys.sweep)  # the round's lock
    unread.clear()
    assert await sweeper.sweep_once() == 1  # t-added again: this test's `send` records nothing
    assert unread == []


async def test_a_stream_reads_past_fields_it_does_not_know_and_says_what_it_cannot_read(
    redis: Redis, namespace: str
) -> None:
    store = TurnStore(redis, namespace=namespace, ttl_s=60)
    await store.start_stream("t-s", "h")
    key = store.keys.chunks("t-s")
    (_, marker), *_ = await redis.xrange(key)
    assert marker[b"schema_version"] == b"1"
    for fields in ({"text": "Hel", "added": "x"}, {"text": b"\xff\xfe"}, {"text": "lo"}):
        await redis.xadd(key, fields)
    await redis.xadd(key, {"end": "1"})
    text = AsyncTurnHandle("t-s", store, streaming=True).stream(timeout_s=2)
    assert await anext(text) == "Hel"  # what came before it
    with pytest.raises(Unreadable, match=r"turn 't-s': its stream cannot be read .* not UTF-8"):
        await anext(text)

    # A run a newer release streams: none of its text is handed out as this release's.
    newer = store.keys.chunks("t-n")
    await redis.xadd(newer, {"run": "h2", "text": "", "schema_version": "2"})
    await redis.xadd(newer, {"text": "in a new form"})
    await redis.xadd(newer, {"end": "1"})
    events = await StreamReader(redis, newer).drain()
    assert [(e.text, e.problem is not None and e.problem.newer) for e in events] == [("", True)]
    with pytest.raises(Unreadable, match="a newer release wrote it"):
        await AsyncTurnHandle("t-n", store, streaming=True).stream(timeout_s=2).__anext__()


# name -> (a stream entry's fields, whether it reads, whether a newer release wrote it)
ENTRIES: dict[str, tuple[dict[str, Any], bool, bool]] = {
    "added fields": ({"added_by_a_newer_release": "x"}, True, False),
    "newer": ({"schema_version": "2"}, False, True),
    "not UTF-8": ({"payload": b"\xff\xfe"}, False, False),
}


async def test_held_turns_and_hand_offs_say_their_version_and_what_cannot_be_read(
    redis: Redis, namespace: str
) -> None:
    held = breakers.HeldTurns(redis, namespace=namespace)
    handoffs = budgets.Handoffs(redis, namespace=namespace)
    await held.hold("t-0", json.dumps(TURN))
    await handoffs.push("acme", "t-0", "budget", json.dumps(TURN))
    keys = (Keys(namespace).held, BudgetKeys(namespace).handoffs())
    for i, (fields, _, _) in enumerate(ENTRIES.values(), 1):
        entry = {"tenant": "acme", "turn_id": f"t-{i}", "reason": "budget", "payload": "{}"}
        for key in keys:
            await redis.xadd(key, {**entry, **fields})
    for key in keys:
        (_, written), *_ = await redis.xrange(key, count=1)
        assert written[b"schema_version"] == b"1"

    turns = {h.turn_id: h for h in await held.held()}
    listed = {h.turn_id: h for h in await handoffs.list()}
    assert turns["t-0"].problem is listed["t-0"].problem is None
    for i, (case, (_, reads, newer)) in enumerate(ENTRIES.items(), 1):
        for item in (turns[f"t-{i}"], listed[f"t-{i}"]):
            assert (item.problem is None) is reads, case
            assert reads or (item.problem is not None and item.problem.newer is newer), case
    assert turns["t-2"].version == 2  # held again, it keeps its own


def test_replay_runs_what_it_reads_and_holds_a_newer_release_s_turns_again(
    chain_file: Path, sim: Simulator, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import redis as sync_redis

    sim.reset()
    key = Keys(load_settings(chain_file).redis.namespace).held
    with sync_redis.Redis.from_url(redis_url) as client:
        added = json.dumps({**TURN, "turn_id": "t-added", **ADDED})
        client.xadd(key, {"turn_id": "t-added", "payload": added, "schema_version": 1, "x": 1})
        newer = json.dumps({**TURN, "turn_id": "t-newer"})
        client.xadd(key, {"turn_id": "t-newer", "payload": newer, "schema_version": 2})
        client.xadd(key, {"turn_id": "t-damaged", "payload": b"{\xff}"})
        # Written here, not sent: no turn store knows them.
        assert relevo("replay-held", "--config", str(chain_file), "--include-expired") == 9
        left = client.xrange(key)
    out, err = capsys.readouterr()
    lines = {line["turn_id"]: line for line in map(json.loads, out.splitlines())}
    assert {t: line["status"] for t, line in lines.items()} == {
        "t-added": "ok",
        "t-newer": "left_held",
        "t-damaged": "invalid",
    }
    assert "1 held turn(s) were held by a newer release" in err
    assert [(f[b"turn_id"], f[b"schema_version"]) for _, f in left] == [(b"t-newer", b"2")]
    assert sim.calls() == 1


async def test_heartbeats_and_audit_entries_say_their_version_and_what_cannot_be_read(
    redis: Redis, namespace: str
) -> None:
    keys = TurnKeys(namespace)
    now = Heartbeat(
        host="h", pid=1, version="0.2.0", in_flight=0, local_breakers=False, started_ms=1
    )
    await beat(redis, keys, now)
    assert json.loads(await redis.get(keys.worker("h:1")))["schema_version"] == 1
    seen = int(time.time() * 1000)
    written = now.model_dump(mode="json") | {"seen_ms": seen}
    for pid, raw in (
        (2, json.dumps(written | {"pid": 2, **ADDED})),
        (3, json.dumps(written | {"pid": 3, "schema_version": 2})),
        (4, b"{\xff"),
    ):
        await redis.set(keys.worker(f"h:{pid}"), raw, ex=60)
        await redis.zadd(keys.workers, {f"h:{pid}": seen})
    read = await read_heartbeats(redis, keys)
    assert [b.pid for b in read.beats] == [1, 2]
    assert read.unreadable == ["h:3", "h:4"]

    trail = AuditTrail(redis, namespace=namespace)
    await trail.record(cli_actor("ann"), "kill_switch", "fleet", "drill", "done")
    for fields, _, _ in ENTRIES.values():
        await redis.xadd(trail.key, {"who": "bob", "action": "breaker", **fields})
    (*cases, first) = await trail.latest()
    assert (first.who, first.problem) == ("ann", None)
    assert (await redis.xrange(trail.key, count=1))[0][1][b"schema_version"] == b"1"
    problems = [e.problem for e in reversed(cases)]
    assert problems[0] is None
    assert cases[-1].who == "bob"
    assert [p is not None and p.newer for p in problems[1:]] == [True, False]


def test_relevo_result_and_tail_say_what_they_cannot_read(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import redis as sync_redis

    config = str(redis_only(tmp_path / "redis.toml", redis_url, namespace))
    keys = TurnKeys(namespace)
    with sync_redis.Redis.from_url(redis_url) as client:
        client.set(keys.result("t-added"), with_added_fields("t-added"), ex=60)
        client.set(keys.result("t-newer"), UNREADABLE["newer"][0], ex=60)
        for fields in (
            {"run": "h", "text": ""},
            {"text": "Hel"},
            {"text": b"\xff"},
            {"text": "lo"},
        ):
            client.xadd(keys.chunks("t-newer"), fields)
        client.xadd(keys.chunks("t-newer"), {"end": "1"})
    assert relevo("result", "t-added", "--config", config) == 0
    printed = json.loads(capsys.readouterr().out)
    assert TurnResult.model_validate(printed) == result("t-added")  # without the added fields

    assert relevo("result", "t-newer", "--config", config) == 9
    out, err = capsys.readouterr()
    assert out == ""
    assert "turn 't-newer': its result cannot be read by this release: a newer release" in err
    assert relevo("tail", "t-newer", "--config", config, "--idle-timeout", "2") == 9
    out, err = capsys.readouterr()
    assert out == "Hel\ufffdlo\n"
    assert (
        "could not read a piece of turn 't-newer''s text: a piece of its text is not UTF-8" in err
    )


def test_what_relevo_0_1_0_reads_strictly_keeps_its_shape(app: Celery) -> None:
    """0.1.0 refuses any field it does not know in a turn, a result or a sent record: a
    field added since is written only when set, and set only once `[worker]
    oldest_release` says no 0.1.0 process is left; the version stays outside."""
    for model in _strict_models():
        known = set(SHAPE_0_1_0[model.__name__].split())
        added = set(model.model_fields) - known
        assert added == WRITTEN_WHEN_SET.get(model.__name__, set()), model.__name__
        assert known <= set(model.model_fields), model.__name__
        for name in added:
            info = model.model_fields[name]
            default = info.get_default(call_default_factory=True)
            assert info.exclude_if is not None, f"{model.__name__}.{name}"
            assert info.exclude_if(default), f"{model.__name__}.{name} is written unset"
    sent: list[tuple[dict[str, Any], Any]] = []

    def capture(headers: dict[str, Any], body: Any, **_: Any) -> None:
        sent.append((headers, body))

    before_task_publish.connect(capture)
    try:
        enqueue_turn({**TURN, "turn_id": "t-sent"}, app=app)
    finally:
        before_task_publish.disconnect(capture)
    ((headers, (args, _, _)),) = sent
    assert headers["relevo_schema_version"] == 1
    assert set(args[0]) <= set(SHAPE_0_1_0["TurnRequest"].split())
    TurnRequest.model_validate(args[0])


# The fields added since 0.1.0 to what it reads strictly: each is left out of what is
# written while it has its default (`exclude_if`).
WRITTEN_WHEN_SET: dict[str, set[str]] = {
    "Attempt": {"left_out"},
    "Message": {"is_error"},
    "TurnRequest": {"chain", "metadata"},
    "TurnResult": {"chain", "metadata"},
}


# Every model relevo 0.1.0 reads a turn or a result with, and its fields (all it accepts).
SHAPE_0_1_0: dict[str, str] = {
    "Attempt": (
        "charged_micros detail ended_ms error_class first_byte_ms http_status latency_ms "
        "model outcome provider provider_model reasoning_left_out retry_index"
    ),
    "DocumentPart": "data media_type name type url",
    "ImagePart": "data media_type type url",
    "JsonObjectFormat": "type",
    "JsonSchemaFormat": "json_schema name strict type",
    "Message": "content reasoning role tool_call_id tool_calls",
    "NamedTool": "name",
    "Reasoning": "encrypted id origin redacted signature text",
    "Reply": "parsed reasoning refusal text tool_calls",
    "TextPart": "text type",
    "Tool": "description name parameters side_effects",
    "ToolCall": "arguments id name signature",
    "TurnRequest": (
        "deadline_s max_tokens messages parallel_tool_calls reasoning_effort response_format "
        "seed stop stream temperature tenant_id tool_choice tools top_p turn_id"
    ),
    "TurnResult": (
        "attempts cost_micros degradation degradation_message dropped_tools effective_model "
        "effective_provider error finish_reason latency_ms primary_model read_only reason "
        "reply status step tenant_id trimmed_messages turn_id usage"
    ),
    "Usage": "cache_read_tokens cache_write_tokens input_tokens output_tokens reasoning_tokens",
}


def _strict_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [TurnRequest, TurnResult]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for info in model.model_fields.values():
            todo += [
                t
                for t in _types(info.annotation)
                if isinstance(t, type) and issubclass(t, BaseModel)
            ]
    return found


def _types(annotation: Any) -> list[Any]:
    args = getattr(annotation, "__args__", ())
    return [annotation, *(t for a in args for t in _types(a))]
