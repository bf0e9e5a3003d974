"""What an operator looks for in an incident, over HTTP on the real Redis: the recent
turns by kind, breakers open first with a control per row and their last errors, the
workers and the queue, tenants with a spend bar and a "blocked" badge."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio

import budgets
from breakers import Operators
from tests.consolekit import http_console, log_in
from tests.test_console import OPERATOR, TOKENS, VIEWER
from worker.fleet.heartbeat import ALIVE_S, Heartbeat, beat
from worker.fleet.operations import operator_fleet
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.types import Attempt, AttemptOutcome, Status, TurnResult


@pytest.fixture
async def client(console_toml: Path, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_console(console_toml, redis_url, TOKENS) as http:
        yield http


@pytest.fixture
async def store(redis_url: str, namespace: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


OVERLOADED = Attempt(
    model="openai/alpha",
    provider="oa",
    provider_model="alpha",
    outcome=AttemptOutcome.ERROR,
    http_status=529,
    error_class="overloaded",
)
ANSWERED = Attempt(
    model="anthropic/beta", provider="an", provider_model="beta", outcome=AttemptOutcome.OK
)


def _result(turn_id: str, tenant: str, status: Status, step: int | None) -> TurnResult:
    attempts = (OVERLOADED, ANSWERED) if step else (OVERLOADED,) if step is None else ()
    return TurnResult(
        turn_id=turn_id,
        tenant_id=tenant,
        status=status,
        primary_model="openai/alpha",
        step=step,
        attempts=attempts,
    )


TURNS = [
    _result("t-plain", "acme", Status.OK, 0),
    _result("t-fellback", "acme", Status.OK, 1),
    _result("t-degraded", "beta", Status.DEGRADED, None),
    _result("t-failed", "acme", Status.FAILED, None),
]


async def _save_turns(client: redis.asyncio.Redis, namespace: str) -> None:
    turns = TurnStore(client, namespace=namespace)
    for result in TURNS:
        await turns.save(result)


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-turn="([^"]+)"', html)


async def test_recent_turns_filter_by_status_fallback_and_tenant(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, namespace: str
) -> None:
    await _save_turns(store, namespace)
    await log_in(client, VIEWER)
    everything = await client.get("/recent")
    assert everything.status_code == 200
    assert sorted(_rows(everything.text)) == sorted(t.turn_id for t in TURNS)
    assert _rows((await client.get("/recent?status=degraded")).text) == ["t-degraded"]
    assert _rows((await client.get("/recent?fell_back=1")).text) == ["t-fellback"]
    acme = _rows((await client.get("/recent?tenant=acme")).text)
    assert sorted(acme) == ["t-failed", "t-fellback", "t-plain"]
    both = await client.get("/recent?tenant=acme&status=failed")
    assert _rows(both.text) == ["t-failed"]
    refused = await client.get("/recent?status=sideways")
    assert refused.status_code == 400
    assert "status: one of ok, degraded, failed, rejected" in refused.text


async def test_the_fleet_page_counts_link_to_the_recent_turns(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, namespace: str
) -> None:
    await _save_turns(store, namespace)
    await log_in(client, VIEWER)
    page = (await client.get("/")).text
    assert re.search(r'href="/recent\?status=degraded" id="degraded-link">1 degraded<', page)
    assert re.search(r'href="/recent\?status=failed" id="failed-link">1 failed<', page)
    assert re.search(r'href="/recent\?fell_back=1" id="fell-back-link">1 of 2 turns<', page)
    assert re.search(r'href="/recent" id="recent-link">4<', page)


def _scope_rows(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr data-scope="([^"]+)" data-state="([^"]+)">', html)


async def test_breakers_open_first_with_a_control_per_row_and_their_last_errors(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, console_toml: Path, namespace: str
) -> None:
    await _save_turns(store, namespace)
    await Operators(operator_fleet(str(console_toml)).store(store)).force_open("vendor:openai", 60)
    await log_in(client, OPERATOR)
    page = (await client.get("/?fragment=1")).text
    rows = _scope_rows(page)
    assert rows[0] == ("vendor:openai", "open")
    assert all(state == "closed" for _, state in rows[1:])
    assert len(rows) > 1
    # Why it opened: the errors its model returned in the stored turns, newest first.
    openai_row = page[page.index('data-scope="vendor:openai"') :].split("</tr>", 1)[0]
    assert "<code>overloaded</code> 529" in openai_row
    assert 'href="/turns?id=t-' in openai_row
    # Each row acts on its own scope; an open one offers Close, a closed one Open.
    assert 'name="scope" value="vendor:openai"' in openai_row
    assert 'value="close"' in openai_row
    assert 'value="open"' not in openai_row
    closed_row = page[page.index(f'data-scope="{rows[1][0]}"') :].split("</tr>", 1)[0]
    assert 'value="open" class="danger"' in closed_row


async def test_a_breaker_s_errors_older_than_the_fallback_window_are_still_shown(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, namespace: str
) -> None:
    await TurnStore(store, namespace=namespace).save(TURNS[3])
    an_hour_ago_ms = int(time.time() * 1000) - 3_600_000
    await store.zadd(TurnKeys(namespace).recent, {TURNS[3].turn_id: an_hour_ago_ms})
    await log_in(client, VIEWER)
    page = (await client.get("/?fragment=1")).text
    row = page[page.index('data-scope="vendor:openai"') :].split("</tr>", 1)[0]
    assert "<code>overloaded</code> 529" in row
    assert re.search(r'id="failed-link">0 failed<', page), "the counts keep to the window"
    assert "t-failed" not in _rows((await client.get("/recent")).text)


async def test_a_viewer_sees_no_row_controls(client: httpx.AsyncClient) -> None:
    await log_in(client, VIEWER)
    page = (await client.get("/?fragment=1")).text
    assert _scope_rows(page)
    assert 'class="row-act"' not in page


async def test_workers_alive_and_silent_and_the_queue_depth(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, namespace: str
) -> None:
    keys = TurnKeys(namespace)
    now_ms = int(time.time() * 1000)
    started = now_ms - 60_000
    live = Heartbeat(
        host="node-a",
        pid=11,
        version="9.9.9",
        in_flight=3,
        local_breakers=False,
        started_ms=started,
    )
    await beat(store, keys, live)
    await beat(store, keys, live.model_copy(update={"pid": 12, "in_flight": 2}))
    # A process that stopped beating: listed, not alive.
    silent = Heartbeat(
        host="node-b",
        pid=7,
        version="9.9.8",
        in_flight=5,
        local_breakers=True,
        started_ms=started,
        seen_ms=now_ms - int(ALIVE_S * 1000) - 5_000,
    )
    await store.set(keys.worker(silent.process), silent.model_dump_json(), ex=600)
    await store.zadd(keys.workers, {silent.process: silent.seen_ms})
    await store.lpush(namespace, "m1", "m2")
    await log_in(client, VIEWER)
    page = (await client.get("/?fragment=1")).text
    a = page[page.index('data-host="node-a"') :].split("</tr>", 1)[0]
    b = page[page.index('data-host="node-b"') :].split("</tr>", 1)[0]
    assert "<td>2 of 2</td>" in a
    assert "<td>5</td>" in a
    assert "9.9.9" in a
    assert 'class=""' in a
    assert "<td>0 of 1</td>" in b
    assert 'class="bad"' in b
    assert '<span id="queued">2</span>' in page
    assert re.search(r'id="workers-card">\s*<h2>Workers</h2>\s*<p class="big">2 alive', page)


async def test_a_tenant_over_its_limit_is_blocked_and_each_has_a_spend_bar(
    client: httpx.AsyncClient, store: redis.asyncio.Redis, namespace: str
) -> None:
    ledger = budgets.Ledger(store, namespace=namespace)
    for tenant, spent in (("full", 1_000_000), ("half", 500_000)):
        await ledger.set_limits(tenant, daily_micros=1_000_000, monthly_micros=10_000_000)
        await ledger.reserve(tenant, "c1", provider="oa", micros=spent, fallback=False, ttl_s=60)
        await ledger.settle(tenant, "c1", spent, provider="oa")
    await log_in(client, VIEWER)
    page = (await client.get("/tenants")).text
    full = page[page.index('data-tenant="full"') :].split("</tr>", 1)[0]
    half = page[page.index('data-tenant="half"') :].split("</tr>", 1)[0]
    assert ">blocked</span>" in full
    assert ">blocked</span>" not in half
    assert '<meter min="0" max="1"' in full
    assert 'value="0.5"' in half
