"""A Redis Cluster on loopback: three primaries, no replicas, in a folder of its own.

Each node is a redis-server of the test session's own (``--cluster-enabled yes``), on
free ports; `redis-cli --cluster create` assigns the 16,384 slots, and the cluster is
ready once every node says ``cluster_state:ok``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from breakers.connection import is_cluster

PRIMARIES = 3
# A node also listens on its port + 10,000 (the cluster bus), so its port must be below this.
MAX_PORT = 55_535


def cluster_port() -> int:
    """A free port below MAX_PORT whose bus port (+10,000) is free too."""
    for _ in range(1000):
        with socket.socket() as sock, socket.socket() as bus:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
            if port >= MAX_PORT:
                continue
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
            return port
    raise AssertionError("no free port pair for a cluster node")


@dataclass
class Cluster:
    """The nodes of one cluster; `url` names the first (the client finds the others)."""

    folder: Path
    ports: list[int] = field(default_factory=lambda: [cluster_port() for _ in range(PRIMARIES)])
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        assert server is not None
        assert cli is not None
        for port in self.ports:
            node = self.folder / str(port)
            node.mkdir()
            cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node)]
            cmd += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            cmd += ["--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000"]
            with (node / "redis.log").open("wb") as log:
                self.processes.append(subprocess.Popen(cmd, stdout=log, stderr=log))
        for port in self.ports:
            _wait(lambda p=port: _answers(p), f"cluster node {port}")
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        for port in self.ports:
            _wait(lambda p=port: _ok(p), f"cluster_state:ok on {port}")

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5)


def _answers(port: int) -> bool:
    client = _client(port)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _ok(port: int) -> bool:
    client = _client(port)
    try:
        info = client.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text
    except redis.RedisError:
        return False
    finally:
        client.close()


def _wait(check: object, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        time.sleep(0.05)


def client(url: str, **options: object) -> Redis:
    """A plain asyncio client on `url`: a cluster client for a ``redis+cluster://`` URL."""
    if is_cluster(url):
        return RedisCluster.from_url(url.replace("+cluster://", "://", 1), **options)  # type: ignore[return-value]
    return Redis.from_url(url, **options)  # type: ignore[arg-type]
