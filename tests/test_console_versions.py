"""`relevo console` over a Redis two releases share: what it cannot read is marked, pages load.

A real `relevo console` process on the real Redis, whose window holds a result with
fields this release does not know (read), and one a newer release wrote, a corrupt
one, a heartbeat, an audit entry and a hand-off it cannot read, and a stream chunk
that is not UTF-8: the fleet page, its live refresh, the tenants page and the turn
pages answer 200, each unreadable item marked as such.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import redis

from budgets.keys import BudgetKeys
from tests.chainkit import KEY, worker_config
from tests.consolekit import console_process, log_in
from worker.fleet.audit import AuditTrail
from worker.fleet.turnstore import TurnKeys
from worker.types import Status, TurnResult

pytestmark = pytest.mark.slow

VIEWER = "Xq7m-viewer-2KdT9wLp4RsZ8nBv"
OPERATOR = "Pz3k-operator-7HqW1eNs5TbY9cMx"
NAMESPACE = f"relevo-test-{uuid.uuid4().hex[:12]}"


def _result(turn_id: str, **added: object) -> bytes:
    data = TurnResult(
        turn_id=turn_id, tenant_id="acme", status=Status.DEGRADED, primary_model="m", step=1
    ).model_dump(mode="json")
    return json.dumps(data | added).encode()


@pytest.fixture(scope="module")
def console(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("console") / "chain.toml"
    config.write_text(
        worker_config(sim="http://127.0.0.1:9", redis_url=redis_url, namespace=NAMESPACE)
    )
    keys, now = TurnKeys(NAMESPACE), int(time.time() * 1000)
    stored = {
        "t-added": _result("t-added", added_by_a_newer_release={"x": 1}),
        "t-newer": _result("t-newer", schema_version=2),
        "t-corrupt": b'{"turn_id": "t-corrupt", ',
    }
    with redis.Redis.from_url(redis_url) as client:
        for turn_id, raw in stored.items():
            client.set(keys.result(turn_id), raw, ex=600)
            client.zadd(keys.recent, {turn_id: now})
        for chunk in (b"caf", b"\xff", b" ok"):
            client.xadd(keys.chunks("t-added"), {"text": chunk})
        client.set(keys.worker("h:9"), json.dumps({"schema_version": 2}), ex=600)
        client.zadd(keys.workers, {"h:9": now})
        client.xadd(AuditTrail(client, namespace=NAMESPACE).key, {"who": b"\xff", "action": "x"})
        entry = {"tenant": "acme", "turn_id": "t-h", "reason": "r", "payload": "{}"}
        client.xadd(BudgetKeys(NAMESPACE).handoffs(), {**entry, "schema_version": "2"})
    tokens = f"bob viewer {VIEWER};alice operator {OPERATOR}"
    env = {"RELEVO_CONSOLE_TOKENS": tokens, "RELEVO_TEST_KEY": KEY}
    with console_process(config, env) as url:
        yield url


@pytest.fixture
async def viewer(console: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=console, timeout=10) as client:
        await log_in(client, VIEWER)
        yield client


async def test_the_fleet_page_and_its_live_refresh_mark_what_they_cannot_read(
    viewer: httpx.AsyncClient,
) -> None:
    for path in ("/", "/?fragment=1"):
        page = await viewer.get(path)
        assert page.status_code == 200, path
        assert "2 stored result(s) in the window could not be read" in page.text
        assert "1 worker heartbeat(s) could not be read" in page.text
        assert "is not UTF-8 text</td>" in page.text  # the audit entry
        assert 'id="recent-link">1</a>' in page.text  # the result with added fields counts


async def test_the_tenants_page_marks_what_it_cannot_read(
    console: str, viewer: httpx.AsyncClient
) -> None:
    page = await viewer.get("/tenants")
    assert page.status_code == 200
    assert "2 stored result(s) in the window" in page.text
    assert "0 hand-off(s)" in page.text  # hand-offs hold prompts: a viewer's page reads none
    async with httpx.AsyncClient(base_url=console, timeout=10) as operator:
        await log_in(operator, OPERATOR)
        assert "1 hand-off(s)" in (await operator.get("/tenants")).text


async def test_each_turn_page_renders_and_says_what_it_cannot_read(
    viewer: httpx.AsyncClient,
) -> None:
    pages = {t: await viewer.get("/turns", params={"id": t}) for t in ("t-added", "t-newer")}
    pages["t-corrupt"] = await viewer.get("/turns", params={"id": "t-corrupt"})
    assert {t: p.status_code for t, p in pages.items()} == dict.fromkeys(pages, 200)
    assert 'data-status="degraded"' in pages["t-added"].text
    assert "caf\ufffd ok" in pages["t-added"].text
    assert "1 piece(s) of the stream could not be read" in pages["t-added"].text
    assert "a newer release wrote it (schema version 2" in pages["t-newer"].text
    assert 'data-status="unreadable"' in pages["t-corrupt"].text
