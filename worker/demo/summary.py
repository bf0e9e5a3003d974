"""The demo's numbers, per phase and in total, as plain data: for the tables and `--json`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from worker.demo.drive import BreakerChange, FleetSnapshot, PhaseRun, TurnRecord
from worker.demo.plan import SIM_MODELS, TENANTS
from worker.types import AttemptOutcome, Status

__all__ = ["Tally", "summarize", "tally"]

_SHOWN_ERRORS = 3


@dataclass(frozen=True, slots=True)
class Tally:
    """What a set of turns got."""

    turns: int
    lost: int  # no result came back in time
    status: dict[str, int]
    steps: dict[str, int]  # "0" = the primary answered
    models: dict[str, int]  # effective model -> turns it answered
    degraded: dict[str, int]  # reason -> degraded turns
    skips: dict[str, int]  # why a model was passed over without a call -> times
    retries: int  # calls that were a retry of the same model (after a short wait)
    fallback_rate: float | None  # finished turns with step >= 1, over finished turns


def tally(records: Iterable[TurnRecord]) -> Tally:
    """Count what `records` got."""
    records = list(records)
    results = [r.result for r in records if r.result is not None]
    status = Counter(r.status.value for r in results)
    steps = Counter(str(r.step) for r in results if r.step is not None)
    attempts = [a for r in results for a in r.attempts]
    fell_back = sum(1 for r in results if r.step is not None and r.step >= 1)
    return Tally(
        turns=len(records),
        lost=len(records) - len(results),
        status=_ordered(status, [s.value for s in Status]),
        steps=dict(sorted(steps.items())),
        models=dict(Counter(r.effective_model for r in results if r.effective_model)),
        degraded=dict(
            Counter(r.reason or "-" for r in results if r.status is Status.DEGRADED).most_common()
        ),
        skips=dict(
            Counter(
                a.error_class or "-" for a in attempts if a.outcome is AttemptOutcome.SKIPPED
            ).most_common()
        ),
        retries=sum(
            1 for a in attempts if a.retry_index > 0 and a.outcome is not AttemptOutcome.SKIPPED
        ),
        fallback_rate=round(fell_back / len(results), 3) if results else None,
    )


def _ordered(counts: Mapping[str, int], order: Sequence[str]) -> dict[str, int]:
    return {key: counts[key] for key in order if counts.get(key)}


def summarize(
    runs: Sequence[PhaseRun],
    *,
    fleet: FleetSnapshot | None,
    changes: Sequence[BreakerChange],
    mode: str,
    seconds: float,
) -> dict[str, Any]:
    """The whole run as JSON-ready data."""
    records = [r for run in runs for r in run.records]
    errors = [r.error for r in records if r.error]
    return {
        "mode": mode,
        "seconds": round(seconds, 1),
        "total": asdict(tally(records)),
        "phases": [_phase(run) for run in runs],
        "tenants": _tenants(records, fleet),
        "breaker_changes": [asdict(c) | {"at_s": round(c.at_s, 2)} for c in changes],
        "image_turn": _image_turn(runs),
        "errors": errors[:_SHOWN_ERRORS],
    }


def _image_turn(runs: Sequence[PhaseRun]) -> dict[str, Any] | None:
    """What became of the run's turn with an image: which models it met, who answered."""
    for run in runs:
        for record in run.records:
            if not record.image:
                continue
            result = record.result
            return {
                "phase": run.phase.key,
                "status": result.status.value if result else None,
                "effective_model": result.effective_model if result else None,
                "step": result.step if result else None,
                "attempts": [
                    f"{a.model}: {a.error_class or a.outcome.value}"
                    for a in (result.attempts if result else ())
                ],
            }
    return None


def _phase(run: PhaseRun) -> dict[str, Any]:
    calls = {
        model: {"calls": 0, "ok": 0, "error": 0} | dict(run.calls.get(model, {}))
        for model in SIM_MODELS
    }
    return {
        "key": run.phase.key,
        "title": run.phase.title,
        "seconds": round(run.seconds, 1),
        **asdict(tally(run.records)),
        "calls": calls,
    }


def _tenants(records: Sequence[TurnRecord], fleet: FleetSnapshot | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tenant in TENANTS:
        mine = [r.result for r in records if r.tenant == tenant and r.result is not None]
        report = fleet.budgets.get(tenant) if fleet is not None else None
        out[tenant] = {
            "turns": sum(1 for r in records if r.tenant == tenant),
            "status": dict(Counter(r.status.value for r in mine)),
            "spent_micros": report.day.spent_micros if report else None,
            "daily_limit_micros": report.limits.daily_micros if report else None,
        }
    return out
