"""What a worker process sees to as it starts: its parent, and the store's persistence.

A worker process that `relevo worker` started ends when `relevo worker` does. Without
this, a parent killed alone (SIGKILL, OOM) leaves its Celery children running
under PID 1, still consuming: the supervisor's restart then runs two consumers per node.
The parent names itself in `PARENT_ENV`; each child asks the kernel for SIGTERM (Celery's
warm shutdown: stop consuming, finish the turns in hand) when its parent dies.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import threading
import time

import structlog

from worker.errors import STORE_DOWN
from worker.settings import RedisSettings

log = structlog.get_logger("relevo.worker")

__all__ = ["PARENT_ENV", "follow_parent", "warn_if_not_persistent"]

PARENT_ENV = "RELEVO_PARENT_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 1.0


def follow_parent() -> None:
    """If `PARENT_ENV` names this process's parent, end this process when the parent ends."""
    raw = os.environ.get(PARENT_ENV, "")
    if not raw.isdigit():
        return
    parent = int(raw)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            _watch(parent)
    else:
        _watch(parent)
    # The parent may have died before the kernel was asked: then no signal will come.
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def warn_if_not_persistent(redis: RedisSettings) -> None:
    """Log a warning when the store keeps no append-only file: a restart or a failover then
    loses what was written since its last snapshot. Says nothing when Redis cannot tell."""

    async def aof_enabled() -> bool | None:
        client = redis.connect(timeout_s=max(redis.timeout_s, 1.0))
        try:
            info = await client.info("persistence")
        except STORE_DOWN:
            return None  # down, or INFO not allowed for this user
        finally:
            await client.aclose()
        return bool(int(info.get("aof_enabled", 0)))

    if asyncio.run(aof_enabled()) is False:
        log.warning(
            "worker.store_not_persistent",
            detail="Redis has no append-only file: a restart or failover loses what was "
            "written since its last snapshot (docs/deploy.md)",
        )


def _watch(parent: int) -> None:
    """Where prctl is not to be had: notice the parent's death by polling."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="relevo-lifeline", daemon=True).start()
