"""The console over HTTP (Starlette's test client) on the real Redis: security and inputs.

No page without a session; every response carries the security headers; an action
needs its CSRF token, this server's Origin and an operator; every hostile name or
amount is refused before Redis is asked (nothing under the namespace changes) with
an error naming the field; what the pages show is escaped and holds no secret.
The browser tests (tests/test_console_browser.py) cover the same pages end to end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio

from breakers import FleetBreakers, Gone, Pair, connect
from budgets import Ledger, Share, encode_labels
from tests.chainkit import KEY
from tests.consolekit import BASE, csrf_of, http_console, log_in
from tests.netkit import free_port
from tests.test_security_names import ALLOWED, TRICKY
from worker.console.auth import TOKENS_ENV, Principal, Role, Tokens, load_tokens
from worker.console.server import console_settings, serve_console
from worker.errors import ConfigError
from worker.fleet.audit import AuditTrail
from worker.fleet.fairqueue import enqueue_sync
from worker.fleet.operations import operator_fleet

OPERATOR = "operator-token-0123456789abcdef"
CAROL = "carol-viewer-token-Zq8rT1vX4wY7"
VIEWER = "viewer-token-0123456789abcdefgh"
TOKENS = Tokens(
    (
        (Principal("alice", Role.OPERATOR), OPERATOR),
        (Principal("bob", Role.VIEWER), VIEWER),
    )
)


@pytest.fixture
async def client(console_toml: Path, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_console(console_toml, redis_url, TOKENS) as http:
        yield http


def test_a_fleet_whose_shared_state_is_elsewhere_is_refused_at_start(
    console_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__SHARED_URL", "redis+cluster://127.0.0.1:7000")
    fleet = operator_fleet(str(console_toml))
    with pytest.raises(ConfigError, match=r"redis\.shared_url"):
        serve_console(fleet, console_settings(fleet))


async def test_a_redis_that_does_not_answer_gets_a_503_page(console_toml: Path) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    async with http_console(console_toml, nowhere, TOKENS) as http:
        csrf = await log_in(http, OPERATOR)
        page = await http.get("/")
        assert page.status_code == 503
        assert "Redis did not answer" in page.text
        assert 'id="retry"' in page.text, "the page loads itself again until Redis answers"
        form = {"mode": "on", "reason": "r", "csrf": csrf, "confirmed": "yes"}
        assert (await http.post("/act/kill_switch", data=form)).status_code == 503


def keys(redis_url: str, namespace: str) -> set[bytes]:
    with redis.Redis.from_url(redis_url) as r:
        return set(r.scan_iter(match=f"*{namespace}*", count=1000))


def test_tokens_are_read_from_the_environment_and_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "tokens"
    secret.write_text(f"# people\ncarol viewer {CAROL}\n")
    monkeypatch.setenv(TOKENS_ENV, f"alice operator {OPERATOR};bob viewer {VIEWER}")
    tokens = load_tokens(secret)
    assert tokens.authenticate(OPERATOR) == Principal("alice", Role.OPERATOR)
    assert tokens.authenticate(CAROL) == Principal("carol", Role.VIEWER)
    assert tokens.authenticate(OPERATOR[:-1]) is None
    assert tokens.authenticate("") is None


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("alice operator", "expected NAME ROLE TOKEN"),
        (f"alice admin {OPERATOR}", "role must be viewer or operator"),
        ("alice operator short-secret", "token must be 24-256"),
        (f"al/ice operator {OPERATOR}", "name:"),
        (f"alice operator {OPERATOR};alice viewer {VIEWER}", "a name appears twice"),
        ("", "no console tokens"),
    ],
)
def test_a_bad_token_line_is_refused_without_showing_the_token(
    line: str, names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKENS_ENV, line)
    with pytest.raises(ConfigError, match=names) as caught:
        load_tokens(None)
    assert "short-secret" not in str(caught.value)
    assert OPERATOR not in str(caught.value)


async def test_no_page_without_a_session(client: httpx.AsyncClient) -> None:
    for path, back in (
        ("/", ""),
        ("/tenants", "?next=%2Ftenants"),
        ("/turns?id=t1", "?next=%2Fturns%3Fid%3Dt1"),
    ):
        response = await client.get(path)
        assert response.status_code == 303
        assert response.headers["location"] == f"/login{back}"
    assert (await client.get("/?fragment=1")).status_code == 401
    assert (await client.post("/act/kill_switch", data={"mode": "on"})).status_code == 401


async def test_every_response_carries_the_security_headers(client: httpx.AsyncClient) -> None:
    await log_in(client, VIEWER)
    for path in ("/login", "/", "/static/console.css", "/nowhere"):
        response = await client.get(path)
        headers = response.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"
        assert "server" not in headers


async def test_the_session_cookie_is_http_only_and_same_site(client: httpx.AsyncClient) -> None:
    nonce = csrf_of((await client.get("/login")).text)
    response = await client.post("/login", data={"csrf": nonce, "token": OPERATOR})
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie


async def test_a_login_without_its_csrf_token_is_refused(client: httpx.AsyncClient) -> None:
    await client.get("/login")
    assert (await client.post("/login", data={"token": OPERATOR})).status_code == 403
    assert (await client.post("/login", data={"token": OPERATOR, "csrf": "x"})).status_code == 403


async def test_an_action_needs_the_csrf_token_and_this_origin(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"mode": "on", "reason": "test", "confirmed": "yes"}
    assert (await client.post("/act/kill_switch", data=form)).status_code == 403
    wrong = {**form, "csrf": csrf[:-1]}
    assert (await client.post("/act/kill_switch", data=wrong)).status_code == 403
    elsewhere = {"origin": "http://evil.example"}
    forged = await client.post("/act/kill_switch", data={**form, "csrf": csrf}, headers=elsewhere)
    assert forged.status_code == 403
    assert keys(redis_url, namespace) == set()
    here = {"origin": BASE}
    done = await client.post("/act/kill_switch", data={**form, "csrf": csrf}, headers=here)
    assert done.status_code == 303
    assert any(k.endswith(b":kill") for k in keys(redis_url, namespace))


async def test_a_viewer_may_not_act(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    csrf = await log_in(client, VIEWER)
    assert 'id="actions"' not in (await client.get("/")).text
    form = {"mode": "on", "reason": "test", "confirmed": "yes", "csrf": csrf}
    assert (await client.post("/act/kill_switch", data=form)).status_code == 403
    assert keys(redis_url, namespace) == set()


async def test_an_action_is_confirmed_before_it_is_done(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"op": "open", "scope": "vendor:openai", "seconds": "30", "reason": "drill"}
    page = await client.post("/act/breaker", data={**form, "csrf": csrf})
    assert page.status_code == 200
    assert "Open breaker vendor:openai for 30s" in page.text
    assert keys(redis_url, namespace) == set()


async def test_an_operator_clears_a_gone_mark_and_the_audit_trail_says_so(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    store = FleetBreakers(connect(redis_url, timeout_s=2), namespace=namespace)
    try:
        await store.record([Gone("oa", "retired")])
        csrf = await log_in(client, OPERATOR)
        assert "retired (gone)" in (await client.get("/?fragment=1")).text
        form = {"provider": "oa", "model": "retired", "reason": "deployment restored"}
        page = await client.post("/act/gone", data={**form, "csrf": csrf})
        assert "Clear the gone mark of oa|retired" in page.text
        done = await client.post("/act/gone", data={**form, "csrf": csrf, "confirmed": "yes"})
        assert done.status_code == 303
        state = await store.check([], [("oa", "retired")])
        assert state.cooldowns == {Pair("oa", "retired"): 0.0}
        trail = await AuditTrail(store.redis, namespace=namespace).latest()
        assert [(a.who, a.action, a.target, a.reason, a.outcome) for a in trail] == [
            ("alice", "breakers.clear_gone", "oa|retired", "deployment restored", outcome)
            for outcome in ("gone mark cleared", "requested")
        ]
    finally:
        await store.redis.aclose()


FORMS: dict[str, tuple[str, dict[str, str], str]] = {
    "scope": ("breaker", {"op": "close", "reason": "r"}, "scope"),
    "tenant": ("limits", {"daily": "1", "monthly": "2", "reason": "r"}, "tenant"),
}


@pytest.mark.parametrize("where", sorted(FORMS))
async def test_every_tricky_name_is_refused_before_redis(
    client: httpx.AsyncClient, redis_url: str, namespace: str, where: str
) -> None:
    kind, form, field = FORMS[where]
    csrf = await log_in(client, OPERATOR)
    for label, name in TRICKY.items():
        if where == "tenant" and label in ALLOWED["tenant id"]:
            continue  # "org:1234", "team/42": tenant ids as platforms write them
        data = {**form, field: name, "csrf": csrf, "confirmed": "yes"}
        response = await client.post(f"/act/{kind}", data=data)
        assert response.status_code == 400, f"{label}: {response.status_code}"
    assert keys(redis_url, namespace) == set()


@pytest.mark.parametrize("field", ["provider", "model"])
async def test_every_tricky_provider_or_model_id_is_refused_before_redis(
    client: httpx.AsyncClient, redis_url: str, namespace: str, field: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    for label, name in TRICKY.items():
        if label in ALLOWED["model id"]:
            continue  # "llama3:8b", "org/model": ids that may hold them
        data = {"provider": "oa", "model": "m", "reason": "r", field: name}
        response = await client.post("/act/gone", data={**data, "csrf": csrf, "confirmed": "yes"})
        assert response.status_code == 400, f"{label}: {response.status_code}"
    assert keys(redis_url, namespace) == set()


async def test_every_tricky_turn_id_is_refused(client: httpx.AsyncClient) -> None:
    await log_in(client, VIEWER)
    for label, name in TRICKY.items():
        if not name:
            continue  # no id shows the look-up form
        response = await client.get("/turns", params={"id": name})
        assert response.status_code == 400, label
        assert "turn id:" in response.text


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"daily": "-1"}, "daily: &#39;-1&#39; must not be negative"),
        ({"daily": "1e9"}, "daily:"),
        ({"monthly": "NaN"}, "monthly:"),
        ({"fallback_cap": "0x10"}, "fallback_cap:"),
        ({"overdraft": "1.0000001"}, "overdraft:"),
        ({"daily": "20", "monthly": "10"}, "a day&#39;s limit cannot exceed the month&#39;s"),
        ({"reason": " "}, "reason: required"),
        ({"reason": "x" * 1001}, "reason: at most 1000 characters"),
    ],
)
async def test_a_bad_amount_or_reason_names_its_field(
    client: httpx.AsyncClient, redis_url: str, namespace: str, fields: dict[str, str], names: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"tenant": "acme", "daily": "1", "monthly": "2", "reason": "r", **fields}
    response = await client.post("/act/limits", data={**form, "csrf": csrf, "confirmed": "yes"})
    assert response.status_code == 400
    assert names in response.text
    assert keys(redis_url, namespace) == set()


@pytest.mark.parametrize("seconds", ["inf", "nan", "-1", "0", "1e12", "soon"])
async def test_a_bad_duration_is_refused(client: httpx.AsyncClient, seconds: str) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"op": "open", "scope": "vendor:openai", "seconds": seconds, "reason": "r"}
    response = await client.post("/act/breaker", data={**form, "csrf": csrf, "confirmed": "yes"})
    assert response.status_code == 400
    assert "seconds:" in response.text


async def test_what_the_pages_show_is_escaped_and_holds_no_secret(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    csrf = await log_in(client, OPERATOR)
    reason = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    form = {"mode": "on", "reason": reason, "csrf": csrf, "confirmed": "yes"}
    assert (await client.post("/act/kill_switch", data=form)).status_code == 303
    pages: list[Any] = [(await client.get(p)).text for p in ("/", "/?fragment=1", "/tenants")]
    for html in pages:
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        for secret in (OPERATOR, VIEWER, KEY):
            assert secret not in html
    assert "&lt;script&gt;alert" in pages[1]


async def test_the_tenants_page_shows_each_tenants_share_and_queue(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    broker = redis.Redis.from_url(redis_url)
    try:
        for i in range(3):
            enqueue_sync(
                broker,
                namespace,
                tenant="busy-co",
                turn_id=f"busy-{i}",
                deadline_ms=60_000,
                input_tokens=1,
                message="m",
            )
        broker.hset(f"{{{namespace}}}:budget:shares", "capped-co", Share(4, None, None, 3).packed())
    finally:
        broker.close()
    await log_in(client, VIEWER)
    html = (await client.get("/tenants")).text
    loads = html[html.index('id="tenant-loads"') :]
    busy = loads[loads.index('data-tenant="busy-co"') :]
    assert "<td>3</td><td>0</td>" in busy[: busy.index("</tr>")]
    capped = loads[loads.index('data-tenant="capped-co"') :]
    row = capped[: capped.index("</tr>")]
    assert "own" in row
    assert "<td>4</td>" in row
    assert "<td>3</td>" in row


async def test_the_fallback_card_is_not_green_below_the_minimum_of_turns(
    client: httpx.AsyncClient,
) -> None:
    await log_in(client, VIEWER)
    live = (await client.get("/?fragment=1")).text
    assert 'class="card quiet" id="fallback"' in live
    assert 'data-enough="0"' in live


async def test_the_tenant_page_shows_its_spend_by_metadata_summing_to_its_spend(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    store = redis.asyncio.Redis.from_url(redis_url)
    try:
        ledger = Ledger(store, namespace=namespace)
        await ledger.set_limits("org:7", 10**9, 10**10)
        for n, agent in enumerate(["triage", "<b>planner</b>", "triage"]):
            tags = encode_labels(("agent",), {"agent": agent}, 100)
            await ledger.settle("org:7", f"c{n}", 1_000_000 * (n + 1), labels=tags)
        await ledger.settle("org:7", "anon", 500_000, labels=encode_labels(("agent",), {}, 100))
    finally:
        await store.aclose()
    await log_in(client, VIEWER)
    assert 'href="/tenant?id=org%3A7"' in (await client.get("/tenants")).text
    html = (await client.get("/tenant", params={"id": "org:7"})).text
    assert 'id="spent-month">$6.50' in html
    table = html[html.index('data-key="agent"') :]
    table = table[: table.index("</table>")]
    assert '<td>triage</td><td data-micros="4000000">$4.00</td>' in table
    assert "&lt;b&gt;planner&lt;/b&gt;" in table
    assert "<b>planner" not in table
    assert '<td>(no agent)</td><td data-micros="500000">' in table
    assert '<td>total</td><td data-micros="6500000">' in table
    assert (await client.get("/tenant", params={"id": "no tenant"})).status_code == 400
    unknown = (await client.get("/tenant", params={"id": "nobody"})).text
    assert 'data-status="unknown"' in unknown
