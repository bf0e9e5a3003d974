"""Shared fixtures: a real Redis server (never skipped in CI) and a unique key namespace."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import structlog

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DEFAULT_REDIS_URL = os.environ.get("RELEVO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    port = _free_port()
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
def namespace() -> str:
    """A key prefix no other test uses, so tests share one Redis without flushing it."""
    return f"relevo-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _structlog_restored() -> Iterator[None]:
    """A test that points structlog at its captured output must not leave it there."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
