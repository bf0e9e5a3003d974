"""What the live view shows, and the parts its layouts (and the summary's) share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.text import Text

from worker.demo.drive import BreakerChange, FleetSnapshot, TurnRecord
from worker.demo.plan import Phase
from worker.types import Status

__all__ = ["STATE_STYLE", "LiveState", "counts_lines", "natural_width", "panel_title"]

STATE_STYLE = {"closed": "green", "open": "bold red", "half_open": "yellow"}
_STATUS_STYLE = {"ok": "green", "degraded": "yellow", "failed": "red", "rejected": "magenta"}
_UNBOUNDED = 10_000


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


def panel_title(state: LiveState) -> Text:
    """The panel's title; cut with an ellipsis on a narrow terminal (the header is long)."""
    return Text(f"relevo demo · {state.header}", no_wrap=True, overflow="ellipsis")


def counts_lines(state: LiveState) -> tuple[Text, Text]:
    """The turns per status so far, and the fallback rate (overall and this phase)."""
    records = state.records
    now = [r for r in records if r.phase == state.phase_index]
    results = [r.result for r in records if r.result is not None]
    status = Counter(r.status.value for r in results)
    statuses = Text("  ").join(
        Text(f"{value} {status.get(value, 0)}", style=_STATUS_STYLE[value])
        for value in (s.value for s in Status)
    )
    lost = len(records) - len(results)
    if lost:
        statuses.append(f"  lost {lost}", style="bold red")
    overall = _rate(records)
    fallback = Text(f"fallback rate {_percent(overall)} overall, {_percent(_rate(now))} this phase")
    threshold = state.alert_threshold
    if overall is not None and overall > threshold:
        fallback.append(f"  above the {threshold:.0%} alert threshold", style="bold red")
    return statuses, fallback


def natural_width(console: Console, options: ConsoleOptions, renderable: RenderableType) -> int:
    """The width `renderable` takes unsqueezed (a measurement is capped at the given width)."""
    return Measurement.get(console, options.update_width(_UNBOUNDED), renderable).maximum


def _rate(records: Sequence[TurnRecord]) -> float | None:
    results = [r.result for r in records if r.result is not None]
    if not results:
        return None
    return sum(1 for r in results if r.step is not None and r.step >= 1) / len(results)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
