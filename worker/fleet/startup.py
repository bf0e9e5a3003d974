"""What a worker process sees to as it starts: its parent, the store's persistence, and
budget keys an earlier release left in its old layout.

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

import budgets
from worker.errors import STORE_DOWN
from worker.settings import RedisSettings, environment

log = structlog.get_logger("relevo.worker")

__all__ = ["PARENT_ENV", "follow_parent", "migrate_budget_keys", "warn_if_not_persistent"]

PARENT_ENV = "RELEVO_PARENT_PID"
# A start waits at most this long for the old budget keys to move: what is left then moves
# at the next start, or with `relevo budgets migrate`.
MIGRATE_AT_START_S = 60.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_POLL_S = 1.0


def follow_parent() -> None:
    """If `PARENT_ENV` names this process's parent, end this process when the parent ends."""
    raw = environment.value(PARENT_ENV) or ""
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


def migrate_budget_keys(redis: RedisSettings) -> budgets.MigrationReport | None:
    """Move the budget keys of the released layout to the current one (`budgets.migrate`),
    when a few EXISTS find any: an upgrade needs no step by hand. Never raises: a failure
    is one warning naming the error's class, and the worker starts all the same."""

    async def migrate() -> budgets.MigrationReport | None:
        client = redis.connect_shared(timeout_s=max(redis.timeout_s, 2.0))
        try:
            if not await budgets.old_keys_present(client, redis.namespace):
                return None
            return await asyncio.wait_for(
                budgets.migrate_keys(client, redis.namespace), MIGRATE_AT_START_S
            )
        finally:
            await client.aclose()

    try:
        report = asyncio.run(migrate())
    except Exception as exc:  # the worker serves turns without the old keys' spend
        log.warning("budgets.keys_not_migrated", error=type(exc).__name__)
        return None
    if report is not None and report.changed:
        log.info(
            "budgets.keys_migrated",
            moved=report.moved,
            merged=report.merged,
            kept=report.kept,
            skipped=report.skipped,
            tenants=report.tenants,
        )
    return report


def _watch(parent: int) -> None:
    """Where prctl is not to be had: notice the parent's death by polling."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="relevo-lifeline", daemon=True).start()
