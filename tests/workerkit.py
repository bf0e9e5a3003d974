"""`celery worker` processes for the fleet tests: start one, wait until it consumes, stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

import redis

from tests.chainkit import KEY
from worker.fleet.turnstore import TurnKeys


def celery_worker_process(
    config: Path,
    *,
    queue: str,
    name: str,
    threads: int = 8,
    key_env: str = "RELEVO_TEST_KEY",
    key: str = KEY,
    env: Mapping[str, str] | None = None,
    output: IO[bytes] | int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """A `celery worker` process (threads pool) running `config`'s turns from `queue`, its
    providers' `key` in `key_env`; `name` as Celery's `-n` (`%h` is the host)."""
    environ = {**os.environ, "RELEVO_CONFIG": str(config), key_env: key, **(env or {})}
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "worker.fleet.app", "worker"),
            *("-P", "threads", "-c", str(threads), "-Q", queue, "-n", name),
            *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            *("--loglevel", "WARNING"),
        ],
        env=environ,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def wait_for_heartbeats(
    redis_url: str,
    namespace: str,
    procs: Sequence[subprocess.Popen[bytes]],
    *,
    count: int | None = None,
    timeout_s: float = 60,
    log: Path | None = None,
) -> None:
    """Until `count` workers (all of `procs` by default) have written their heartbeat in
    `namespace`: a worker consumes from then on, and a turn sent earlier could wait out its
    deadline behind a slow start. A worker that exits fails the test (with its `log`)."""
    wanted = len(procs) if count is None else count
    with redis.Redis.from_url(redis_url) as client:
        until = time.monotonic() + timeout_s
        while client.zcard(TurnKeys(namespace).workers) < wanted:
            exited = [proc.returncode for proc in procs if proc.poll() is not None]
            assert not exited, log.read_text() if log else f"a worker exited with {exited}"
            assert time.monotonic() < until, f"no heartbeat of {wanted} workers in {timeout_s} s"
            time.sleep(0.1)


def stop(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 15) -> None:
    """Each process asked to stop (SIGTERM), then killed if it has not in `timeout_s`."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
