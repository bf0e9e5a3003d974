"""What the demo shows in the terminal: the live view while it runs, and the summary tables."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from budgets import format_micros
from worker.demo.drive import BreakerChange, FleetSnapshot, TurnRecord
from worker.demo.plan import SIM_MODELS, Phase
from worker.types import Status

__all__ = ["LiveState", "live_view", "summary_view"]

_STATE_STYLE = {"closed": "green", "open": "bold red", "half_open": "yellow"}
_STATUS_STYLE = {"ok": "green", "degraded": "yellow", "failed": "red", "rejected": "magenta"}
_RECENT_CHANGES = 4


@dataclass(frozen=True, slots=True)
class LiveState:
    """Everything the live view shows at one moment."""

    header: str
    phases: Sequence[Phase]
    phase_index: int
    phase_elapsed_s: float
    planned: int
    records: Sequence[TurnRecord]
    fleet: FleetSnapshot | None
    changes: Sequence[BreakerChange]
    alert_threshold: float  # the fleet's fallback-rate alert


def live_view(state: LiveState) -> RenderableType:
    """The panel redrawn while the demo runs."""
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
    now = [r for r in state.records if r.phase == state.phase_index]
    counts = _counts_line(state.records, now, state.alert_threshold)
    parts: list[RenderableType] = [heading, bar, counts]
    if state.fleet is not None:
        parts += [_breakers_table(state.fleet), _budgets_table(state.fleet)]
    if state.changes:
        recent = state.changes[-_RECENT_CHANGES:]
        parts.append(Text("\n".join(_change_line(c) for c in recent), style="dim"))
    return Panel(Group(*parts), title=f"relevo demo · {state.header}", title_align="left")


def _counts_line(
    records: Sequence[TurnRecord], now: Sequence[TurnRecord], threshold: float
) -> Text:
    results = [r.result for r in records if r.result is not None]
    status = Counter(r.status.value for r in results)
    line = Text()
    for value in (s.value for s in Status):
        line.append(f"{value} {status.get(value, 0)}  ", style=_STATUS_STYLE[value])
    lost = len(records) - len(results)
    if lost:
        line.append(f"lost {lost}  ", style="bold red")
    overall = _rate(records)
    line.append(f"  fallback rate {_percent(overall)} overall, {_percent(_rate(now))} this phase")
    if overall is not None and overall > threshold:
        line.append(f"  above the {threshold:.0%} alert threshold", style="bold red")
    return line


def _rate(records: Sequence[TurnRecord]) -> float | None:
    results = [r.result for r in records if r.result is not None]
    if not results:
        return None
    return sum(1 for r in results if r.step is not None and r.step >= 1) / len(results)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


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
            Text(scope.state.value, style=_STATE_STYLE.get(scope.state.value, "")),
            f"{scope.failures_in_window} / {scope.calls_in_window}",
            retry if scope.retry_in_s else "",
        )
    for cool in fleet.cooldowns:
        pair = f"cooldown {cool.pair.account}|{cool.pair.model}"
        table.add_row(pair, Text("cooling", style="yellow"), "", f"{cool.remaining_s:.1f} s")
    if not fleet.scopes and not fleet.cooldowns:
        table.add_row("(no calls yet)", "", "", "")
    return table


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


def summary_view(summary: Mapping[str, Any]) -> list[RenderableType]:
    """The tables printed at the end, from `demo_summary.summarize`."""
    return [
        _phases_table(summary["phases"]),
        _totals_table(summary["total"]),
        _tenants_table(summary["tenants"]),
        _changes_table(summary["breaker_changes"]),
    ]


def _phases_table(phases: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title="relevo demo: what each phase got",
        caption="\n".join(f"{p['key']}: {p['title']}" for p in phases),
        caption_justify="left",
        box=box.SIMPLE_HEAVY,
    )
    for column in ("phase", "turns", "status", "step", "fallback"):
        table.add_column(column, no_wrap=True)
    table.add_column("skipped / retried", no_wrap=True)
    for model in SIM_MODELS:
        table.add_column(f"{model} calls", justify="right")
    for phase in phases:
        rate = phase["fallback_rate"]
        skips = dict(phase["skips"])
        if phase["retries"]:
            skips["retried after a wait"] = phase["retries"]
        table.add_row(
            phase["key"],
            str(phase["turns"]) + (f"\n[red]lost {phase['lost']}[/red]" if phase["lost"] else ""),
            _lines(phase["status"]),
            _lines({f"step {k}": v for k, v in phase["steps"].items()}),
            "-" if rate is None else f"{rate:.0%}",
            _lines(skips),
            *(_calls(phase["calls"][model]) for model in SIM_MODELS),
        )
    return table


def _calls(counts: Mapping[str, int]) -> str:
    errors = counts.get("error", 0)
    noun = "error" if errors == 1 else "errors"
    return f"{counts['calls']}" + (f"\n[red]{errors} {noun}[/red]" if errors else "")


def _totals_table(total: Mapping[str, Any]) -> Table:
    table = Table(title="relevo demo: all turns", box=box.SIMPLE_HEAVY, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("turns")
    table.add_row(
        "turns", f"{total['turns']}" + (f" ({total['lost']} lost)" if total["lost"] else "")
    )
    table.add_row("per status", _lines(total["status"], sep="  "))
    table.add_row("per effective model", _lines(total["models"], sep="  "))
    table.add_row("step", _lines({f"step {k}": v for k, v in total["steps"].items()}, sep="  "))
    rate = total["fallback_rate"]
    table.add_row("fallback rate", "-" if rate is None else f"{rate:.0%}")
    table.add_row("degraded, why", _lines(total["degraded"], sep="  "))
    table.add_row("skipped without a call", _lines(total["skips"], sep="  "))
    return table


def _tenants_table(tenants: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="relevo demo: tenants", box=box.SIMPLE_HEAVY)
    for column in ("tenant", "turns", "status", "spent today", "daily limit"):
        table.add_column(column)
    for tenant, row in tenants.items():
        spent, limit = row["spent_micros"], row["daily_limit_micros"]
        table.add_row(
            tenant,
            str(row["turns"]),
            _lines(row["status"], sep="  "),
            "-" if spent is None else format_micros(spent),
            "-" if limit is None else format_micros(limit),
        )
    return table


def _changes_table(changes: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="relevo demo: breaker changes seen", box=box.SIMPLE_HEAVY)
    for column in ("at", "scope", "from", "to"):
        table.add_column(column)
    for change in changes:
        table.add_row(
            f"{change['at_s']:.1f} s",
            change["scope"],
            change["old"],
            Text(change["new"], style=_STATE_STYLE.get(change["new"], "")),
        )
    return table


def _lines(counts: Mapping[str, int], *, sep: str = "\n") -> str:
    return sep.join(f"{name} {count}" for name, count in counts.items()) or "-"
