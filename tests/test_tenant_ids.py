"""Tenant ids as platforms write them ("org:1234", "team/42", "acme.eu", "user@example.com"),
on every surface: the request, the budget keys and their Cluster slots, a real turn
reserved, charged and reported, the fair queue, the console's URLs, log lines and the
exporter's labels. The ids nothing may hold are refused in one line naming the allowed
characters. Real Redis, real turns over the simulated providers.
"""

from __future__ import annotations

import asyncio
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families
from redis.crc import key_slot

import budgets
from budgets import Share
from budgets.keys import TENANT_PATTERN, BudgetKeys
from tests.chainkit import KEY, run, settings, turn
from tests.consolekit import console_config, csrf_of, http_console, log_in
from tests.test_console import OPERATOR, TOKENS, VIEWER
from tests.test_fair_dispatch import put
from worker.cli.main import main
from worker.errors import InputError
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.exporter import FleetCollector
from worker.fleet.fairqueue import FairQueue
from worker.fleet.turnstore import TurnStore
from worker.guard.redis_guard import open_guard
from worker.observability.logs import configure_logging
from worker.simulator import Simulator
from worker.types import Status, TurnResult, parse_turn_request

PLATFORM_IDS = (
    "org:1234",
    "team/42",
    "acme.eu",
    "user@example.com",
    "user+eu@example.com",
    "urn:tenant:acme",
    "arn:aws:iam::123456789012:root",
    "org_2abc/team-7",
)
# One for each thing a tenant id must not hold, and why.
REFUSED = {
    "a|b": "'|' at position 1",  # the fair queue's "<tenant>|<seq>" members split on it
    "{x}": "'{' at position 0",  # the Cluster hash tag
    "x}": "'}' at position 1",
    "a b": "' ' at position 1",
    "x" * 65: "at most 64 characters, not 65",
    "acme\x00": "'\\x00' at position 4",
    "acme\n": "'\\n' at position 4",
    "acme\x1b[31m": "'\\x1b' at position 4",
    "a%2Fb": "'%' at position 1",
    "a*": "'*' at position 1",
    "a/../b": "each part between '/'",
    "a//b": "each part between '/'",
    "team/": "each part between '/'",
    "/team": "starts with '/'",
    "acmé": "non-ASCII character 'é' at position 3",
}
ALLOWED_SAID = "ASCII letters, digits, '_', '.', '-', ':', '/', '@' and '+'"
# ":smile:" stays as written: the commands' tables take no emoji codes nor markup.
REPORTED = ("org:1234", "team/42", "user@example.com", "org:smile:42")
# "+" is a space in a query string unless encoded: the pages' links encode it.
LINKED = (*REPORTED, "user+eu@example.com")


def request_for(tenant: str) -> dict[str, Any]:
    return {"tenant_id": tenant, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("tenant", PLATFORM_IDS)
def test_platform_ids_are_accepted_by_the_request_and_by_budgets(tenant: str) -> None:
    assert parse_turn_request(request_for(tenant)).tenant_id == tenant
    assert budgets.check_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", REFUSED, ids=[repr(t)[:20] for t in REFUSED])
def test_refused_ids_get_one_line_naming_the_allowed_characters(tenant: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_turn_request(request_for(tenant))
    said = str(caught.value)
    assert said.startswith("tenant_id: tenant id ")
    assert len(said.splitlines()) == 1
    assert REFUSED[tenant] in said
    if "characters, not" not in said:
        assert ALLOWED_SAID in said


@pytest.mark.parametrize("tenant", ["a|b", "{x}", "a b", "x" * 65, "a\tb"])
def test_the_commands_refuse_them_in_one_line_before_redis(
    tenant: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__URL", "redis://127.0.0.1:9/0")  # never reached
    assert main(["budgets", "show", "--", tenant]) == 2
    err = capsys.readouterr().err
    assert err.startswith("relevo: tenant id ")
    assert len(err.strip().splitlines()) == 1


def test_an_existing_tenant_s_keys_stay_where_they_are() -> None:
    keys = BudgetKeys("relevo")
    assert keys.limits("acme-eu.prod_2") == "{relevo/acme-eu.prod_2}:budget:limits"
    assert keys.day("acme", "2026-12-05") == "{relevo/acme}:budget:day:2026-12-05"


@pytest.mark.parametrize("tenant", PLATFORM_IDS)
def test_every_key_of_a_platform_id_is_on_its_own_tenant_s_slot(tenant: str) -> None:
    keys = BudgetKeys("relevo")
    built = [
        keys.limits(tenant),
        keys.held(tenant),
        keys.holds(tenant),
        keys.reclaimed(tenant),
        keys.charge(tenant, "turn-1:0"),
        *keys.periods(tenant, 1_765_000_000_000)[0],
    ]
    assert all(k.startswith("{relevo/" + tenant + "}:budget:") for k in built)
    # The hash tag ends at the first '}', which no tenant id holds: the whole id is hashed.
    assert {key_slot(k.encode()) for k in built} == {key_slot(f"relevo/{tenant}".encode())}


def test_the_pattern_is_the_check() -> None:
    for tenant in PLATFORM_IDS:
        assert re.fullmatch(TENANT_PATTERN, tenant)
    for tenant in REFUSED:
        assert not re.fullmatch(TENANT_PATTERN, tenant) or len(tenant) > 64


# -- on the real Redis -----------------------------------------------------------------------


@pytest.fixture
def ns(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RELEVO_REDIS__URL", redis_url)
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", namespace)
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    return namespace


def test_a_turn_of_each_is_reserved_charged_logged_and_reported(
    sim: Simulator, redis_url: str, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.reset()
    for tenant in REPORTED:
        assert main(["budgets", "set", tenant, "--daily", "5", "--monthly", "100"]) == 0
    capsys.readouterr()
    config = settings(sim.url, redis={"url": redis_url, "namespace": ns})
    out = io.StringIO()
    configure_logging(level="info", json=True, stream=out)

    async def turns() -> list[Any]:
        guard = open_guard(config)
        try:
            return [
                await run(config, turn().model_copy(update={"tenant_id": t}), guard=guard)
                for t in REPORTED
            ]
        finally:
            await guard.aclose()

    results = asyncio.run(turns())
    assert [r.status for r in results] == [Status.OK] * len(REPORTED)
    logged = [json.loads(line) for line in out.getvalue().splitlines()]
    done = [e["tenant_id"] for e in logged if e["event"] == "turn.completed"]
    assert done == list(REPORTED)
    for tenant, result in zip(REPORTED, results, strict=True):
        assert result.tenant_id == tenant
        assert result.cost_micros > 0
        assert main(["budgets", "show", tenant, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["tenant"] == tenant
        assert report["day"]["spent_micros"] == result.cost_micros
        assert report["reserved_micros"] == 0  # the hold was settled
        assert main(["budgets", "show", tenant]) == 0
        assert tenant in capsys.readouterr().out
    assert main(["budgets", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(tenant in listed for tenant in REPORTED)


def test_the_tenants_command_sets_lists_and_clears_a_platform_id(
    ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tenants", "set", "team/42", "--weight", "2"]) == 0
    assert capsys.readouterr().out.startswith("team/42: max in flight -")
    assert main(["tenants", "--json"]) == 0
    assert [(r["tenant"], r["weight"]) for r in json.loads(capsys.readouterr().out)] == [
        ("team/42", 2)
    ]
    assert main(["tenants", "clear", "team/42"]) == 0
    assert capsys.readouterr().out.strip() == "team/42: back to the defaults"
    assert main(["tenants", "chains", "team/42", "--allow", "default", "--json"]) == 0
    capsys.readouterr()
    assert main(["tenants", "chains", "team/42", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "tenant": "team/42",
        "route": {"default": None, "allowed": ["default"]},
    }
    assert main(["tenants", "set", "a|b", "--weight", "2"]) == 2
    assert capsys.readouterr().err.startswith("relevo: tenant id 'a|b' must start with")


@pytest.mark.parametrize("release", ["0.1.0", "0.2.0"])
def test_the_fleet_takes_a_platform_id_once_no_0_1_0_worker_may_run_it(
    sim: Simulator, redis_url: str, ns: str, sync_client: redis.Redis, release: str
) -> None:
    namespace = ns
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    worker = config.worker.model_copy(update={"queue": namespace, "oldest_release": release})
    app = make_app(config.model_copy(update={"worker": worker}))
    request = turn().model_copy(update={"tenant_id": "org:1234"})
    try:
        if release == "0.1.0":  # its workers would refuse the id: refused here instead
            with pytest.raises(InputError, match=r"^tenant_id: cannot be sent while relevo 0\.1"):
                enqueue_turn(request, app=app)
            enqueue_turn(turn(), app=app)  # a plain id goes as before
            queued = {b"acme": b"1"}
        else:
            enqueue_turn(request, app=app)
            queued = {b"org:1234": b"1"}
        assert sync_client.hgetall(f"{{{namespace}}}:fair:queued") == queued
    finally:
        keys = list(sync_client.scan_iter(match=f"*{namespace}*", count=1000))
        sync_client.delete(*keys)


async def _taken(fair: FairQueue) -> list[tuple[str, str]]:
    """The broker's queue emptied as workers take it: (tenant, turn id) each."""
    taken = []
    while (raw := await fair.redis.rpop(fair.queue)) is not None:
        # The message `put` queued, "msg:<tenant>:<turn>": turn ids hold no ':'.
        tenant, turn_id = raw.decode().removeprefix("msg:").rsplit(":", 1)
        taken.append((tenant, turn_id))
    return taken


async def test_fair_dispatch_serves_platform_ids_and_parses_them_back(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    tenants = ("org:1234", "team/42", "user@example.com", "acme")
    await fair.shares.set("team/42", Share(max_in_flight=1))
    for tenant in tenants:
        for i in range(3):
            put(sync_client, fair, tenant, f"t{i}-{len(tenant)}")
    first = await fair.dispatch(most=4, depth=4)
    # One turn each in the first round: no tenant's id hides another's turns.
    assert sorted(t for t, _ in first.moved) == sorted(tenants)
    loads = {x.tenant: (x.queued, x.in_flight, x.own) for x in await fair.load()}
    assert loads == {t: (2, 1, t == "team/42") for t in tenants}
    running = await _taken(fair)
    second = await fair.dispatch(most=4, depth=4)
    # Its share holds "team/42" back, named so; the others fill the round (work-conserving).
    assert {t for t, _ in second.moved} == set(tenants) - {"team/42"}
    assert second.held == [("team/42", "max_in_flight")]
    served = [t for t, _ in first.moved + second.moved]
    running += await _taken(fair)
    while running:
        for tenant, turn_id in running:
            assert await fair.release(tenant, turn_id)
        served += [t for t, _ in (await fair.dispatch(most=4, depth=4)).moved]
        running = await _taken(fair)
    assert sorted(served) == sorted(tenants * 3)


async def test_a_platform_id_past_its_queue_deadline_is_read_back(
    sync_client: redis.Redis, fair: FairQueue
) -> None:
    put(sync_client, fair, "team/42", "late", deadline_ms=1)
    await asyncio.sleep(0.05)
    await fair.dispatch(most=4, depth=4)
    assert [(turn_id, tenant) for turn_id, tenant, _ in await fair.expired()] == [
        ("late", "team/42")
    ]


def _degraded(tenant: str, n: int) -> TurnResult:
    return TurnResult(
        turn_id=f"t-{n}",
        tenant_id=tenant,
        status=Status.DEGRADED,
        reason="tenant_budget_exhausted",
        primary_model="openai/alpha",
    )


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-turn="([^"]+)"', html)


async def test_the_console_sets_shows_and_links_platform_ids(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    config = console_config(tmp_path, redis_url, namespace)
    client = redis.asyncio.Redis.from_url(redis_url)
    turns = TurnStore(client, namespace=namespace)
    try:
        for n, tenant in enumerate(LINKED):
            await turns.save(_degraded(tenant, n))
        async with http_console(config, redis_url, TOKENS) as http:
            csrf = await log_in(http, OPERATOR)
            for n, tenant in enumerate(LINKED):
                form = {"tenant": tenant, "daily": "1", "monthly": "2", "reason": "r"}
                data = {**form, "csrf": csrf, "confirmed": "yes"}
                done = await http.post("/act/limits", data=data)
                assert done.status_code == 303, done.text
                page = (await http.get("/tenants", params={"q": tenant})).text
                assert f'data-tenant="{tenant}"' in page
                # The links the pages write take the id back, exactly, to the filter.
                [link] = re.findall(r'href="(/recent\?status=degraded&amp;tenant=[^"]+)"', page)
                filtered = await http.get(html.unescape(link))
                assert _rows(filtered.text) == [f"t-{n}"]
                assert f'value="{tenant}"' in filtered.text
                recent = (await http.get("/recent")).text
                [link] = re.findall(
                    rf'href="(/recent\?tenant=[^"]+)">.*?{re.escape(tenant)}<', recent
                )
                assert _rows((await http.get(html.unescape(link))).text) == [f"t-{n}"]
            refused = await http.post(
                "/act/limits",
                data={"tenant": "a|b", "daily": "1", "monthly": "2", "reason": "r", "csrf": csrf},
            )
            assert refused.status_code == 400
            assert "tenant id &#39;a|b&#39; must" in refused.text
        ledger = budgets.Ledger(client, namespace=namespace)
        assert set(LINKED) <= set(await ledger.tenants())
    finally:
        await client.aclose()


async def test_a_login_returns_to_a_page_filtered_by_a_platform_id(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    config = console_config(tmp_path, redis_url, namespace)
    async with http_console(config, redis_url, TOKENS) as http:
        here = "/recent?tenant=team/42"  # as the pages' links write it ('/' unescaped)
        sent = await http.get(here)
        assert sent.status_code == 303
        login = await http.get(sent.headers["location"])
        nonce = csrf_of(login.text)
        back = await http.post("/login", data={"csrf": nonce, "token": VIEWER, "next": here})
        assert back.status_code == 303
        assert back.headers["location"] == here
        # Still never another site: '/' and '@' are taken after the '?' only.
        for elsewhere in ("//evil.example", "/@evil.example", "/tenants/../x", "/\\evil"):
            http.cookies.clear()  # a new visitor
            nonce = csrf_of((await http.get("/login")).text)
            data = {"csrf": nonce, "token": VIEWER, "next": elsewhere}
            response = await http.post("/login", data=data)
            assert response.headers.get("location") == "/", (
                response.status_code,
                response.text[:300],
            )


def test_the_exporter_labels_spend_with_the_id_as_written(
    sim: Simulator, redis_url: str, ns: str
) -> None:
    namespace = ns
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})

    async def arrange() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            ledger = budgets.Ledger(client, namespace=namespace)
            for n, tenant in enumerate(REPORTED, start=1):
                await ledger.set_limits(tenant, daily_micros=1_000_000, monthly_micros=9_000_000)
                await ledger.reserve(
                    tenant, "c1", provider="oa", micros=n * 1000, fallback=False, ttl_s=60
                )
                await ledger.settle(tenant, "c1", n * 1000, provider="oa")
        finally:
            await client.aclose()

    asyncio.run(arrange())
    collector = FleetCollector(config)
    assert collector.tenants.refresh() is not None
    text = collector.render().decode()
    spend = {
        s.labels["tenant"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "relevo_tenant_spend_micros" and s.labels.get("period") == "day"
    }
    assert spend == {tenant: n * 1000 for n, tenant in enumerate(REPORTED, start=1)}
    assert 'tenant="user@example.com"' in text
