"""The previous release, run beside this one: its wheel unpacked, and its processes started
on this environment's interpreter and dependencies with the release's own code first.

`unpack(dest)` unzips `tests/releases/relevo-<PREVIOUS>-py3-none-any.whl` (how it was
built: tests/releases/README.md); `unmet_requirements` names its dependencies this
environment does not meet. `env(release)` is the environment of a process of that release
(`PYTHONPATH` the unpacked wheel, ahead of site-packages and this checkout's editable
path) or, with None, of this checkout's code (`PYTHONPATH` dropped). Such processes start
from a working directory outside the checkout: `python -m` puts it first on `sys.path`.
`verbose=True` has Python say where each module came from (`code_origins` reads it back,
`ours` keeps relevo's), so a test can show which code a process ran.

`Worker.start` runs a worker process of the fleet on a release's code;
`start_client`/`finish_client` run tests/releases/client.py, a producer (`enqueue`) or a
reader (`read`) written against the API 0.1.0 has.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from tests.chainkit import KEY as TEST_KEY
from worker.cli.fleet import celery_command
from worker.fleet.startup import PARENT_ENV
from worker.settings import load_settings
from worker.settings.environment import CONFIG_VARIABLE

__all__ = [
    "CLIENT",
    "PACKAGES",
    "PREVIOUS",
    "WHEEL",
    "Worker",
    "client",
    "code_origins",
    "env",
    "finish_client",
    "ours",
    "start_client",
    "unmet_requirements",
    "unpack",
]

PREVIOUS = "0.1.0"
RELEASES = Path(__file__).resolve().parent / "releases"
WHEEL = RELEASES / f"relevo-{PREVIOUS}-py3-none-any.whl"
CLIENT = RELEASES / "client.py"
PACKAGES = ("worker", "breakers", "budgets", "rediskit")
# `python -v`: "# code object from '/path/worker/turn/__pycache__/chain.cpython-311.pyc'"
# (or the .py), on stderr; once Celery has redirected stderr to its logger, inside a JSON
# log line.
_CODE_FROM = re.compile(r"# code object from '?([^'\"\s]+)")


def unpack(dest: Path) -> Path:
    """The previous release's wheel unzipped into `dest`: its packages and its dist-info."""
    with zipfile.ZipFile(WHEEL) as wheel:
        wheel.extractall(dest)
    return dest


def unmet_requirements(release: Path) -> list[str]:
    """The unpacked release's own requirements (not its extras') that this environment's
    installed distributions do not meet: its code runs on them."""
    meta = importlib.metadata.PathDistribution(release / f"relevo-{PREVIOUS}.dist-info")
    unmet = []
    for line in meta.requires or []:
        wanted = Requirement(line)
        if wanted.marker is not None and not wanted.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = importlib.metadata.version(wanted.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{wanted}: not installed")
            continue
        if not wanted.specifier.contains(installed, prereleases=True):
            unmet.append(f"{wanted}: {installed} installed")
    return unmet


def env(
    release: Path | None, extra: Mapping[str, str] | None = None, *, verbose: bool = False
) -> dict[str, str]:
    """The environment of a process running `release`'s code (None: this checkout's): this
    one's, with `extra`, without RELEVO_* (they would override the configuration's keys)."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("RELEVO_")}
    out.update(extra or {})
    out.pop("PYTHONPATH", None)
    out.pop("PYTHONVERBOSE", None)
    if release is not None:
        out["PYTHONPATH"] = str(release)
    if verbose:
        out["PYTHONVERBOSE"] = "1"
    return out


def client(mode: str, config: Path) -> list[str]:
    """tests/releases/client.py in `mode` (`enqueue` or `read`) on `config`."""
    return [sys.executable, str(CLIENT), mode, str(config)]


def start_client(mode: str, config: Path, release: Path, cwd: Path) -> subprocess.Popen[str]:
    """client.py on `release`'s code, started now (imports take a while) and waiting for
    its input (`finish_client`)."""
    return subprocess.Popen(
        client(mode, config),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(release),
        cwd=cwd,
    )


def finish_client(
    started: subprocess.Popen[str], lines: Sequence[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Its input given, its answers: (what it imported, one answer per line)."""
    out, err = started.communicate("".join(f"{line}\n" for line in lines), timeout=180)
    assert started.returncode == 0, err[-3000:]
    first, *rest = out.splitlines()
    return json.loads(first), [json.loads(line) for line in rest]


@dataclass
class Worker:
    """A Celery worker process of the fleet on a release's code (None: this checkout's),
    started as `relevo worker` starts each of its processes, with `python -v`; its stderr
    (JSON logs, imports) in `log`."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    stopping: bool = False

    @classmethod
    def start(
        cls, name: str, config: Path, release: Path | None, cwd: Path, *, threads: int
    ) -> Worker:
        """Started from `cwd`, which must be outside the checkout, with `RELEVO_TEST_KEY`
        set; it ends when this process does."""
        log = cwd / f"worker-{name}.log"
        queue = load_settings(config, require_secrets=False).worker.queue
        command = celery_command(queue, threads, name, "WARNING")
        extra = {"RELEVO_TEST_KEY": TEST_KEY, CONFIG_VARIABLE: str(config)}
        extra[PARENT_ENV] = str(os.getpid())
        with log.open("wb") as err:
            proc = subprocess.Popen(
                command,
                env=env(release, extra, verbose=True),
                cwd=cwd,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        return cls(name, proc, log)

    def completed(self) -> list[str]:
        """The turn ids of its `turn.completed` log lines."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [
            json.loads(line)["turn_id"]
            for line in lines
            if line.startswith("{") and '"turn.completed"' in line
        ]

    def code_from(self) -> list[Path]:
        """Every file it loaded code from (`code_origins`)."""
        return code_origins(self.log.read_text(errors="replace"))

    def shut_down(self) -> None:
        """Ask for a warm shutdown (once: a second SIGTERM would not wait as long)."""
        if not self.stopping:
            self.stopping = True
            self.proc.terminate()

    def stop(self) -> None:
        """Shut down and wait (its log is complete once it exits); killed after 30 s."""
        self.shut_down()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def code_origins(stderr: str) -> list[Path]:
    """Every file a `verbose` process said it loaded code from."""
    return [Path(path) for path in _CODE_FROM.findall(stderr)]


def ours(paths: Iterable[Path], root: Path) -> list[Path]:
    """Those of `paths` in relevo's packages under `root` (a checkout, an unpacked wheel)."""
    tops = [(root / package).resolve() for package in PACKAGES]
    paths = list(paths)
    # One resolve per directory, not per file: a process loads thousands of modules.
    real = {folder: folder.resolve() for folder in {p.parent for p in paths}}
    return [p for p in paths if any(real[p.parent].is_relative_to(top) for top in tops)]
