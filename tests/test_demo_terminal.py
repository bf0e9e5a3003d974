"""`relevo demo` in a real terminal: the live view and the summary fit 80x24 and stay whole.

The fast tests draw the views from made-up fleet states on consoles of a given
size. The slow one runs `relevo demo` under tmux at 80x24 and then at 200x50,
reads the screen as a person would (`tmux capture-pane`) while it runs and after,
and checks that both runs left a log file of their own.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console, RenderableType

import breakers
import budgets
from tests.conftest import skip_unless_ci
from worker.demo.drive import BreakerChange, FleetSnapshot, TurnRecord
from worker.demo.plan import PHASES, SIM_MODELS, TENANTS, THRIFTY_DAILY_MICROS, THRIFTY_TENANT
from worker.demo.tables import summary_view
from worker.demo.view import LiveState, live_view
from worker.types import Status, TurnResult

ROOT = Path(__file__).resolve().parent.parent
SCOPES = (
    "model:anthropic/claude-sim@anthropic_sim",
    "model:openai/gpt-sim@openai_sim",
    "model:google/gemini-sim@gemini_sim",
    "vendor:anthropic",
    "vendor:openai",
    "vendor:google",
)


def _budget(tenant: str, limit: int, spent: int) -> budgets.BudgetReport:
    day = budgets.PeriodReport("2025-01-01", limit, spent, 0, limit - spent, 0)
    month = budgets.PeriodReport("2025-01", 31 * limit, spent, 0, 31 * limit - spent, 0)
    limits = budgets.Limits(limit, 31 * limit)
    return budgets.BudgetReport(tenant, limits, "configured", day, month, 0, 0, None, 0, 0)


def _fleet() -> FleetSnapshot:
    """Every scope the demo has, two pairs cooling down, one tenant out of money."""
    scopes = tuple(
        breakers.ScopeReport(
            scope,
            breakers.BreakerState.OPEN if i == 0 else breakers.BreakerState.CLOSED,
            calls_in_window=59,
            failures_in_window=12 if i == 0 else 0,
            opened_at_ms=None,
            retry_in_s=1.5 if i == 0 else 0.0,
            probe_holders=(),
        )
        for i, scope in enumerate(SCOPES)
    )
    cooldowns = tuple(
        breakers.CooldownReport(breakers.Pair(f"{m.split('-')[0]}_sim", m), 0.8)
        for m in SIM_MODELS[:2]
    )
    reports = {t: _budget(t, 10_000_000, 10_837) for t in TENANTS}
    reports[THRIFTY_TENANT] = _budget(THRIFTY_TENANT, THRIFTY_DAILY_MICROS, 4_949)
    return FleetSnapshot(12.0, scopes, cooldowns, reports)


def _record(number: int) -> TurnRecord:
    tenant = TENANTS[number % len(TENANTS)]
    out = tenant == THRIFTY_TENANT and number > 100
    result = TurnResult(
        turn_id=f"t{number}",
        tenant_id=tenant,
        status=Status.DEGRADED if out else Status.OK,
        reason="tenant_budget_exhausted" if out else None,
        primary_model="anthropic/claude-sim",
        step=None if out else number % 2,
    )
    return TurnRecord(number * len(PHASES) // 255, tenant, result)


def _state(changes: int) -> LiveState:
    states = ("closed", "open", "half_open")
    return LiveState(
        header="embedded: Redis (fakeredis) and a Celery worker (threads x16) in this process, "
        "simulated providers",
        phases=PHASES,
        phase_index=len(PHASES) - 1,
        phase_elapsed_s=2.5,
        planned=255,
        records=[_record(n) for n in range(200)],
        fleet=_fleet(),
        changes=[
            BreakerChange(1.0 + n, SCOPES[n % 2], states[n % 3], states[(n + 1) % 3])
            for n in range(changes)
        ],
        alert_threshold=0.1,
    )


def _screen(renderables: Sequence[RenderableType], width: int, height: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, height=height, record=True)
    console.print(*renderables)
    return console.export_text().splitlines()


def _assert_whole(lines: Sequence[str], width: int, height: int) -> None:
    """No line wider than the terminal, and the panel's bottom border within its height."""
    assert all(cell_len(line.rstrip()) <= width for line in lines), "\n".join(lines)
    assert len(lines) <= height, "\n".join(lines)
    assert lines[-1].startswith("╰"), "\n".join(lines)


@pytest.mark.parametrize("changes", [0, 2, 4, 12])
def test_compact_live_view_keeps_every_tenant_and_the_latest_changes(changes: int) -> None:
    state = _state(changes)
    lines = _screen([live_view(state)], 80, 24)
    _assert_whole(lines, 80, 24)
    text = "\n".join(lines)
    for tenant in TENANTS:
        assert re.search(rf"│ .*\b{tenant}\b", text), text
    assert re.search(rf"{THRIFTY_TENANT} .* exhausted", text), text
    shown = [c for c in state.changes if f"{c.at_s:6.1f} s  " in text]
    assert shown == state.changes[len(state.changes) - len(shown) :]  # the newest ones
    assert len(shown) >= min(changes, 3)
    if len(shown) < changes:
        assert f"+{changes - len(shown)} more earlier" in text
    for expected in ("claude-sim", "vendor:anthropic", "cooling", "open", "1.5 s"):
        assert expected in text


def test_wide_terminal_keeps_the_full_live_view() -> None:
    state = _state(4)
    lines = _screen([live_view(state)], 200, 50)
    _assert_whole(lines, 200, 50)
    text = "\n".join(lines)
    for expected in ("breakers (fleet-wide, in Redis)", "failures / calls in window", *SCOPES):
        assert expected in text
    assert "budgets today" in text
    assert "daily limit" in text


def _summary() -> dict[str, Any]:
    calls = {m: {"calls": 18, "ok": 10, "error": 8} for m in SIM_MODELS}
    phase = {
        "title": "t",
        "seconds": 4.0,
        "turns": 60,
        "lost": 0,
        "status": {"ok": 45, "degraded": 15},
        "steps": {"0": 8, "1": 22, "2": 15},
        "fallback_rate": 0.62,
        "skips": {"cooldown": 48, "tenant_budget_exhausted": 15},
        "retries": 5,
        "calls": calls,
        "degraded": {"tenant_budget_exhausted": 15},
        "models": {},
    }
    return {
        "phases": [phase | {"key": p.key, "title": p.title} for p in PHASES],
        "total": phase | {"turns": 255, "lost": 0},
        "tenants": {
            t: {"turns": 64, "status": {"ok": 64}, "spent_micros": 10, "daily_limit_micros": 99}
            for t in TENANTS
        },
        "breaker_changes": [{"at_s": 3.3, "scope": SCOPES[0], "old": "closed", "new": "open"}],
    }


@pytest.mark.parametrize("width", [80, 220])
def test_summary_shows_each_models_calls_at_any_width(width: int) -> None:
    lines = _screen(summary_view(_summary()), width, 50)
    assert all(cell_len(line.rstrip()) <= width for line in lines)
    text = "\n".join(lines)
    assert "…" not in text  # nothing cut to fit
    header = next(line for line in lines if "gemini-sim" in line)
    assert all(model in header for model in SIM_MODELS)
    for expected in ("8 errors", "step 2 15", "tenant_budget_exhausted 15"):
        assert expected in text


# -- under tmux: what a person at an 80x24 (or a 200x50) terminal sees ----------------------

_RUN_TIMEOUT_S = 120
_EXITED = "DEMO EXITED"
_PRIMARY_SCOPE = "model:anthropic/claude-sim@anthropic_sim"


@pytest.fixture(scope="module")
def tmux() -> str:
    binary = shutil.which("tmux")
    if binary is None:
        skip_unless_ci("no tmux to run `relevo demo` in a terminal of a known size")
    assert binary is not None  # skip_unless_ci skips or fails: it never returns
    return binary


class _Run:
    """`relevo demo` run in a detached tmux pane of its own size, on a private tmux server."""

    def __init__(self, tmux: str, cwd: Path, tmpdir: Path, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._argv = [tmux, "-f", "/dev/null", "-L", f"relevo-test-{uuid.uuid4().hex[:8]}"]
        # A fresh machine's environment; no COLUMNS or LINES, so rich asks the pane its size.
        drop = ("RELEVO_", "REDIS", "CELERY", "COLUMNS", "LINES", "TMUX")
        self._env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        self._env |= {"PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir), "TERM": "xterm-256color"}
        demo = f"{shlex.quote(sys.executable)} -m worker.cli demo"
        # The shell stays after the demo so that its last screen can still be read.
        self._command = f"cd {shlex.quote(str(cwd))} && {demo}; echo {_EXITED} $?; sleep 600"
        self.screens: list[list[str]] = []  # what the pane showed, every 0.3 s, settled
        self.history: list[str] = []  # every line printed, wrapped lines joined again

    def _tmux(self, *args: str) -> list[str]:
        argv = [*self._argv, *args]
        done = subprocess.run(argv, env=self._env, capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    def __call__(self) -> _Run:
        size = ("-x", str(self.width), "-y", str(self.height))
        self._tmux("new-session", "-d", "-s", "demo", *size, self._command)
        try:
            deadline = time.monotonic() + _RUN_TIMEOUT_S
            # -J joins a line the terminal wrapped: a line wider than the pane shows as one.
            while not any(_EXITED in line for line in self._capture()):
                assert time.monotonic() < deadline, "\n".join(self.screens[-1])
                time.sleep(0.3)
            self.history = self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "demo")
        finally:
            subprocess.run([*self._argv, "kill-server"], env=self._env, check=False)
        return self

    def _capture(self) -> list[str]:
        """The screen once it holds still: a frame wider than the pty's buffer reaches tmux
        in pieces, and a capture between two pieces shows a line half drawn for a few ms."""
        screen = self._tmux("capture-pane", "-p", "-J", "-t", "demo")
        for _ in range(10):
            time.sleep(0.02)
            again = self._tmux("capture-pane", "-p", "-J", "-t", "demo")
            if again == screen:
                break
            screen = again
        self.screens.append(screen)
        return screen

    def log_file(self) -> Path:
        return Path(next(line for line in self.history if line.startswith("logs: "))[6:])

    def last_panel(self) -> list[str]:
        """The live view as it was left on screen: its last frame."""
        top = max(i for i, line in enumerate(self.history) if line.startswith("╭"))
        bottom = next(i for i, line in enumerate(self.history) if i > top and line[:1] == "╰")
        return self.history[top : bottom + 1]

    def summary(self) -> list[str]:
        """The lines after the live view: the tables, the totals line and the log file's."""
        bottom = self.history.index(self.last_panel()[-1])
        return self.history[bottom + 1 :]


@pytest.fixture(scope="module")
def runs(tmux: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[_Run, _Run, Path]:
    """Two demos one after the other, 80x24 then 200x50, logging into one directory."""
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    (tmpdir / "relevo-demo.log").write_text("an earlier run's log\n", encoding="utf-8")
    cwd = tmp_path_factory.mktemp("cwd")
    narrow = _Run(tmux, cwd, tmpdir, 80, 24)()
    narrow_log = narrow.log_file().read_bytes()
    wide = _Run(tmux, cwd, tmpdir, 200, 50)()
    assert narrow.log_file().read_bytes() == narrow_log  # the second run left it alone
    return narrow, wide, tmpdir


def _assert_fits(lines: Sequence[str], width: int) -> None:
    """No line wider than the pane, no panel line broken, nothing cropped by `Live`."""
    for line in lines:
        if line.startswith("logs: "):
            continue  # a path, printed raw on purpose: it is copied, not read in a column
        assert cell_len(line) <= width, line
        if line.startswith("│"):
            assert line.rstrip().endswith("│"), line
        assert line.strip() != "...", "\n".join(lines)  # Live's mark of a cropped view


@pytest.mark.slow
def test_live_view_at_80x24_shows_every_tenant_and_the_breaker_changes(
    runs: tuple[_Run, _Run, Path],
) -> None:
    narrow = runs[0]
    assert f"{_EXITED} 0" in narrow.history
    for screen in narrow.screens:
        assert len(screen) <= 24
        _assert_fits(screen, 80)
    # At some moment every tenant, the one out of budget and the opened breaker at once.
    assert any(
        all(re.search(rf"^│ .*\b{t}\b", "\n".join(s), re.MULTILINE) for t in TENANTS)
        and re.search(rf"\b{THRIFTY_TENANT}\b.* exhausted", "\n".join(s))
        and "claude-sim: closed -> open" in "\n".join(s)
        for s in narrow.screens
    ), "\n\n".join("\n".join(s) for s in narrow.screens[-8:])
    panel = narrow.last_panel()
    assert len(panel) <= 24
    text = "\n".join(panel)
    assert all(tenant in text for tenant in TENANTS)
    assert re.search(r"claude-sim: (open|half_open) -> closed\s*│\n╰", text), text  # the newest


@pytest.mark.slow
def test_summary_at_80_columns_keeps_each_models_calls(runs: tuple[_Run, _Run, Path]) -> None:
    summary = runs[0].summary()
    _assert_fits(summary, 80)
    assert not any("…" in line for line in summary), "\n".join(summary)  # nothing cut
    calls = summary.index(next(line for line in summary if "calls each model received" in line))
    header = next(line for line in summary[calls:] if "gemini-sim" in line)
    assert all(model in header for model in SIM_MODELS), header
    assert any(line.lstrip().startswith("rate_limit") for line in summary[calls:])
    assert any(_PRIMARY_SCOPE in line for line in summary)  # the changes table, in full


@pytest.mark.slow
def test_wide_terminal_keeps_the_full_view(runs: tuple[_Run, _Run, Path]) -> None:
    wide = runs[1]
    assert f"{_EXITED} 0" in wide.history
    for screen in wide.screens:
        _assert_fits(screen, 200)
    text = "\n".join(wide.last_panel())
    assert "breakers (fleet-wide, in Redis)" in text
    assert "failures / calls in window" in text
    assert "budgets today" in text
    assert re.search(rf"{_PRIMARY_SCOPE}: (open|half_open) -> closed\s*│\n╰", text), text
    # The full view shows the last four changes: the first was seen while it ran.
    opened = f"{_PRIMARY_SCOPE}: closed -> open"
    assert any(opened in line for screen in wide.screens for line in screen)
    assert any("claude-sim calls" in line for line in wide.summary())  # the one wide table


@pytest.mark.slow
def test_each_run_leaves_a_log_file_of_its_own(runs: tuple[_Run, _Run, Path]) -> None:
    narrow, wide, tmpdir = runs
    logs = {narrow.log_file(), wide.log_file()}
    assert len(logs) == 2
    assert {p.parent for p in logs} == {tmpdir}
    assert all(p.name.startswith("relevo-demo-") and p.stat().st_size > 0 for p in logs)
    assert (tmpdir / "relevo-demo.log").read_text(encoding="utf-8") == "an earlier run's log\n"
    assert sorted(tmpdir.glob("relevo-demo*.log")) == sorted([*logs, tmpdir / "relevo-demo.log"])
