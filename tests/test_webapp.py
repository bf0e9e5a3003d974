"""examples/webapp.py over real HTTP (uvicorn), on the real Redis and a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chainkit import KEY
from tests.netkit import free_port
from tests.test_async_producer import celery_worker, write_fleet_config
from worker.adapters.sse import SseEvent, SseParser
from worker.simulator import Fault, Simulator

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config(sim: Simulator, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webapp") / "chain.toml"
    return write_fleet_config(path, sim=sim.url, redis_url=redis_url)


@pytest.fixture(scope="module")
def web(config: Path) -> Iterator[str]:
    """The example app, as its docstring runs it: `uvicorn examples.webapp:app`."""
    port = free_port()
    env = {**os.environ, "RELEVO_CONFIG": str(config), "RELEVO_TEST_KEY": KEY}
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
def worker(config: Path) -> Iterator[subprocess.Popen[bytes]]:
    with celery_worker(config, threads=20) as proc:
        yield proc


@pytest.fixture(autouse=True)
def _fresh(sim: Simulator) -> None:
    sim.reset()


def turn(**fields: object) -> dict[str, object]:
    return {"tenant_id": "acme", "messages": [{"role": "user", "content": "hello"}], **fields}


def read_events(response: httpx.Response) -> list[SseEvent]:
    parser, events = SseParser(), []
    for chunk in response.iter_bytes():
        events.extend(parser.feed(chunk))
    return events


@pytest.mark.slow
def test_a_turn_streams_over_sse_then_reports_its_result(
    web: str, sim: Simulator, worker: subprocess.Popen[bytes]
) -> None:
    sim.set_faults("alpha", Fault(tokens=10, token_interval_s=0.05))
    with httpx.Client(base_url=web, timeout=30) as client:
        sent = client.post("/turns", json=turn(stream=True))
        assert sent.status_code == 202, sent.text
        turn_id = sent.json()["turn_id"]
        assert sent.headers["location"] == f"/turns/{turn_id}"
        # Queued or running: the reply takes half a second to stream.
        assert client.get(f"/turns/{turn_id}").json() == {"turn_id": turn_id, "status": "pending"}
        with client.stream("GET", f"/turns/{turn_id}/stream") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = read_events(response)
        texts = [json.loads(event.data) for event in events[:-1]]
        assert {event.event for event in events[:-1]} == {"text"}
        assert len(texts) > 1
        assert events[-1].event == "result"
        result = json.loads(events[-1].data)
        assert result["turn_id"] == turn_id
        assert result["status"] == "ok"
        assert "".join(texts) == result["reply"]["text"]
        done = client.get(f"/turns/{turn_id}")
        assert done.status_code == 200
        assert done.json() == result


def test_bad_input_is_refused_naming_the_field(web: str) -> None:
    with httpx.Client(base_url=web, timeout=10) as client:
        empty = client.post("/turns", json=turn(messages=[]))
        assert empty.status_code == 422
        assert empty.json()["error"].startswith("messages: ")
        nameless = client.post("/turns", json={"messages": [{"role": "user", "content": "hi"}]})
        assert nameless.status_code == 422
        assert nameless.json()["error"].startswith("tenant_id: ")
        garbled = client.post("/turns", content=b"{not json")
        assert garbled.status_code == 422
        assert garbled.json()["error"].startswith("(root): ")
        huge = client.post("/turns", content=b"x" * (2 * 1024 * 1024))
        assert huge.status_code == 413
        assert "max_request_bytes" in huge.json()["error"]


def test_an_unknown_turn_is_not_found(web: str) -> None:
    with httpx.Client(base_url=web, timeout=10) as client:
        for path in ("/turns/never-sent", "/turns/never-sent/stream", "/turns/-not-an-id"):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert "no such turn" in answer.json()["error"]
