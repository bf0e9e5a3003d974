"""The tables `relevo demo` prints at the end, from `worker.demo.summary.summarize`.

The phases table has a column of calls per simulated model; when it is wider than
the terminal (80 columns is), those columns move to a table of their own, so the
calls each model received stay readable rather than cut off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from budgets import format_micros
from worker.demo.live import STATE_STYLE, natural_width
from worker.demo.plan import SIM_MODELS

__all__ = ["summary_view"]


def summary_view(summary: Mapping[str, Any]) -> list[RenderableType]:
    """The tables printed at the end, laid out for the terminal's width."""
    return [
        _Phases(summary["phases"]),
        _totals_table(summary["total"]),
        _tenants_table(summary["tenants"]),
        _changes_table(summary["breaker_changes"]),
        *_image_line(summary.get("image_turn")),
    ]


def _image_line(image: Mapping[str, Any] | None) -> list[RenderableType]:
    """One line on the run's turn with an image: where it went, and who answered it."""
    if image is None:
        return []
    path = ", then ".join(image["attempts"]) or "no attempt"
    answered = image["effective_model"] or image["status"]
    return [Text(f"The turn with an image ({image['phase']}): {path}; answered by {answered}.")]


class _Phases:
    """One table when it fits the width; else the calls per model in a second table."""

    def __init__(self, phases: Sequence[Mapping[str, Any]]) -> None:
        self.phases = phases

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = _phases_table(self.phases, calls=True)
        if natural_width(console, options, table) <= options.max_width:
            yield table
            return
        yield _phases_table(self.phases, calls=False)
        yield _calls_table(self.phases)


def _phases_table(phases: Sequence[Mapping[str, Any]], *, calls: bool) -> Table:
    table = Table(
        title="relevo demo: what each phase got",
        caption="\n".join(f"{p['key']}: {p['title']}" for p in phases),
        caption_justify="left",
        box=box.SIMPLE_HEAVY,
    )
    if not calls:  # the narrow form: one space between columns, none at the edges (79 wide)
        table.show_edge = table.pad_edge = False
        table.collapse_padding = True
    for column in ("phase", "turns", "status", "step", "fallback"):
        table.add_column(column, no_wrap=True)
    # Narrow, a longer count folds onto the next line rather than being cut.
    table.add_column("skipped / retried", no_wrap=calls)
    if calls:
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
            *((_calls(phase["calls"][model]) for model in SIM_MODELS) if calls else ()),
        )
    return table


def _calls_table(phases: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="relevo demo: calls each model received", box=box.SIMPLE_HEAVY)
    table.add_column("phase", no_wrap=True)
    for model in SIM_MODELS:
        table.add_column(model, justify="right", no_wrap=True)
    for phase in phases:
        table.add_row(phase["key"], *(_calls(phase["calls"][model]) for model in SIM_MODELS))
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
            Text(change["new"], style=STATE_STYLE.get(change["new"], "")),
        )
    return table


def _lines(counts: Mapping[str, int], *, sep: str = "\n") -> str:
    return sep.join(f"{name} {count}" for name, count in counts.items()) or "-"
