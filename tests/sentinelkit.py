"""A Redis Sentinel topology on loopback: one primary, one replica, three sentinels.

Every server is a redis-server of the test's own (Sentinel is redis-server --sentinel),
on free ports, with a failover that takes a few seconds (down after 1 s).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.netkit import free_port

MASTER = "relevo"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


def _answers(port: int) -> bool:
    client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _wait(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        time.sleep(0.1)


@dataclass
class Topology:
    """The servers, by role; `url` is the `sentinel://` URL of the three sentinels."""

    folder: Path
    primary_port: int = field(default_factory=free_port)
    replica_port: int = field(default_factory=free_port)
    sentinel_ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports) + "/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._spawn(self.primary_port, [binary, "--port", str(self.primary_port), *common])
        replica = ["--replicaof", "127.0.0.1", str(self.primary_port)]
        self._spawn(
            self.replica_port, [binary, "--port", str(self.replica_port), *common, *replica]
        )
        for port in self.sentinel_ports:
            conf = self.folder / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n",
                encoding="utf-8",
            )
            self._spawn(port, [binary, str(conf), "--sentinel"])
        _wait(self._ready, 30, "the Sentinel topology")

    def _spawn(self, port: int, args: list[str]) -> None:
        self.processes[port] = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.folder
        )

    def _ready(self) -> bool:
        ports = [self.primary_port, self.replica_port, *self.sentinel_ports]
        if not all(_answers(port) for port in ports):
            return False
        for port in self.sentinel_ports:
            client = redis.Redis(port=port, socket_timeout=0.5, decode_responses=True)
            try:
                replicas = client.execute_command("SENTINEL", "REPLICAS", MASTER)
                others = client.execute_command("SENTINEL", "SENTINELS", MASTER)
            except redis.RedisError:
                return False
            finally:
                client.close()
            if len(replicas) < 1 or len(others) < 2:
                return False
        return True

    def primary(self) -> int:
        """The port of the current primary, as the first sentinel sees it."""
        client = redis.Redis(port=self.sentinel_ports[0], socket_timeout=0.5)
        try:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        finally:
            client.close()
        return int(port)

    def kill_primary(self) -> int:
        """SIGKILL the current primary; returns its port."""
        port = self.primary()
        proc = self.processes[port]
        proc.kill()
        proc.wait(timeout=10)
        return port

    def wait_for_failover(self, old_port: int, timeout_s: float = 30) -> float:
        """Seconds until the sentinels name a primary other than `old_port` that answers."""
        began = time.monotonic()
        _wait(
            lambda: self.primary() != old_port and _answers(self.primary()),
            timeout_s,
            "a failover",
        )
        return time.monotonic() - began

    def restart(self, port: int) -> None:
        """Start the data server of `port` again, empty (the sentinels reconfigure it)."""
        binary = shutil.which("redis-server")
        assert binary is not None
        args = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._spawn(port, [binary, "--port", str(port), *args])
        _wait(lambda: _answers(port), 10, f"redis-server on {port}")

    def wait_for_replica(self, timeout_s: float = 30) -> None:
        """Until the primary has a replica that is in sync."""

        def synced() -> bool:
            client = redis.Redis(port=self.primary(), socket_timeout=0.5, decode_responses=True)
            try:
                info = client.info("replication")
            except redis.RedisError:
                return False
            finally:
                client.close()
            return any(
                isinstance(v, dict) and v.get("state") == "online"
                for k, v in info.items()
                if k.startswith("slave")
            )

        _wait(synced, timeout_s, "a replica in sync")

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
