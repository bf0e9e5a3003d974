"""The live view for small terminals (80x24 and up): nothing that matters is cropped.

What must stay in sight is every tenant's budget row (one of them runs out) and
the latest breaker changes. To make room: the breakers and budgets tables sit
side by side without titles or rules, scopes get short names, money is shown to
a hundredth of a cent, and less useful columns go first when the width is short
(failures per calls, then spent). Then the height decides: the changes take what
is left, newest first, with one line saying how many earlier ones are hidden; the
phase's description gets a line only when at least three changes still fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from budgets import format_micros
from worker.demo.drive import BreakerChange, FleetSnapshot
from worker.demo.live import STATE_STYLE, LiveState, counts_lines, natural_width, panel_title

__all__ = ["compact_view"]

_BUDGET_EXHAUSTED = "tenant_budget_exhausted"
_EXHAUSTED = "exhausted"
# Changes kept in sight before the phase's description is given a line.
_MIN_CHANGES = 3
# The panel's border and padding, left and right; its border, top and bottom.
_PANEL_WIDTH = 4
_PANEL_HEIGHT = 2


def compact_view(state: LiveState, console: Console, options: ConsoleOptions) -> RenderableType:
    """The live view in `options.max_width` x `options.max_height` cells."""
    inner = options.update(width=max(1, options.max_width - _PANEL_WIDTH), height=None)
    statuses, fallback = counts_lines(state)
    top: list[RenderableType] = [_heading(state), statuses, fallback]
    names: dict[str, str] = {}
    if state.fleet is not None:
        names = _short_names(state.fleet)
        top.append(_tables(state.fleet, names, _exhausted(state), console, inner))
    used = len(console.render_lines(Group(*top), inner, pad=False))
    room = options.max_height - _PANEL_HEIGHT - used
    changes = list(state.changes)  # the monitor appends to its list while `Live` redraws
    wanted = min(len(changes), _MIN_CHANGES) + (len(changes) > _MIN_CHANGES)
    describe = room - 1 >= wanted
    if describe:
        title = state.phases[state.phase_index].title
        top.insert(1, Text(title, style="cyan", no_wrap=True, overflow="ellipsis"))
        room -= 1
    if changes:
        top.append(_changes(changes, names, room))
    return Panel(Group(*top), title=panel_title(state), title_align="left")


def _heading(state: LiveState) -> Table:
    phase = state.phases[state.phase_index]
    done = len(state.records)
    grid = Table.grid(padding=(0, 1), expand=True)
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)  # the bar takes the width the words leave
    grid.add_column(no_wrap=True)
    grid.add_row(
        Text.assemble(
            (f"phase {state.phase_index + 1}/{len(state.phases)} {phase.key}", "bold"),
            f"  {state.phase_elapsed_s:4.1f} s",
        ),
        ProgressBar(total=state.planned, completed=done),
        Text(f"{done}/{state.planned} turns"),
    )
    return grid


def _exhausted(state: LiveState) -> set[str]:
    """Tenants whose turns were degraded because their budget ran out."""
    return {
        r.tenant
        for r in state.records
        if r.result is not None and r.result.reason == _BUDGET_EXHAUSTED
    }


def _tables(
    fleet: FleetSnapshot,
    names: Mapping[str, str],
    exhausted: set[str],
    console: Console,
    options: ConsoleOptions,
) -> RenderableType:
    """Breakers and budgets side by side, losing columns until they fit; else stacked."""
    for failures, spent in ((True, True), (False, True), (False, False)):
        pair = Table.grid(padding=(0, 3))
        pair.add_row(
            _breakers(fleet, names, failures=failures), _budgets(fleet, exhausted, spent=spent)
        )
        if natural_width(console, options, pair) <= options.max_width:
            return pair
    return Group(_breakers(fleet, names, failures=True), _budgets(fleet, exhausted, spent=True))


def _short_names(fleet: FleetSnapshot) -> dict[str, str]:
    """Scopes without their kind and vendor ("claude-sim"), unless two would then clash."""
    short = {}
    for report in fleet.scopes:
        scope = report.scope
        if scope.startswith("model:"):
            scope = scope.removeprefix("model:").partition("@")[0].rpartition("/")[2]
        short[report.scope] = scope
    if len(set(short.values())) < len(short):
        return {s: s.removeprefix("model:") for s in short}
    return short


def _breakers(fleet: FleetSnapshot, names: Mapping[str, str], *, failures: bool) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("breaker", no_wrap=True)
    # Widths the column reaches at some point of the run, from the start: a column that
    # grew later could push the tables over the width and make the layout jump.
    table.add_column("state", no_wrap=True, min_width=len("half_open"))
    if failures:
        table.add_column("fail/calls", justify="right", no_wrap=True)
    table.add_column("retry", justify="right", no_wrap=True, min_width=len("1.5 s"))
    for scope in fleet.scopes:
        state = Text(scope.state.value, style=STATE_STYLE.get(scope.state.value, ""))
        retry = "pinned" if math.isinf(scope.retry_in_s) else f"{scope.retry_in_s:.1f} s"
        failed, calls = scope.window_shown
        counts = [f"{failed}/{calls}"] if failures else []
        table.add_row(names[scope.scope], state, *counts, retry if scope.retry_in_s else "")
    for cool in fleet.cooldowns:
        cooling = Text("cooling", style="yellow")
        counts = [""] if failures else []
        table.add_row(cool.pair.model, cooling, *counts, f"{cool.remaining_s:.1f} s")
    if not fleet.scopes and not fleet.cooldowns:
        table.add_row("(no calls yet)", "", *([""] if failures else []), "")
    return table


def _budgets(fleet: FleetSnapshot, exhausted: set[str], *, spent: bool) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("tenant", no_wrap=True)
    for column in ("spent", "left", "limit") if spent else ("left", "limit"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, min_width=len(_EXHAUSTED))  # see _breakers
    for tenant, report in fleet.budgets.items():
        left = report.day.remaining_micros
        out = tenant in exhausted
        low = out or left < report.limits.daily_micros // 10
        table.add_row(
            Text(tenant, style="bold red" if out else ""),
            *([_money(report.day.spent_micros)] if spent else []),
            Text(_money(left), style="bold red" if low else ""),
            _money(report.limits.daily_micros),
            Text(_EXHAUSTED, style="bold red") if out else "",
        )
    return table


def _money(micros: int) -> str:
    """Dollars to a hundredth of a cent ("$0.0011"): a narrower column, still a tiny budget."""
    return format_micros(round(micros, -2))


def _changes(changes: Sequence[BreakerChange], names: Mapping[str, str], room: int) -> Text:
    """The newest changes that fit in `room` lines, after a line counting the hidden ones."""
    # With no room for the count, the newest change is worth more than it.
    shown = list(changes) if len(changes) <= room else list(changes[-max(1, room - 1) :])
    hidden = len(changes) - len(shown)
    lines = [f"+{hidden} more earlier (all in the summary)"] if hidden and room > 1 else []
    lines += [f"{c.at_s:6.1f} s  {names.get(c.scope, c.scope)}: {c.old} -> {c.new}" for c in shown]
    return Text("\n".join(lines), style="dim", no_wrap=True, overflow="ellipsis")
