"""Helpers for the security tests (this module holds no tests).

A private `redis-server` with ACL users (and TLS when asked), a throwaway CA
and server certificate made with `openssl`, the chain configuration the
workers read, and real `celery worker` processes.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.chainkit import write_worker_config
from tests.conftest import skip_unless_ci
from tests.netkit import free_port
from tests.workerkit import celery_worker_process, stop

# Shaped like no known key prefix, so only exact-key scrubbing can hide it.
KEY = "9d2c4e6f8a0b1c3d5e7f9a1b3c5d7e9f"
KEY_ENV = "RELEVO_SECURITY_TEST_KEY"
USER, PASSWORD = "relevo", "s3cret-relevo-pass"
# The worker user of docs/security.md: every key, no admin or dangerous commands.
WORKER_USER, WORKER_PASSWORD = "relevo-worker", "w0rker-pass"

SECTIONS = """
[retry]
base_delay_s = 0.01

[worker]
queue = "{namespace}"
visibility_timeout_s = 30
restore_interval_s = 1

[budgets]
hold_ttl_s = 10

[limits]
max_request_bytes = {max_bytes}
max_messages = 50
max_tools = 8
max_message_chars = 4096
"""


def limited_config(path: Path, *, max_bytes: int = 16_384, **config: Any) -> Path:
    """A chain of two simulated models whose API key comes from `KEY_ENV`, its requests
    limited (`[limits]`, at most `max_bytes`); `config`: `write_worker_config`'s `sim`,
    `redis_url` and `namespace`."""
    fill = {"max_bytes": max_bytes}
    return write_worker_config(path, sections=SECTIONS, key_env=KEY_ENV, fill=fill, **config)


@dataclass(frozen=True)
class Tls:
    """A CA and a server certificate for 127.0.0.1, made for one test session."""

    ca: Path
    cert: Path
    key: Path


def make_tls(where: Path) -> Tls:
    """A throwaway CA and a server certificate signed by it (SAN IP:127.0.0.1)."""
    if shutil.which("openssl") is None:
        skip_unless_ci("no openssl to make a test CA")
    where.mkdir(parents=True, exist_ok=True)
    tls = Tls(where / "ca.pem", where / "server.pem", where / "server.key")
    ext = where / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ca_key, csr = where / "ca.key", where / "server.csr"
    steps = [
        f"req -x509 -newkey rsa:2048 -nodes -keyout {ca_key} -out {tls.ca} -days 1"
        " -subj /CN=relevo-test-ca",
        f"req -newkey rsa:2048 -nodes -keyout {tls.key} -out {csr} -subj /CN=127.0.0.1",
        f"x509 -req -in {csr} -CA {tls.ca} -CAkey {ca_key} -CAcreateserial -out {tls.cert}"
        f" -days 1 -extfile {ext}",
    ]
    for step in steps:
        subprocess.run(["openssl", *step.split()], check=True, capture_output=True)
    return tls


def tls_supported() -> bool:
    """Whether this machine's redis-server was built with TLS (Debian's is)."""
    binary = shutil.which("redis-server")
    if binary is None:
        return False
    found = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    return "libssl" in found.stdout


@dataclass
class PrivateRedis:
    """A redis-server of our own: only the users below can log in (`default` is off)."""

    port: int
    tls: Tls | None
    proc: subprocess.Popen[bytes]

    def url(self, user: str = USER, password: str = PASSWORD, db: int = 0) -> str:
        if self.tls is None:
            return f"redis://{user}:{password}@127.0.0.1:{self.port}/{db}"
        query = f"ssl_cert_reqs=required&ssl_ca_certs={self.tls.ca}"
        return f"rediss://{user}:{password}@127.0.0.1:{self.port}/{db}?{query}"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url(), socket_timeout=5)


ACL_USERS = (
    ("default", "off"),
    (USER, "on", f">{PASSWORD}", "~*", "&*", "+@all"),
    (WORKER_USER, "on", f">{WORKER_PASSWORD}", "~*", "&*", "+@all", "-@admin", "-@dangerous"),
)


@contextmanager
def private_redis(tls: Tls | None = None) -> Iterator[PrivateRedis]:
    """Start a private redis-server on a free port with ACL users; stop it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary to start a private server")
    port = free_port()
    args = [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    if tls is None:
        args += ["--port", str(port)]
    else:
        args += ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"]
        args += ["--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key)]
        args += ["--tls-ca-cert-file", str(tls.ca)]
    for user in ACL_USERS:
        args += ["--user", *user]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = PrivateRedis(port, tls, proc)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if server.client().ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait_until_it_answers(config: Path, name: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the worker answers a ping: a turn sent before it consumes waits in the queue,
    and on a loaded machine a start can outlast the turn's queue deadline."""
    from celery import Celery

    stores = tomllib.loads(config.read_text())
    app = Celery(broker=stores.get("broker", {}).get("url") or stores["redis"]["url"])
    deadline = time.monotonic() + 90
    try:
        while not app.control.ping(destination=[name], timeout=1.0):
            assert proc.poll() is None, f"the celery worker exited ({proc.returncode})"
            assert time.monotonic() < deadline, "the celery worker never answered a ping"
    finally:
        app.close()


@contextmanager
def celery_worker(config: Path, queue: str, env: Mapping[str, str] | None = None) -> Iterator[None]:
    """One `celery worker` process (threads pool) reading `config`, with the API key in its env."""
    name = f"security-{queue}@%h"
    proc = celery_worker_process(config, queue=queue, name=name, key_env=KEY_ENV, key=KEY, env=env)
    try:
        _wait_until_it_answers(config, f"security-{queue}@{socket.gethostname()}", proc)
        yield
    finally:
        stop([proc])
