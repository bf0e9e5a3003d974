"""The suite itself: a failing test reports its own assertion, whatever else runs beside it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Big enough that each parse takes long and a thread switch falls inside it.
SOURCE = "\n\n".join(
    f"def helper_{i}(a, b):\n    return [x * {i} for x in range(a) if (x + b) % 3 == 0]"
    for i in range(1200)
)

FAILING_MODULE = f"""
import ast
import threading
import time

import pytest

from tests import threadsafe_ast

threadsafe_ast.install()
SOURCE = {SOURCE!r}


class _Cycle:
    def __del__(self):
        sum(range(50))  # the collector runs Python code: the parsing thread may switch


def _parse(stop):
    while not stop.is_set():
        ast.parse(SOURCE)
        junk = [_Cycle() for _ in range(100)]
        for item in junk:
            item.me = item
        del junk
        time.sleep(0.001)  # let the test's thread take its turn


@pytest.fixture(scope="module", autouse=True)
def parser():
    stop = threading.Event()
    thread = threading.Thread(target=_parse, args=(stop,), daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.mark.parametrize("n", range(20))
def test_fails_with_its_own_message(n):
    assert n < 0, f"canary assertion {{n}}"


{SOURCE}
"""


class _Cycle:
    me: object

    def __del__(self) -> None:
        sum(range(50))


def _parse_beside_others(threads: int, rounds: int) -> list[str]:
    errors: list[str] = []

    def churn() -> None:
        for _ in range(rounds):
            try:
                ast.parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))
                return
            # The collector runs Python code (`__del__`) mid-parse: a thread switch there is
            # what unbalances 3.11's shared counter.
            junk = [_Cycle() for _ in range(100)]
            for item in junk:
                item.me = item
            del junk

    workers = [threading.Thread(target=churn) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def test_threads_parsing_at_once_raise_nothing() -> None:
    assert _parse_beside_others(threads=3, rounds=30) == []


class _Reparse:
    me: object

    def __del__(self) -> None:
        ast.parse("x = [1, 2, (3, 4)]")  # as a ResourceWarning's carets are found


def test_a_parse_the_collector_starts_inside_a_parse_leaves_it_whole() -> None:
    """The collector runs while a tree is built and a finaliser parses: the outer parse
    must not come back with a count the inner one changed."""
    mismatched = 0
    for _ in range(30):
        junk = [_Reparse() for _ in range(300)]
        for item in junk:
            item.me = item  # a cycle: only the collector frees it, at a moment of its own
        del junk
        try:
            ast.parse(SOURCE)
        except SystemError:
            mismatched += 1
    assert mismatched == 0


@pytest.mark.slow
def test_a_failure_beside_a_parsing_thread_reports_its_own_assertion(tmp_path: Path) -> None:
    ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_canary.py").write_text(FAILING_MODULE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider"),
            *("-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)),
            str(tmp_path / "test_canary.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    out = run.stdout + run.stderr
    assert "INTERNALERROR" not in out, out[-3000:]
    assert "20 failed" in out, out[-3000:]
    assert "canary assertion 19" in out
