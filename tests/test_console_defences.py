"""The console against bad data and hostile clients (HTTP, Starlette's app in process, real Redis).

One unreadable stored item never costs a page; a token's logins end only its own
sessions; logins are throttled per address and per token and logged with the address;
tokens must look random; /login reads no body before its cookie, and no large one;
text that would reorder itself is written out; forwarded headers count only from
configured proxies; the Host must be a configured name; the `relevo` commands write
the audit trail too.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis
from structlog.testing import capture_logs

from tests.consolekit import console_process, csrf_of, http_console, log_in
from tests.test_cli_surface import redis_only, relevo
from worker.console.auth import TOKENS_ENV, Principal, Role, Tokens, load_tokens
from worker.console.gate import exposure_warnings
from worker.errors import ConfigError
from worker.fleet.audit import AuditTrail
from worker.fleet.turnstore import TurnKeys
from worker.settings import ConsoleSettings
from worker.types import Status, TurnResult

OPERATOR = "Wq3v-operator-9JxT2mLp7RkZ4sNd"
VIEWER = "b8Hn-viewer-Xe5cQ1fYt6GuVa0Pi"
TOKENS = Tokens(
    ((Principal("alice", Role.OPERATOR), OPERATOR), (Principal("bob", Role.VIEWER), VIEWER))
)
BIDI = "all clear \u202eFFO ton od\u202c"


@pytest.fixture
async def client(console_toml: Path, redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with http_console(console_toml, redis_url, TOKENS) as http:
        yield http


def _store(redis_url: str, namespace: str, turn_id: str, raw: bytes, chunks: list[bytes]) -> None:
    keys = TurnKeys(namespace)
    with redis.Redis.from_url(redis_url) as r:
        r.set(keys.result(turn_id), raw, ex=600)
        r.zadd(keys.recent, {turn_id: int(time.time() * 1000)})
        for chunk in chunks:
            r.xadd(keys.chunks(turn_id), {"text": chunk})


def _result(turn_id: str, tenant: str = "acme") -> TurnResult:
    return TurnResult(
        turn_id=turn_id, tenant_id=tenant, status=Status.DEGRADED, primary_model="m", step=1
    )


async def test_one_unreadable_stored_item_costs_no_page(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    newer = _result("t-newer").model_dump(mode="json") | {"schema_version": 2}
    _store(redis_url, namespace, "t-newer", json.dumps(newer).encode(), [])
    _store(redis_url, namespace, "t-corrupt", b"{not json", [])
    _store(
        redis_url,
        namespace,
        "t-good",
        _result("t-good").model_dump_json().encode(),
        [b"caf\xc3", b"\xa9 \xff ok"],
    )
    await log_in(client, VIEWER)
    for path in ("/", "/?fragment=1", "/tenants"):
        page = await client.get(path)
        assert page.status_code == 200, path
    assert "2 stored result(s)" in (await client.get("/?fragment=1")).text
    for turn_id in ("t-newer", "t-corrupt"):
        page = await client.get("/turns", params={"id": turn_id})
        assert page.status_code == 200
        assert 'data-status="unreadable"' in page.text
    page = await client.get("/turns", params={"id": "t-good"})
    assert page.status_code == 200
    assert "caf\ufffd\ufffd \ufffd ok" in page.text


async def test_a_hostile_result_makes_no_huge_turn_page_and_the_page_says_what_it_cut(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    """2,000 attempts with 2,000-character details and 3 MB of streamed text: the page
    shows 100 attempts, each field up to 1,000 characters, 256 KiB of the text, and says
    so; a result over 4 MiB is not read at all."""
    attempt = {
        "model": "m",
        "provider": "p",
        "provider_model": "m",
        "outcome": "error",
        "detail": "d" * 2000,
    }
    hostile = _result("t-huge").model_dump(mode="json") | {"attempts": [attempt] * 2000}
    chunks = [b"x" * 100_000] * 30
    _store(redis_url, namespace, "t-huge", json.dumps(hostile).encode(), chunks)
    _store(redis_url, namespace, "t-huger", b'{"error": "' + b"e" * (5 * 2**20) + b'"}', [])
    await log_in(client, VIEWER)
    page = await client.get("/turns", params={"id": "t-huge"})
    assert page.status_code == 200
    assert len(page.content) < 600_000
    assert page.text.count('data-outcome="error"') == 100
    assert "1,900 more not shown" in page.text
    assert "1,000 more characters not shown" in page.text
    assert "The first 262,144 of 3,000,000 characters shown" in page.text
    page = await client.get("/turns", params={"id": "t-huger"})
    assert page.status_code == 200
    assert len(page.content) < 50_000
    assert 'data-status="too-large"' in page.text
    assert "5,242,893 bytes: over the 4,194,304 bytes this page reads" in page.text


async def test_a_token_s_logins_end_only_its_own_sessions(
    console_toml: Path, redis_url: str
) -> None:
    async with http_console(console_toml, redis_url, TOKENS, sessions_per_token=3) as operator:
        await log_in(operator, OPERATOR)
        transport = operator._transport  # the same application, another browser
        async with httpx.AsyncClient(transport=transport, base_url=str(operator.base_url)) as first:
            await log_in(first, VIEWER)
            for _ in range(10):
                async with httpx.AsyncClient(
                    transport=transport, base_url=str(operator.base_url)
                ) as other:
                    await log_in(other, VIEWER)
            assert (await operator.get("/")).status_code == 200, (
                "another token's logins end no session of the operator"
            )
            assert (await first.get("/")).status_code == 303, (
                "the viewer's own oldest session ended"
            )


async def test_logins_are_throttled_per_address_and_per_token_and_logged_with_the_address(
    console_toml: Path, redis_url: str
) -> None:
    async with http_console(
        console_toml, redis_url, TOKENS, logins_per_minute=3, trusted_proxies=("127.0.0.1",)
    ) as http:

        async def attempt(address: str, token: str) -> int:
            http.cookies.clear()  # each attempt a browser of its own
            nonce = csrf_of((await http.get("/login")).text)
            form = {"csrf": nonce, "token": token}
            response = await http.post("/login", data=form, headers={"x-forwarded-for": address})
            return response.status_code

        with capture_logs() as logs:
            assert [await attempt("198.51.100.7", "wrong-" + OPERATOR) for _ in range(4)] == [
                401,
                401,
                401,
                429,
            ]
        refused = [e for e in logs if e["event"] == "console.login_refused"]
        assert refused
        assert all(e["address"] == "198.51.100.7" for e in refused)
        assert await attempt("198.51.100.8", OPERATOR) == 303, "another address is not throttled"
        # One token from ever new addresses: its own limit.
        codes = [await attempt(f"203.0.113.{i}", OPERATOR) for i in range(3)]
        assert codes == [303, 303, 429]


@pytest.mark.parametrize(
    ("token", "line"),
    [("a" * 40, 1), ("ab" * 20, 2), ("Password123Password123Password123", 1)],
)
def test_a_token_that_is_easy_to_guess_is_refused_naming_its_line(
    monkeypatch: pytest.MonkeyPatch, token: str, line: int
) -> None:
    lines = (
        [f"carol viewer {token}"]
        if line == 1
        else [f"alice operator {OPERATOR}", f"carol viewer {token}"]
    )
    monkeypatch.setenv(TOKENS_ENV, ";".join(lines))
    with pytest.raises(
        ConfigError, match=f"line {line}: token \\(carol\\) is too easy to guess"
    ) as caught:
        load_tokens(None)
    assert token not in str(caught.value)


def test_two_lines_with_one_token_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKENS_ENV, f"alice operator {OPERATOR};carol viewer {OPERATOR}")
    with pytest.raises(ConfigError, match=r"line 2 repeats the token of .*line 1") as caught:
        load_tokens(None)
    assert OPERATOR not in str(caught.value)


async def test_login_reads_no_body_without_its_cookie_and_no_large_one(
    client: httpx.AsyncClient,
) -> None:
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1000):
            sent += 1
            yield b"x" * 100_000

    headers = {"content-type": "application/x-www-form-urlencoded"}
    response = await client.post("/login", content=body(), headers=headers)
    assert response.status_code == 403
    assert sent <= 1, "the body was read before the cookie was checked"
    await client.get("/login")  # the login cookie
    sent = 0
    big = await client.post("/login", content=body(), headers=headers)
    assert big.status_code == 413
    assert sent <= 2
    declared = await client.post(
        "/login", content=b"x", headers={**headers, "content-length": "100000000"}
    )
    assert declared.status_code == 413
    files = await client.post("/login", files={"token": ("t.txt", b"x" * 1000)})
    assert files.status_code == 415


async def test_text_that_reorders_itself_is_written_out(
    client: httpx.AsyncClient, redis_url: str, namespace: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"mode": "on", "reason": BIDI, "csrf": csrf, "confirmed": "yes"}
    assert (await client.post("/act/kill_switch", data=form)).status_code == 303
    _store(
        redis_url,
        namespace,
        "t-bidi",
        _result("t-bidi").model_dump_json().encode(),
        [BIDI.encode()],
    )
    pages = [(await client.get("/?fragment=1")).text, (await client.get("/turns?id=t-bidi")).text]
    for html in pages:
        assert "\u202e" not in html
        assert "\u202c" not in html
        assert "all clear [U+202E]FFO ton od[U+202C]" in html


async def test_behind_a_trusted_tls_proxy_logins_work_and_cookies_are_secure(
    console_toml: Path, redis_url: str
) -> None:
    proxied = {
        "x-forwarded-proto": "https",
        "x-forwarded-host": "console.example.com",
        "x-forwarded-for": "192.0.2.10",
        "origin": "https://console.example.com",
    }
    settings = {"hosts": ("console.example.com",), "trusted_proxies": ("10.0.0.0/8",)}
    async with http_console(
        console_toml, redis_url, TOKENS, peer=("10.1.2.3", 40000), **settings
    ) as http:
        page = await http.get("/login", headers=proxied)
        assert page.status_code == 200
        assert "secure" in page.headers["set-cookie"].lower()
        form = {"csrf": csrf_of(page.text), "token": OPERATOR}
        # httpx keeps a Secure cookie from plain http://testserver: send it as the browser would.
        cookie = {"cookie": f"relevo_login={page.cookies['relevo_login']}"}
        with capture_logs() as logs:
            done = await http.post("/login", data=form, headers=proxied | cookie)
        assert done.status_code == 303, done.text
        assert "secure" in done.headers["set-cookie"].lower()
        assert [e["address"] for e in logs if e["event"] == "console.login"] == ["192.0.2.10"]
    # The same headers from an address that is not a configured proxy count for nothing.
    async with http_console(
        console_toml, redis_url, TOKENS, peer=("192.0.2.99", 40000), **settings
    ) as http:
        assert (await http.get("/login", headers=proxied)).status_code == 421


def test_the_served_console_ignores_forwarded_headers_from_a_proxy_not_configured(
    console_toml: Path,
) -> None:
    """`relevo console` over TCP from loopback, no `trusted_proxies`, 3 logins a minute: a
    client forging a new X-Forwarded-For on every wrong token is still throttled as one
    address, and X-Forwarded-Proto: https sets no Secure cookie (only relevo decides)."""
    console_toml.write_text(console_toml.read_text() + "\n[console]\nlogins_per_minute = 3\n")
    env = {TOKENS_ENV: f"alice operator {OPERATOR};bob viewer {VIEWER}"}
    with console_process(console_toml, env) as url:
        statuses = []
        for attempt in range(8):
            forged = {"x-forwarded-for": f"6.6.6.{attempt}", "x-forwarded-proto": "https"}
            with httpx.Client(base_url=url, headers=forged) as browser:
                page = browser.get("/login")
                assert "secure" not in page.headers["set-cookie"].lower()
                form = {"csrf": csrf_of(page.text), "token": f"wrong-{attempt}-{OPERATOR}"}
                statuses.append(browser.post("/login", data=form).status_code)
    assert statuses[:3] == [401] * 3
    assert statuses[-1] == 429, statuses  # one bucket refills a token in 20 s


async def test_a_host_not_configured_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.get("/login", headers={"host": "attacker.example"})
    assert response.status_code == 421
    assert "[console] hosts" in response.text
    assert (await client.get("/login")).status_code == 200


def test_exposure_is_warned_about_at_start() -> None:
    safe = ConsoleSettings(viewer_redis_url="redis://viewer:pw@127.0.0.1:6379/0")
    assert exposure_warnings(safe) == []
    (plain,) = exposure_warnings(safe.model_copy(update={"host": "0.0.0.0"}))
    assert "plain HTTP on 0.0.0.0" in plain
    (writer,) = exposure_warnings(ConsoleSettings())
    assert "viewer_redis_url" in writer


def test_the_commands_write_the_audit_trail(redis_url: str, namespace: str, tmp_path: Path) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    assert (
        relevo("kill-switch", "on", "--config", config, "--who", "carol", "--reason", "drill") == 0
    )
    assert relevo("kill-switch", "off", "--config", config, "--who", "carol") == 0
    assert (
        relevo(
            "budgets",
            "set",
            "acme",
            "--daily",
            "1",
            "--monthly",
            "2",
            "--config",
            config,
            "--who",
            "carol",
        )
        == 0
    )

    async def trail(client: redis.asyncio.Redis) -> list[tuple[str, str, str, str]]:
        entries = await AuditTrail(client, namespace=namespace).latest()
        return [(e.who, e.role, e.action, e.outcome) for e in reversed(entries)]

    from tests.test_cli_surface import on_redis

    assert on_redis(redis_url, trail) == [
        ("carol", "cli", "kill_switch.on", "requested"),
        ("carol", "cli", "kill_switch.on", "kill switch ON by carol: drill"),
        ("carol", "cli", "kill_switch.off", "requested"),
        ("carol", "cli", "kill_switch.off", "kill switch OFF"),
        ("carol", "cli", "budgets.set", "requested"),
        ("carol", "cli", "budgets.set", "acme: daily $1.00, monthly $2.00"),
    ]
