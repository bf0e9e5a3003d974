"""examples/webapp.py over real HTTP (uvicorn), on the real Redis and real workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from examples.webapp import _sse, follow, stream_timeout_s
from tests.chainkit import KEY, worker_config
from tests.netkit import free_port
from tests.test_async_producer import celery_worker, write_fleet_config
from worker.settings import load_settings
from worker.simulator import Fault, Simulator

pytestmark = pytest.mark.usefixtures("fresh_sim")


ROOT = Path(__file__).resolve().parents[1]
ACME = {"Authorization": "Bearer acme-token"}
GLOBEX = {"Authorization": "Bearer globex-token"}
KEEPALIVE_S = 0.3


@contextmanager
def serve(config: Path) -> Iterator[str]:
    """The example app, as its docstring runs it: `uvicorn examples.webapp:app`."""
    port = free_port()
    env = {
        **os.environ,
        "RELEVO_CONFIG": str(config),
        "RELEVO_TEST_KEY": KEY,
        "WEBAPP_TOKENS": "acme-token=acme,globex-token=globex",
        "WEBAPP_KEEPALIVE_S": str(KEEPALIVE_S),
    }
    log = config.with_name("webapp.log")
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.webapp:app", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                httpx.get(f"{url}/turns/probe", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the web app never answered"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture(scope="module")
def config(sim: Simulator, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webapp") / "chain.toml"
    return write_fleet_config(path, sim=sim.url, redis_url=redis_url)


@pytest.fixture(scope="module")
def web(config: Path) -> Iterator[str]:
    with serve(config) as url:
        yield url


@pytest.fixture(scope="module")
def worker(config: Path) -> Iterator[subprocess.Popen[bytes]]:
    with celery_worker(config, threads=20) as proc:
        yield proc


def turn(**fields: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": "hello"}], **fields}


def events_of(lines: list[str]) -> list[tuple[str | None, str, str]]:
    """(id, event, data) of each event in `lines`, as the example's client reads them."""

    async def parse() -> list[tuple[str | None, str, str]]:
        async def each() -> AsyncIterator[str]:
            for line in lines:
                yield line

        return [event async for event in _sse(each())]

    return asyncio.run(parse())


def raw_events(response: httpx.Response) -> list[tuple[str | None, str, str]]:
    return events_of(list(response.iter_lines()))


@pytest.mark.slow
def test_a_turn_streams_over_sse_then_reports_its_result(
    web: str, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    sim.set_faults("alpha", Fault(tokens=10, token_interval_s=0.05))
    with httpx.Client(base_url=web, timeout=30, headers=ACME) as client:
        sent = client.post("/turns", json=turn(stream=True))
        assert sent.status_code == 202, sent.text
        turn_id = sent.json()["turn_id"]
        assert sent.headers["location"] == f"/turns/{turn_id}"
        # Queued or running: the reply takes half a second to stream.
        assert client.get(f"/turns/{turn_id}").json() == {"turn_id": turn_id, "status": "pending"}
        with client.stream("GET", f"/turns/{turn_id}/stream") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = raw_events(response)
        texts = [json.loads(data) for _, _, data in events[:-1]]
        assert {name for _, name, _ in events[:-1]} == {"text"}
        assert all(event_id for event_id, _, _ in events[:-1])
        assert len(texts) > 1
        assert events[-1][1] == "result"
        result = json.loads(events[-1][2])
        assert (result["turn_id"], result["tenant_id"], result["status"]) == (turn_id, "acme", "ok")
        assert "".join(texts) == result["reply"]["text"]
        done = client.get(f"/turns/{turn_id}")
        assert done.status_code == 200
        assert done.json() == result
        # A client that reconnects after the third event gets the rest, and only the rest.
        third = events[2][0]
        assert third is not None
        with client.stream(
            "GET", f"/turns/{turn_id}/stream", headers={"Last-Event-ID": third}
        ) as again:
            rest = raw_events(again)
        assert "".join(texts[:3] + [json.loads(d) for _, _, d in rest[:-1]]) == texts_of(result)
        assert (
            client.get(f"/turns/{turn_id}/stream", headers={"Last-Event-ID": "x"}).status_code
            == 400
        )
        # Another tenant does not see the turn at all.
        assert client.get(f"/turns/{turn_id}", headers=GLOBEX).status_code == 404
        assert client.get(f"/turns/{turn_id}/stream", headers=GLOBEX).status_code == 404


def texts_of(result: dict[str, object]) -> str:
    reply = result["reply"]
    assert isinstance(reply, dict)
    return str(reply["text"])


@pytest.mark.slow
def test_a_quiet_stream_sends_keep_alive_comments(
    web: str, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    """A proxy closing idle connections sees a comment every WEBAPP_KEEPALIVE_S."""
    sim.set_faults("alpha", Fault(latency_s=1.5))
    with httpx.Client(base_url=web, timeout=30, headers=ACME) as client:
        turn_id = client.post("/turns", json=turn(stream=True)).json()["turn_id"]
        with client.stream("GET", f"/turns/{turn_id}/stream") as response:
            lines = list(response.iter_lines())
    comments = [line for line in lines if line.startswith(":")]
    assert len(comments) >= 2, lines
    assert set(comments) == {": keep-alive"}
    assert any(line == "event: result" for line in lines)


def test_the_tenant_is_the_servers_to_set(web: str) -> None:
    with httpx.Client(base_url=web, timeout=10) as client:
        assert client.post("/turns", json=turn()).status_code == 401
        wrong = client.post("/turns", json=turn(), headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert client.get("/turns/some-turn").status_code == 401
        other = client.post("/turns", json=turn(tenant_id="globex"), headers=ACME)
        assert other.status_code == 403
        assert other.json()["error"].startswith("tenant_id: ")
        chosen = client.post("/turns", json=turn(turn_id="mine"), headers=ACME)
        assert chosen.status_code == 422
        assert chosen.json()["error"].startswith("turn_id: ")


def test_bad_input_is_refused_naming_the_field(web: str, config: Path) -> None:
    limit = load_settings(config, require_secrets=False).limits.max_request_bytes
    with httpx.Client(base_url=web, timeout=10, headers=ACME) as client:
        empty = client.post("/turns", json=turn(messages=[]))
        assert empty.status_code == 422
        assert empty.json()["error"].startswith("messages: ")
        garbled = client.post("/turns", content=b"{not json")
        assert garbled.status_code == 422
        assert garbled.json()["error"].startswith("(root): ")
        huge = client.post("/turns", content=b"x" * (limit + 1))
        assert huge.status_code == 413
        assert "max_request_bytes" in huge.json()["error"]


def test_an_unknown_turn_is_not_found(web: str) -> None:
    with httpx.Client(base_url=web, timeout=10, headers=ACME) as client:
        for path in ("/turns/never-sent", "/turns/never-sent/stream", "/turns/-not-an-id"):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert "no such turn" in answer.json()["error"]


def test_a_stream_waits_as_long_as_a_turn_run_again_can_take() -> None:
    """With the defaults a turn whose worker died is handed out again after 190 s (the
    visibility timeout and one restore interval) and may run 60 s more: a stream that
    gave up at the deadline plus a minute (120 s) never saw it finish."""
    text = worker_config(sim="http://127.0.0.1:9", redis_url="redis://127.0.0.1:1/0", namespace="x")
    settings = load_settings(data=tomllib.loads(text), require_secrets=False)
    rerun_s = settings.visibility_timeout_s + settings.worker.restore_interval_s
    assert stream_timeout_s(settings) >= rerun_s + settings.turn_deadline_s
    longer = settings.model_copy(update={"turn_deadline_s": 600.0})
    assert stream_timeout_s(longer) > stream_timeout_s(settings) + 2 * 540


@pytest.mark.slow
def test_a_client_sees_a_turn_run_again_finish_through_a_dropped_connection(
    sim: Simulator, fleet_toml: Path, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """The worker dies mid-stream and the turn runs again 12 s later (visibility timeout):
    the stream stays open meanwhile (keep-alives), a restart event voids the first run's
    text, and `follow` (the example's client) ends with the stored result's text."""
    config = fleet_toml
    sim.set_faults("alpha", Fault(tokens=40, token_interval_s=0.1, times=1), Fault(tokens=40))
    with serve(config) as url, celery_worker(config, threads=4) as doomed:

        async def scenario() -> tuple[str, dict[str, object], list[str]]:
            async with httpx.AsyncClient(base_url=url, headers=ACME, timeout=60) as client:
                sent = await client.post("/turns", json=turn(stream=True, deadline_s=10))
                turn_id = sent.json()["turn_id"]
                lines: list[str] = []
                async with client.stream("GET", f"/turns/{turn_id}/stream") as first:
                    async for line in first.aiter_lines():
                        lines.append(line)
                        if sum(seen.startswith("event: text") for seen in lines) == 8:
                            break  # the connection drops here
                doomed.send_signal(signal.SIGKILL)
                await asyncio.to_thread(doomed.wait)
                last = [line.removeprefix("id: ") for line in lines if line.startswith("id: ")][-1]
                with celery_worker(config, threads=4):
                    # Resumed after the first run's eighth piece, as a browser would.
                    async with client.stream(
                        "GET", f"/turns/{turn_id}/stream", headers={"Last-Event-ID": last}
                    ) as resumed:
                        seen = [line async for line in resumed.aiter_lines()]
                    text, result = await follow(client, turn_id)
                return text, result, seen

        text, result, seen = asyncio.run(scenario())
    assert texts_of(result) == text
    assert result["status"] == "ok"
    assert sim.calls("alpha") == 2
    assert ": keep-alive" in seen  # while the turn waited to be handed out again
    events = events_of(seen)
    names = [name for _, name, _ in events]
    assert names.count("restart") == 1
    assert names[-1] == "result"
    rerun = events[names.index("restart") + 1 : -1]
    assert "".join(json.loads(data) for _, _, data in rerun) == text
