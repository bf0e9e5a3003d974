"""The fleet's recent turns as an operator filters them, and what each breaker last saw.

Both read the fleet's recorded turns (`TurnStore.recent`): the list that the fleet
page's counts link to (`/recent?status=degraded`, `?fell_back=1`, `?tenant=acme`),
the turns of the alert's window; and, for each breaker scope, the newest errors its
model or vendor returned among every turn still recorded: why an open breaker opened,
as far as the stored turns tell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.console.stored import Recent
from worker.fleet.operations import OperatorFleet
from worker.types import Attempt, AttemptOutcome, Status, TurnResult

__all__ = ["SHOWN", "RecentFilter", "ScopeError", "errors_by_scope"]

# The newest turns the list shows, and the newest errors kept per scope.
SHOWN = 200
_ERRORS_PER_SCOPE = 3


@dataclass(frozen=True)
class RecentFilter:
    """What `/recent` shows: a status, only the turns a backup answered, one tenant."""

    status: Status | None = None
    fell_back: bool = False
    tenant: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RecentFilter:
        """The filter a query asks for; an unknown status raises ValueError naming it."""
        raw = query.get("status", "")
        try:
            status = Status(raw) if raw else None
        except ValueError:
            known = ", ".join(s.value for s in Status)
            raise ValueError(f"status: one of {known}, not {raw[:40]!r}") from None
        return cls(status, query.get("fell_back") == "1", query.get("tenant", "")[:128])

    def keeps(self, result: TurnResult) -> bool:
        if self.status is not None and result.status is not self.status:
            return False
        if self.fell_back and not (result.step or 0) >= 1:
            return False
        return not self.tenant or result.tenant_id == self.tenant

    def apply(self, recent: Recent) -> list[TurnResult]:
        return [r for r in recent.results if self.keeps(r)][:SHOWN]


@dataclass(frozen=True)
class ScopeError:
    """One error a scope's model returned in a stored turn."""

    turn_id: str
    saved_ms: int
    model: str
    provider: str
    error_class: str
    http_status: int | None


def _vendor(fleet: OperatorFleet, model: str) -> str:
    if fleet.settings is not None and model in fleet.settings.models:
        return fleet.settings.models[model].vendor
    return model.split("/", 1)[0]


def _scopes(fleet: OperatorFleet, attempt: Attempt) -> tuple[str, str]:
    return (
        f"model:{attempt.model}@{attempt.provider}",
        f"vendor:{_vendor(fleet, attempt.model)}",
    )


def errors_by_scope(fleet: OperatorFleet, recent: Recent) -> dict[str, list[ScopeError]]:
    """Each scope's newest errors (newest first, a few each) among the recent turns."""
    found: dict[str, list[ScopeError]] = {}
    for result in recent.results:  # newest first
        for attempt in reversed(result.attempts):
            if attempt.outcome is not AttemptOutcome.ERROR:
                continue
            seen = ScopeError(
                result.turn_id,
                recent.saved_ms.get(result.turn_id, 0),
                attempt.model,
                attempt.provider,
                attempt.error_class or "error",
                attempt.http_status,
            )
            for scope in _scopes(fleet, attempt):
                kept = found.setdefault(scope, [])
                if len(kept) < _ERRORS_PER_SCOPE:
                    kept.append(seen)
    return found
