"""Points 5, 2 and 4 on a private redis-server: ACL users, TLS, namespaces, the result backend.

Each test module starts its own `redis-server` (password-only ACL users, the
`default` user off; TLS with a throwaway CA where the server supports it), so
every key and every command it sees is ours to inspect.
"""

from __future__ import annotations

import codecs
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio.connection import SSLConnection

from breakers.connection import HiredisPackSSLConnection, connect
from tests.chainkit import settings as chain_settings
from tests.conftest import skip_unless_ci
from tests.test_security_kit import (
    KEY,
    KEY_ENV,
    PASSWORD,
    WORKER_PASSWORD,
    WORKER_USER,
    PrivateRedis,
    celery_worker,
    limited_config,
    make_tls,
    private_redis,
    tls_supported,
)
from worker.cli.main import main
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.runner import TurnRunner
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, TurnRequest

# Valid, but each close to a rule's edge: a turn for each must stay inside the namespace.
EDGE_TENANTS = ["_", "0", "a.b-c_d", "t..t", "T" * 64, "x-", "acme.eu"]
# Tenant ids as platforms write them: ':', '/', '@' and '+' inside the tenant's hash tag.
EDGE_TENANTS += ["org:1234", "team/42", "user+eu@example.com", "arn:aws:iam::1:root"]


@pytest.fixture(scope="module")
def acl() -> Iterator[PrivateRedis]:
    with private_redis() as server:
        yield server


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch, sim: Simulator) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()


def settings_on(url: str, sim: Simulator, namespace: str, timeout_s: float = 2.0) -> Settings:
    return chain_settings(
        sim.url,
        ("openai/alpha", "anthropic/beta"),
        redis={"url": url, "namespace": namespace, "timeout_s": timeout_s},
    )


def request(tenant: str = "acme") -> TurnRequest:
    return TurnRequest(
        tenant_id=tenant, messages=(Message(role="user", content="hi"),), deadline_s=10
    )


# --- every key a turn touches, read off MONITOR -----------------------------------------

_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """Every command the server runs (Lua scripts' own calls too), with its exact arguments."""

    def __init__(self, server: PrivateRedis) -> None:
        self.server = server
        self.commands: list[list[bytes]] = []
        self._client = redis.Redis.from_url(server.url())  # no read timeout: it waits for commands
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        with self.server.client() as client:
            client.echo("monitor-stop")
        self._thread.join(10)
        self._client.close()

    def _listen(self) -> None:
        with self._client.monitor() as monitor:  # type: ignore[no-untyped-call]
            self._ready.set()
            while True:
                raw = monitor.connection.read_response()
                assert isinstance(raw, bytes)
                if raw == b"OK":
                    continue
                args = [codecs.escape_decode(a)[0] for a in _ARG.findall(raw)]
                if [a.lower() for a in args[:2]] == [b"echo", b"monitor-stop"]:
                    return
                self.commands.append(args)

    def keys(self) -> set[bytes]:
        """The keys of every command seen, as the server itself finds them."""
        found: set[bytes] = set()
        with self.server.client() as client:
            for args in self.commands:
                try:
                    keys = client.command_getkeys(*args)
                    found.update(k if isinstance(k, bytes) else k.encode() for k in keys)
                except redis.ResponseError:
                    continue  # a command without keys (PING, SCRIPT LOAD, CLIENT...)
        return found


def test_turns_for_edge_tenants_touch_only_keys_of_their_namespace(
    acl: PrivateRedis, sim: Simulator, namespace: str
) -> None:
    settings = settings_on(acl.url(), sim, namespace)
    sim.set_faults(
        "alpha", Fault(status=503, times=2), Fault(status=429, headers={"retry-after": "1"})
    )
    runner = TurnRunner(settings)
    try:
        with Monitor(acl) as monitor:
            results = [
                runner.answer(request(tenant).model_dump(mode="json")) for tenant in EDGE_TENANTS
            ]
            with acl.client() as client:
                client.get("outside-probe")  # the harness must see a key outside the namespace
    finally:
        runner.close()
    assert [r["status"] for r in results] == ["ok"] * len(EDGE_TENANTS)
    assert any(r["step"] == 1 for r in results)  # fallbacks wrote breaker and cooldown state
    inside = (f"{{{namespace}}}:".encode(), f"{{{namespace}/".encode(), f"{namespace}:".encode())
    touched = monitor.keys()
    assert len(touched) > 3 * len(EDGE_TENANTS)
    assert {k for k in touched if not k.startswith(inside)} == {b"outside-probe"}
    with acl.client() as client:
        stored = set(client.scan_iter(count=1000))
    assert stored
    assert {k for k in stored if not k.startswith(inside)} == set()
    tenants = {t.encode() for t in EDGE_TENANTS}
    tenant_tag = f"{{{namespace}/".encode()
    budget_keys = [k for k in stored if k.startswith(tenant_tag)]
    assert budget_keys
    assert {k[len(tenant_tag) :].split(b"}")[0] for k in budget_keys} <= tenants


# --- ACL users and passwords ------------------------------------------------------------


def test_the_guard_runs_turns_as_an_acl_user(
    acl: PrivateRedis, sim: Simulator, namespace: str
) -> None:
    runner = TurnRunner(settings_on(acl.url(WORKER_USER, WORKER_PASSWORD), sim, namespace))
    try:
        results = [runner.answer(request(t).model_dump(mode="json")) for t in ("acme", "team/42")]
    finally:
        runner.close()
    assert [r["status"] for r in results] == ["ok", "ok"]
    with acl.client() as client:
        for result in results:
            assert client.exists(f"{{{namespace}}}:turn:{result['turn_id']}:result")
        entries = client.acl_log()
    assert not [e for e in entries if e.get("username") == WORKER_USER], entries  # no refusal


def test_a_wrong_password_is_a_clear_error_that_does_not_show_the_password(
    acl: PrivateRedis, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RELEVO_REDIS__URL", acl.url(password="not-the-password"))
    assert main(["kill-switch", "status"]) == 6
    out, err = capsys.readouterr()
    assert re.search(r"user and password|AuthenticationError", err), err
    assert "not-the-password" not in err + out
    assert "relevo:***@" in err
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        redis.Redis.from_url(acl.url(password="not-the-password")).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(f"redis://127.0.0.1:{acl.port}/0").ping()  # no user at all


# --- Celery over the ACL user: the result backend never holds the key --------------------


def all_values(client: redis.Redis) -> Iterator[tuple[bytes, object]]:
    """Every key with its whole value, whatever its type."""
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        value: object
        if kind == b"string":
            value = client.get(key)
        elif kind == b"hash":
            value = client.hgetall(key)
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"set":
            value = client.smembers(key)
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:
            value = client.xrange(key)
        yield key, value


@pytest.mark.slow
def test_a_celery_round_trip_as_an_acl_user_stores_no_echoed_key(
    acl: PrivateRedis, sim: Simulator, namespace: str, tmp_path: Path
) -> None:
    url = acl.url(WORKER_USER, WORKER_PASSWORD, db=1)
    config = limited_config(
        tmp_path / "chain.toml", redis_url=url, namespace=namespace, sim=sim.url
    )
    settings = load_settings(config)
    for model in ("alpha", "beta"):
        sim.set_faults(model, Fault(status=401, echo_key=True))
    with celery_worker(config, settings.worker.queue):
        app = make_app(settings)
        handle = enqueue_turn(request(), app=app, limits=settings.limits)
        result = handle.get(timeout_s=60)
    assert result.status == "failed"
    assert result.attempts[0].error_class == "auth_failed"
    assert sim.calls("alpha") == 1
    with redis.Redis.from_url(url) as client:
        meta = client.get(f"{{{namespace}}}:turn:{handle.turn_id}:result")
        assert meta is not None
        assert b"auth_failed" in meta
        assert not client.exists(f"celery-task-meta-{handle.turn_id}")  # kept once
        dump = repr(list(all_values(client)))
    assert KEY not in dump
    assert KEY not in meta.decode()
    assert WORKER_PASSWORD not in dump


# --- TLS: rediss:// for the shared store, the broker and the result backend ----------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    if not tls_supported():
        skip_unless_ci("this redis-server is built without TLS")
    with private_redis(make_tls(tmp_path_factory.mktemp("tls"))) as server:
        yield server


def test_the_guard_runs_turns_over_tls(
    tls_server: PrivateRedis, sim: Simulator, namespace: str
) -> None:
    url = tls_server.url()
    assert url.startswith("rediss://")
    assert "ssl_cert_reqs=required" in url
    runner = TurnRunner(settings_on(url, sim, namespace))
    try:
        result = runner.answer(request().model_dump(mode="json"))
    finally:
        runner.close()
    assert result["status"] == "ok"
    with tls_server.client() as client:
        assert client.exists(f"{{{namespace}}}:turn:{result['turn_id']}:result")
    plain = f"redis://relevo:{PASSWORD}@127.0.0.1:{tls_server.port}/0"
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(plain, socket_timeout=2).ping()  # no plain text on the TLS port


async def test_the_control_path_client_speaks_tls_and_packs_with_hiredis(
    tls_server: PrivateRedis,
) -> None:
    # Naming a connection class for the pool replaces redis-py's own choice by scheme:
    # the TLS options must reach a TLS connection, on every redis-py the range allows.
    url = tls_server.url()
    client = connect(url, timeout_s=2.0)
    try:
        assert await client.set("relevo-tls-probe", "1", ex=5)
        assert await client.get("relevo-tls-probe") == b"1"
        connection = await client.connection_pool.get_connection()
        try:
            assert isinstance(connection, SSLConnection)
            assert isinstance(connection, HiredisPackSSLConnection)
        finally:
            await client.connection_pool.release(connection)
    finally:
        await client.aclose()


@pytest.fixture
def unix_socket_redis(tmp_path: Path) -> Iterator[Path]:
    """A private redis-server listening on a Unix socket only."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary to start a private server")
    socket_path = tmp_path / "redis.sock"
    args = [binary, "--port", "0", "--unixsocket", str(socket_path), "--save", ""]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The socket file exists from bind(), a moment before the server listens on it.
        deadline = time.monotonic() + 10
        while not _answers_on(socket_path):
            assert time.monotonic() < deadline, "the private redis-server never answered"
            time.sleep(0.05)
        yield socket_path
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _answers_on(socket_path: Path) -> bool:
    try:
        with redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1) as client:
            return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False


async def test_the_control_path_client_speaks_over_a_unix_socket(unix_socket_redis: Path) -> None:
    client = connect(f"unix://{unix_socket_redis}", timeout_s=2.0)
    try:
        assert await client.ping()
        assert await client.eval("return ARGV[1]", 0, "packed") == b"packed"
    finally:
        await client.aclose()


def test_tls_refuses_a_server_the_ca_did_not_sign(tls_server: PrivateRedis, tmp_path: Path) -> None:
    other = make_tls(tmp_path / "other")
    url = tls_server.url().replace(str(tls_server.tls.ca if tls_server.tls else ""), str(other.ca))
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis.Redis.from_url(url, socket_timeout=2).ping()


@pytest.mark.slow
def test_a_celery_round_trip_over_tls(
    tls_server: PrivateRedis, sim: Simulator, namespace: str, tmp_path: Path
) -> None:
    url = tls_server.url(db=1)
    config = limited_config(
        tmp_path / "chain.toml", redis_url=url, namespace=namespace, sim=sim.url
    )
    settings = load_settings(config)
    with celery_worker(config, settings.worker.queue):
        app = make_app(settings)
        result = enqueue_turn(request(), app=app, limits=settings.limits).get(timeout_s=60)
    assert result.status == "ok", (result.reason, result.error)
    with redis.Redis.from_url(url) as client:
        assert client.exists(f"{{{namespace}}}:turn:{result.turn_id}:result")
        assert not client.exists(f"celery-task-meta-{result.turn_id}")
