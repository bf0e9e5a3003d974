"""One stored value nobody can read (a hand edit, another tool, a newer release) is set aside
and reported; dispatch, the console, the exporter and the commands go on for the rest.

Each test writes the damaged value straight into the real Redis, as an operator's
`redis-cli` would, under the test's own namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis

from breakers import KillSwitch, connect
from breakers.keys import Keys
from budgets import Share
from budgets.keys import BudgetKeys
from tests.chainkit import KEY
from tests.consolekit import csrf_of, http_console, log_in
from tests.test_console import OPERATOR, TOKENS
from tests.test_fair_dispatch import _dispatcher, drain, put
from tests.test_operate import out_json, relevo
from worker.fleet.exporter import FleetCollector
from worker.fleet.fairqueue import FairQueue
from worker.fleet.turnstore import TurnKeys
from worker.observability.metrics import TENANT_QUEUED
from worker.settings import load_settings
from worker.types import Status

BAD_SHARES = ("|||abc", "|||nan", "|||inf", "abc|||1", "1|2", "-1|||1", "1.5|||1", "|||0")


@pytest.fixture
def ns(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RELEVO_REDIS__URL", redis_url)
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", namespace)
    return namespace


@pytest.fixture
async def console(console_toml: Path, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_console(console_toml, redis_url, TOKENS) as http:
        yield http


@pytest.mark.parametrize("raw", BAD_SHARES)
async def test_a_damaged_share_neither_stops_dispatch_nor_lifts_or_favours_its_tenant(
    sync_client: redis.Redis, fair: FairQueue, raw: str
) -> None:
    fair.default = Share(max_in_flight=2)
    sync_client.hset(fair.shares.key, "bad", raw)
    for i in range(6):
        put(sync_client, fair, "bad", f"b{i}")
        put(sync_client, fair, "good", f"g{i}")
    done = await fair.dispatch(most=20, depth=20)
    assert done.unreadable == ["bad"]
    sent = [tenant for tenant, _ in done.moved]
    # The default share (2 in flight) holds it: its limits are not lifted, nor is it
    # ahead of the others (weight 1, as theirs).
    assert sent.count("bad") == 2
    assert sent.count("good") == 2
    loads = {load.tenant: load for load in await fair.load()}
    assert loads["bad"].unreadable is not None
    assert loads["bad"].share == fair.default
    assert loads["good"].unreadable is None


async def test_a_damaged_share_with_no_limit_keeps_fair_order(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    sync_client.hset(fair.shares.key, "bad", "|||inf")
    for i in range(10):
        put(sync_client, fair, "bad", f"b{i}")
        put(sync_client, fair, "good", f"g{i}")
    order: list[str] = []
    for _ in range(10):
        await fair.dispatch(most=2, depth=2)
        order += await drain(fair)
    assert order.count("bad") == order.count("good") == 10
    assert abs(order[:10].count("bad") - 5) <= 1


async def test_a_damaged_bucket_is_read_as_full(sync_client: redis.Redis, fair: FairQueue) -> None:
    await fair.shares.set("acme", Share(turns_per_minute=60))
    sync_client.hset(fair.keys.key("buckets"), "acme", "nan|inf|yesterday")
    put(sync_client, fair, "acme", "a0")
    done = await fair.dispatch(most=5, depth=5)
    assert [t for t, _ in done.moved] == ["acme"]


def test_relevo_tenants_lists_a_damaged_share_as_unreadable(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.hset(f"{{{ns}}}:budget:shares", mapping={"bad": "|||nan", "fine": "3|||2"})
    assert relevo("tenants", "--json") == 0
    rows = {r["tenant"]: r for r in out_json(capsys)}
    assert rows["bad"]["share"] == "unreadable"
    assert "whole number" in rows["bad"]["unreadable"]
    assert rows["fine"]["max_in_flight"] == 3
    assert relevo("tenants") == 0
    assert "unreadable" in capsys.readouterr().out
    assert relevo("tenants", "set", "bad", "--max-in-flight", "4") == 0
    capsys.readouterr()
    assert relevo("tenants", "--json") == 0
    assert {r["tenant"]: r["share"] for r in out_json(capsys)}["bad"] == "own"


def _damage_kill_switch(redis_url: str, namespace: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.hset(
            Keys(namespace).kill, mapping={"who": "ops", "why": "drill", "since_ms": "yesterday"}
        )


async def test_a_malformed_kill_switch_stays_on_and_says_why(
    redis_url: str, namespace: str
) -> None:
    _damage_kill_switch(redis_url, namespace)
    client = connect(redis_url, timeout_s=2.0)
    try:
        state = await KillSwitch(client, namespace=namespace).status()
    finally:
        await client.aclose()
    assert state is not None
    assert state.who == "ops"
    assert state.unreadable is not None
    assert "since_ms" in state.unreadable


def test_the_cli_shows_and_turns_off_a_malformed_kill_switch(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _damage_kill_switch(redis_url, ns)
    assert relevo("kill-switch", "status") == 0
    out = capsys.readouterr().out
    assert "unreadable" in out
    assert relevo("kill-switch", "status", "--json") == 0
    assert out_json(capsys)["on"] is True
    assert relevo("kill-switch", "off", "--who", "ops") == 0
    capsys.readouterr()
    assert relevo("kill-switch", "status", "--json") == 0
    assert out_json(capsys)["on"] is False


async def test_the_console_shows_and_turns_off_a_malformed_kill_switch(
    console: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    _damage_kill_switch(redis_url, namespace)
    csrf = await log_in(console, OPERATOR)
    page = await console.get("/")
    assert page.status_code == 200
    assert "on (unreadable:" in page.text
    form = {"mode": "off", "reason": "damaged", "csrf": csrf}
    preview = await console.post("/act/kill_switch", data=form)
    assert preview.status_code == 200, preview.text[:300]
    confirm = csrf_of(preview.text)
    done = await console.post(
        "/act/kill_switch", data={**form, "csrf": confirm, "confirmed": "yes"}
    )
    assert done.status_code == 303
    with redis.Redis.from_url(redis_url) as client:
        assert not client.exists(Keys(namespace).kill)


def _damage_indexes(redis_url: str, namespace: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.zadd(TurnKeys(namespace).recent, {b"\xff\xfe": 9e12, "a|b|c": 9e12})
        client.zadd(Keys(namespace).scope_index, {b"vendor:\xff": 1, "no such shape": 1})
        client.sadd(BudgetKeys(namespace).tenants(), "bad tenant!", b"\xff")
        client.hset(f"{{{namespace}}}:fair:queued", mapping={b"\xfftenant": "x", "fine": "2"})


async def test_console_pages_skip_members_they_cannot_read(
    console: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    _damage_indexes(redis_url, namespace)
    await log_in(console, OPERATOR)
    with redis.Redis.from_url(redis_url) as client:
        client.hset(f"{{{namespace}}}:budget:shares", "bad", "|||nan")
    for page in ("/", "/?fragment=1", "/recent", "/tenants"):
        response = await console.get(page)
        assert response.status_code == 200, (page, response.text[:300])
    assert "share unreadable" in (await console.get("/tenants")).text


def test_the_exporter_skips_members_it_cannot_read(
    console_toml: Path, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    _damage_indexes(redis_url, namespace)
    collector = FleetCollector(load_settings(console_toml))
    # Tenant series come from a snapshot read in the background: read one now.
    assert collector.tenants.refresh() is not None
    assert TENANT_QUEUED in collector.render().decode()


def test_the_commands_skip_members_they_cannot_read(
    ns: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _damage_indexes(redis_url, ns)
    for command in (("breakers",), ("budgets", "list"), ("tenants",), ("breakers", "--json")):
        assert relevo(*command) == 0, command
    capsys.readouterr()


async def test_damaged_fair_queue_items_are_set_aside_and_the_rest_dispatched(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    put(sync_client, fair, "acme", "a0")
    put(sync_client, fair, "acme", "a1")
    put(sync_client, fair, "beta", "b0")
    # A queue entry, a count, a lease and an expired mark that are not what they should be.
    first = sync_client.zrange(fair.keys.key("pending"), 0, 0)[0]
    sync_client.hset(fair.keys.key("msgs"), first, "a0|x|y|z|msg")
    sync_client.hset(fair.keys.key("queued"), "beta", "many")
    sync_client.hset(fair.keys.key("inflight"), "beta", "nan")
    sync_client.zadd(fair.keys.key("leases"), {"no-bar-here": 1})
    sync_client.hset(fair.keys.key("expired"), "gone?", "not|a number")
    dispatcher = _dispatcher(fair, [None])
    done = await dispatcher.round()
    assert sorted(t for t, _ in done.moved) == ["acme", "beta"]
    answered = await dispatcher.store.result("a0")
    assert answered is not None
    assert (answered.status, answered.reason) == (Status.FAILED, "unreadable")
    assert await fair.expired() == []
    assert sorted(await drain(fair)) == ["acme", "beta"]
    assert not sync_client.hexists(fair.keys.key("inflight"), "beta")
