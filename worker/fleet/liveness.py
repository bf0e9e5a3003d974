"""Whether a node's worker processes are alive, for a probe that asks the node itself.

Each worker process touches a file of its own in the node's liveness directory
(`RELEVO_ALIVE_DIR`, which `relevo worker` sets) at every heartbeat tick, whether Redis
answers or not. The node's metrics endpoint answers `/healthz` from those files: 200 while
every process touched its file within `stale_s`, 503 naming those that did not. A
liveness probe on it restarts a node whose process is wedged (its event loop stuck),
never one whose Redis is away: whether Redis answers is for readiness to say.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from worker.settings import environment

__all__ = ["ALIVE_VARIABLE", "Liveness", "touch"]

ALIVE_VARIABLE = "RELEVO_ALIVE_DIR"
_PREFIX = "alive-"


def touch(pid: int | None = None) -> None:
    """Mark this process alive now (nothing when no liveness directory is set)."""
    directory = environment.value(ALIVE_VARIABLE)
    if directory is None:
        return
    # Failing to (a full disk), the probe says this process is stale: the right answer.
    with contextlib.suppress(OSError):
        (Path(directory) / f"{_PREFIX}{pid or os.getpid()}").touch()


class Liveness:
    """The verdict on `processes` worker processes whose files are in `directory`."""

    def __init__(
        self,
        directory: Path,
        processes: int,
        stale_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory, self.processes, self.stale_s = directory, processes, stale_s
        self._clock = clock
        self._started = clock()

    def verdict(self) -> tuple[bool, str]:
        """Whether every process beat within `stale_s` (or the node is younger than that),
        and what the probe reads: how many beat, and those that did not."""
        now = self._clock()
        fresh: list[int] = []
        stale: list[str] = []
        for path in self.directory.glob(f"{_PREFIX}*"):
            pid = int(path.name.removeprefix(_PREFIX))
            if not _running(pid):
                path.unlink(missing_ok=True)  # ended: the node replaces or follows it
                continue
            age = now - path.stat().st_mtime
            if age <= self.stale_s:
                fresh.append(pid)
            else:
                stale.append(f"pid {pid} last beat {age:.0f} s ago")
        missing = self.processes - len(fresh) - len(stale)
        said = f"{len(fresh)} of {self.processes} worker processes beat within {self.stale_s:g} s"
        wrong = ", ".join([*stale, *([f"{missing} never beat"] if missing > 0 else [])])
        healthy = len(fresh) >= self.processes or now - self._started <= self.stale_s
        return healthy, f"{'ok' if healthy else 'stale'}: {said}" + (f"; {wrong}" if wrong else "")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
