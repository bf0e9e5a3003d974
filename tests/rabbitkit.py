"""RabbitMQ for tests and benches: the machine's server, or a private node of one's own.

`machine_url()` is the machine's RabbitMQ (127.0.0.1:5672, guest/guest) when it answers.
`PrivateRabbit` starts a node of its own (its own name, ports and data directory, on
loopback) that a test may stop and start again (`restart_app`) without touching anyone
else's queues; `cpu_s()` reads its Erlang VM's CPU time from /proc.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

from tests.netkit import free_port

__all__ = ["MACHINE_URL", "PrivateRabbit", "delete_queues", "machine_url", "private_rabbit_missing"]

MACHINE_URL = os.environ.get("RELEVO_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
_START_TIMEOUT_S = 60.0


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def machine_url() -> str | None:
    """The machine's RabbitMQ URL, if something listens there."""
    from urllib.parse import urlsplit

    parts = urlsplit(MACHINE_URL)
    return MACHINE_URL if _port_open(parts.hostname or "127.0.0.1", parts.port or 5672) else None


def delete_queues(url: str, *names: str) -> None:
    """Delete these queues and their exchanges (a test's own), if they exist."""
    from kombu.connection import Connection

    with Connection(url, connect_timeout=2) as connection:
        for name in names:
            channel = connection.channel()
            with contextlib.suppress(Exception):
                channel.queue_delete(name)
            with contextlib.suppress(Exception):
                channel.exchange_delete(name)
            with contextlib.suppress(Exception):
                channel.close()


def private_rabbit_missing() -> str | None:
    """Why a private node cannot be started here, or None."""
    for tool in ("rabbitmq-server", "rabbitmqctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if os.geteuid() != 0:
        return "a private RabbitMQ node needs root (rabbitmq-server runs as user rabbitmq)"
    try:
        pwd.getpwnam("rabbitmq")
    except KeyError:
        return "no user rabbitmq"
    return None


class PrivateRabbit:
    """A RabbitMQ node of this process's own, started on free loopback ports."""

    def __init__(self) -> None:
        self.node = f"relevo-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.password = uuid.uuid4().hex
        self.url = f"amqp://relevo:{self.password}@127.0.0.1:{self.port}//"
        self.dir = Path(tempfile.mkdtemp(prefix="relevo-rabbit-"))
        self._env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }

    def __enter__(self) -> PrivateRabbit:
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            # The machine's defaults, the default user aside: the node starts from empty.
            f"default_user = relevo\ndefault_pass = {self.password}\n"
        )
        user = pwd.getpwnam("rabbitmq")
        for path in (self.dir, *self.dir.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        try:
            subprocess.run(
                ["rabbitmq-server", "-detached"], env=self._env, check=True, capture_output=True
            )
            self._await_startup()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.ctl("stop", timeout_s=30)
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        shutil.rmtree(self.dir, ignore_errors=True)

    def ctl(self, *args: str, timeout_s: float = 30.0) -> str:
        """`rabbitmqctl -n NODE ARGS` on this node; its output."""
        done = subprocess.run(
            ["rabbitmqctl", "-n", self.node, *args],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
        return done.stdout

    def _await_startup(self) -> None:
        # A node started detached is not reachable at once: rabbitmqctl exits 69 until it is.
        until = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                self.ctl("await_startup", timeout_s=_START_TIMEOUT_S)
                break
            except subprocess.CalledProcessError:
                if time.monotonic() > until:
                    raise
                time.sleep(0.5)
        self.wait_port()

    def wait_port(self, timeout_s: float = 30.0) -> None:
        until = time.monotonic() + timeout_s
        while not _port_open("127.0.0.1", self.port):
            if time.monotonic() > until:
                raise TimeoutError(f"RabbitMQ node {self.node} never listened on {self.port}")
            time.sleep(0.05)

    def stop_app(self) -> None:
        """Stop the RabbitMQ application (the Erlang VM stays): every connection drops."""
        self.ctl("stop_app")

    def start_app(self) -> None:
        self.ctl("start_app", timeout_s=_START_TIMEOUT_S)
        self.wait_port()

    def pid(self) -> int | None:
        """The Erlang VM's process id (beam.smp)."""
        with contextlib.suppress(OSError, ValueError):
            return int((self.dir / "pid").read_text().strip())
        return None

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the node's Erlang VM has used (Linux /proc)."""
        pid = self.pid()
        if pid is None:
            raise RuntimeError(f"RabbitMQ node {self.node} has no pid file")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
