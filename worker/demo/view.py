"""The live view `relevo demo` redraws while it runs: the full view, or a compact one.

The full view (headed tables, whole scope names) needs a large terminal. On a
smaller one, 80x24 included, `worker.demo.compact` draws a view that still shows
every tenant's budget row and the latest breaker changes. The choice is made at
each redraw from the size rich hands the view, so resizing the terminal works.
"""

from __future__ import annotations

import math

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from breakers import BreakerState, ScopeReport
from budgets import format_micros
from worker.demo.compact import compact_view
from worker.demo.drive import BreakerChange, FleetSnapshot
from worker.demo.live import STATE_STYLE, LiveState, counts_lines, panel_title

__all__ = ["LiveState", "live_view"]

_RECENT_CHANGES = 4
# The full view at its tallest (six scopes, two cooldowns, four changes) takes about
# 34 lines: smaller terminals would crop it, hiding the budgets and the changes.
_FULL_MIN_WIDTH = 100
_FULL_MIN_HEIGHT = 36


def live_view(state: LiveState) -> RenderableType:
    """The panel redrawn while the demo runs, laid out for the terminal it is drawn on."""
    return _Sized(state)


class _Sized:
    """Picks the layout when rendered, when the terminal's size is known."""

    def __init__(self, state: LiveState) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Under `Live`, max_height is the terminal's height: taller output is cropped.
        if options.max_width >= _FULL_MIN_WIDTH and options.max_height >= _FULL_MIN_HEIGHT:
            yield _full_view(self.state)
        else:
            yield compact_view(self.state, console, options)


def _full_view(state: LiveState) -> RenderableType:
    phase = state.phases[state.phase_index]
    done = len(state.records)
    heading = Text.assemble(
        (f"phase {state.phase_index + 1}/{len(state.phases)} {phase.key}: ", "bold"),
        (phase.title, "cyan"),
        f"   {state.phase_elapsed_s:4.1f} s",
    )
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=state.planned, completed=done, width=40),
        Text(f"{done}/{state.planned} turns"),
    )
    statuses, fallback = counts_lines(state)
    parts: list[RenderableType] = [heading, bar, Text.assemble(statuses, "    ", fallback)]
    if state.fleet is not None:
        parts += [_breakers_table(state.fleet), _budgets_table(state.fleet)]
    if state.changes:
        recent = state.changes[-_RECENT_CHANGES:]
        parts.append(Text("\n".join(_change_line(c) for c in recent), style="dim"))
    return Panel(Group(*parts), title=panel_title(state), title_align="left")


def _breakers_table(fleet: FleetSnapshot) -> Table:
    table = Table(
        title="breakers (fleet-wide, in Redis)", box=box.SIMPLE_HEAD, title_justify="left"
    )
    for column in ("scope", "state", "failures / calls in window", "retry in"):
        table.add_column(column)
    for scope in fleet.scopes:
        retry = "pinned" if math.isinf(scope.retry_in_s) else f"{scope.retry_in_s:.1f} s"
        table.add_row(
            scope.scope,
            Text(scope.state.value, style=STATE_STYLE.get(scope.state.value, "")),
            _window(scope),
            retry if scope.retry_in_s else "",
        )
    for cool in fleet.cooldowns:
        pair = f"cooldown {cool.pair.account}|{cool.pair.model}"
        table.add_row(pair, Text("cooling", style="yellow"), "", f"{cool.remaining_s:.1f} s")
    if not fleet.scopes and not fleet.cooldowns:
        table.add_row("(no calls yet)", "", "", "")
    return table


def _window(scope: ScopeReport) -> str:
    """The live window, or while not closed the one that opened the breaker."""
    failures, calls = scope.window_shown
    closed = scope.state is BreakerState.CLOSED
    return f"{failures} / {calls}" + ("" if closed else " when opened")


def _budgets_table(fleet: FleetSnapshot) -> Table:
    table = Table(title="budgets today", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("tenant", "spent", "daily limit", "left"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for tenant, report in fleet.budgets.items():
        left = report.day.remaining_micros
        low = left < report.limits.daily_micros // 10
        table.add_row(
            tenant,
            format_micros(report.day.spent_micros),
            format_micros(report.limits.daily_micros),
            Text(format_micros(left), style="bold red" if low else ""),
        )
    return table


def _change_line(change: BreakerChange) -> str:
    return f"{change.at_s:6.1f} s  {change.scope}: {change.old} -> {change.new}"
