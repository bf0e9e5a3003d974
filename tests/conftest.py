"""Shared fixtures: a real Redis server (never skipped in CI), a key namespace, the simulator.

Two tiers (see tests/README.md): every test that gets a real Redis server, through
`redis_url` or a private redis-server fixture, is marked `redis` here at collection.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import pytest
import redis
import structlog

from tests import threadsafe_ast
from tests.netkit import free_port

if TYPE_CHECKING:
    from tests.fleetkit import Workers
    from worker.fleet.fairqueue import FairQueue
    from worker.simulator import Simulator

threadsafe_ast.install()  # before any test or thread parses (see the module)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DEFAULT_REDIS_URL = os.environ.get("RELEVO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

# The simulators and servers the tests start are on loopback: a proxy set for this
# machine's own traffic must not carry the workers' calls to them.
for _name in ("NO_PROXY", "no_proxy"):
    os.environ[_name] = ",".join(filter(None, (os.environ.get(_name), "127.0.0.1,localhost")))


def _answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def skip_unless_ci(reason: str) -> None:
    """Skip locally when a tool the test needs is missing; in CI that is a failure."""
    if IN_CI:
        pytest.fail(f"CI must run this test: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A reachable Redis server: the machine's own, else one started for the session.

    Outside CI the tests that need it skip when no server can be had; in CI they fail.
    """
    if _answers(DEFAULT_REDIS_URL):
        yield DEFAULT_REDIS_URL
        return
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no Redis server reachable and no redis-server binary to start")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers(url):
            if time.monotonic() > deadline:
                pytest.fail(f"started redis-server on port {port} but it never answered")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def private_redis() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own on a free port (URL, process): to stop, kill,
    restart, or stall (`DEBUG SLEEP`, taken from loopback)."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary to start a private server")
    port = free_port()
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    args += ["--enable-debug-command", "local"]  # DEBUG SLEEP: a stall
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers(url):
            assert time.monotonic() < deadline, "the private redis-server never answered"
            time.sleep(0.05)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)


# Fixtures that hand a test a real Redis server: the session's, or a redis-server of the
# module's own (ACL users, TLS, one to stop and kill). Every Celery or `relevo worker`
# process a test starts on Redis gets its URL from one of these; the embedded demo and
# the stub fleet run their Celery worker on fakeredis instead (and are marked `slow`).
REDIS_FIXTURES = frozenset(
    {
        "redis_url",  # here
        "acl_server",  # test_deploy.py: deploy/redis/start.sh on the rendered ACL file
        "acl_redis",  # here: users that Redis refuses (a wrong password, no Lua)
        "acl",  # test_security_redis.py: tests.test_security_kit.private_redis
        "tls_server",  # test_security_redis.py: the same, over TLS
        "private_redis",  # here: one to hang, kill and restart mid-run
        "sentinel_topology",  # test_sentinel.py: a primary, a replica, three sentinels
        "redis_cluster",  # here: three primaries of a Redis Cluster
    }
)


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[int]:
    """A private redis-server: user `full` may do anything, `noscripts` may not run Lua,
    `elsewhere` has no key but its own (`elsewhere:*`)."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary")
    port = free_port()
    proc = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--save", "", "--appendonly", "no"),
            *("--user", "default", "off"),
            *("--user", "full", "on", ">secret", "~*", "+@all"),
            *("--user", "noscripts", "on", ">secret", "~*", "+@all", "-@scripting"),
            *("--user", "elsewhere", "on", ">secret", "~elsewhere:*", "+@all"),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                redis.Redis(port=port, username="full", password="secret").ping()
                break
            except redis.RedisError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis Cluster of three primaries for the session (tests.clusterkit): its URL."""
    from tests.clusterkit import Cluster

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        skip_unless_ci("no redis-server and redis-cli to start a Redis Cluster")
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    """structlog as a test finds it unconfigured, but tracebacks printed plain: its default
    renders them with rich and every frame's locals, a Redis URL's password among them."""
    processors = list(structlog.get_config()["processors"])
    plain = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    structlog.configure(processors=[*processors[:-1], plain])


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `redis` every test that needs a Redis server, through any chain of fixtures.

    `fixturenames` is the whole closure, so a test asking for a fixture that asks for
    `redis_url` is marked too. A fixture reached only by `request.getfixturevalue` is not
    in it: mark such a parameter by hand (`pytest.param(..., marks=pytest.mark.redis)`).
    """
    for item in items:
        if REDIS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """relevo's HTTP client as the chain makes it (the adapters' tests speak through it)."""
    from worker.adapters import make_client

    async with make_client(max_connections=50) as http:
        yield http


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    """The simulated providers, one running server per test module; tests reset it."""
    from worker.simulator import Simulator

    with Simulator() as simulator:
        yield simulator


@pytest.fixture
def fresh_sim(sim: Simulator) -> Simulator:
    """The module's simulator with no faults, counts or requests left by an earlier test.

    A module whose every test wants that says so once:
    `pytestmark = pytest.mark.usefixtures("fresh_sim")`.
    """
    sim.reset()
    return sim


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """`RELEVO_TEST_KEY` set for this test: the key every provider in `tests.chainkit`'s
    configurations reads, for the turns this process runs itself."""
    from tests.chainkit import KEY

    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    return KEY


class WorkerToml(Protocol):
    """Writes a test's worker configuration file and returns its path."""

    def __call__(self, sections: str = "", **config: Any) -> Path: ...


@pytest.fixture
def worker_toml(sim: Simulator, redis_url: str, namespace: str, tmp_path: Path) -> WorkerToml:
    """`tests.chainkit.write_worker_config` on the module's simulator and the test's namespace
    (and queue) on the session's Redis, to `chain.toml` in the test's directory: a test
    passes its own sections (`{namespace}` filled in) and `worker_config`'s other options."""
    from tests.chainkit import write_worker_config

    def write(sections: str = "", **config: Any) -> Path:
        path = tmp_path / "chain.toml"
        return write_worker_config(
            path, sim=sim.url, redis_url=redis_url, namespace=namespace, sections=sections, **config
        )

    return write


@pytest.fixture
def fleet_toml(worker_toml: WorkerToml) -> Path:
    """The fleet tests' configuration: a lost turn back soon (`tests.chainkit.FLEET_SECTIONS`)."""
    from tests.chainkit import FLEET_SECTIONS

    return worker_toml(FLEET_SECTIONS)


@pytest.fixture
def console_toml(redis_url: str, namespace: str, tmp_path: Path) -> Path:
    """A fleet's configuration for the console alone (`tests.consolekit.console_config`)."""
    from tests.consolekit import console_config

    return console_config(tmp_path, redis_url, namespace)


@pytest.fixture(scope="module")
def workers() -> Iterator[Workers]:
    """Four fleet processes (`tests.fleetkit.Workers`) for the module: spawning costs about
    a second each. They inherit the environment: chainkit's providers read their key there."""
    from tests.chainkit import KEY
    from tests.fleetkit import Workers

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELEVO_TEST_KEY", KEY)
        pool = Workers(4)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def namespace() -> str:
    """A key prefix no other test uses, so tests share one Redis without flushing it."""
    return f"relevo-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sync_client(redis_url: str) -> Iterator[redis.Redis]:
    """A blocking client on the session's Redis (as the broker channel's is)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
async def fair(redis_url: str, namespace: str) -> AsyncIterator[FairQueue]:
    """A fair queue of the test's own, its broker's queue `<namespace>:q`; its keys are
    deleted afterwards."""
    from redis.asyncio import Redis

    from worker.fleet.fairqueue import FairQueue

    client = Redis.from_url(redis_url)
    yield FairQueue(client, namespace=namespace, queue=f"{namespace}:q")
    keys = [k async for k in client.scan_iter(match=f"{{{namespace}}}:*", count=1000)]
    await client.delete(f"{namespace}:q", *keys)
    await client.aclose()


@pytest.fixture(autouse=True)
def _structlog_restored() -> Iterator[None]:
    """A test that points structlog at its captured output must not leave it there, nor
    the standard library's root logger (`configure_logging` routes it to that output)."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
