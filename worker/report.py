"""What a turn reports: one `Attempt` per try or skip, then one `TurnResult`.

Reports and logs live outside the model's context. They carry names, codes,
statuses and timings; never API keys, never whole prompts.
"""

from __future__ import annotations

import time

import structlog

from worker.adapters.base import Completion
from worker.errors import ProviderError
from worker.fit import Fit
from worker.hooks import Target
from worker.models import (
    Attempt,
    AttemptOutcome,
    Reply,
    Status,
    TurnRequest,
    TurnResult,
    Usage,
)
from worker.settings import DegradationSettings

__all__ = ["TurnReport"]

log = structlog.get_logger("relevo.turn")

_DETAIL_CHARS = 300


class TurnReport:
    """Collects a turn's attempts and errors, and builds its result."""

    def __init__(self, request: TurnRequest, *, primary_model: str) -> None:
        self.request = request
        self.primary_model = primary_model
        self.attempts: list[Attempt] = []
        self.errors: list[Exception] = []
        self.started = time.monotonic()
        # True once content has streamed: no fallback after that.
        self.locked = False
        self.target: Target | None = None
        self.step: int | None = None
        self.fit: Fit | None = None
        self.reply: Reply | None = None
        self.usage = Usage()
        self.cost_micros = 0

    def lock(self) -> None:
        self.locked = True

    def _add(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        log.info(
            "turn.attempt",
            turn_id=self.request.turn_id,
            tenant_id=self.request.tenant_id,
            **attempt.model_dump(mode="json", exclude_none=True),
        )

    def skip(self, target: Target, reason: str, detail: str | None = None) -> None:
        self._add(_attempt(target, AttemptOutcome.SKIPPED, error_class=reason, detail=detail))

    def error(
        self, target: Target, error: ProviderError, latency_s: float, retry_index: int
    ) -> None:
        if self.locked and self.target is None:
            self.target = target
        self.errors.append(error)
        self._add(
            _attempt(
                target,
                AttemptOutcome.ERROR,
                http_status=error.status,
                error_class=error.code,
                detail=error.message[:_DETAIL_CHARS],
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
            )
        )

    def interrupted(self, target: Target, latency_s: float, retry_index: int) -> None:
        """The call was cut short by the turn's deadline or the caller's cancellation."""
        self._add(
            _attempt(
                target,
                AttemptOutcome.ERROR,
                error_class="interrupted",
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
            )
        )

    def answered(
        self,
        target: Target,
        completion: Completion,
        *,
        step: int,
        fit: Fit,
        cost_micros: int,
        latency_s: float,
        retry_index: int,
    ) -> None:
        self._add(
            _attempt(
                target,
                AttemptOutcome.OK,
                http_status=200,
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
            )
        )
        self.step, self.target, self.fit = step, target, fit
        self.reply = Reply(text=completion.text, tool_calls=completion.tool_calls)
        self.usage = completion.usage
        self.cost_micros = cost_micros

    def ok(self) -> TurnResult:
        """The turn was answered; read-only answers are a degradation the caller must see."""
        if self.fit is not None and self.fit.read_only:
            return self._result(Status.DEGRADED, "read_only")
        return self._result(Status.OK, None)

    def degraded(
        self, reason: str, settings: DegradationSettings, error: Exception | None = None
    ) -> TurnResult:
        if error is not None:
            self.errors.append(error)
        return self._result(
            Status.DEGRADED,
            reason,
            degradation=settings.action,
            degradation_message=settings.message if settings.action == "message" else None,
        )

    def failed(self, reason: str, error: Exception | None = None) -> TurnResult:
        if error is not None and error not in self.errors:
            self.errors.append(error)
        return self._result(Status.FAILED, reason)

    def exhausted(self) -> TurnResult:
        """Every model was tried or skipped and none answered."""
        return self._result(Status.FAILED, "chain_exhausted")

    def rejected(self, reason: str) -> TurnResult:
        return self._result(Status.REJECTED, reason)

    def _result(self, status: Status, reason: str | None, **extra: object) -> TurnResult:
        target, fit = self.target, self.fit
        failed = status in (Status.FAILED, Status.REJECTED)
        error = "; ".join(str(e) for e in self.errors) if failed and self.errors else None
        result = TurnResult.model_validate(
            {
                "turn_id": self.request.turn_id,
                "tenant_id": self.request.tenant_id,
                "status": status,
                "reason": reason,
                "error": error,
                "primary_model": self.primary_model,
                "effective_model": target.model if target else None,
                "effective_provider": target.provider if target else None,
                "step": self.step,
                "attempts": tuple(self.attempts),
                "reply": self.reply,
                "usage": self.usage,
                "cost_micros": self.cost_micros,
                "read_only": fit.read_only if fit else False,
                "dropped_tools": fit.dropped_tools if fit else (),
                "trimmed_messages": fit.trimmed_messages if fit else 0,
                "latency_ms": round((time.monotonic() - self.started) * 1000),
                **extra,
            }
        )
        result._errors = tuple(self.errors)
        log.info(
            "turn.completed",
            turn_id=result.turn_id,
            tenant_id=result.tenant_id,
            status=result.status.value,
            reason=result.reason,
            primary_model=result.primary_model,
            effective_model=result.effective_model,
            effective_provider=result.effective_provider,
            step=result.step,
            attempts=len(result.attempts),
            latency_ms=result.latency_ms,
        )
        return result


def _attempt(target: Target, outcome: AttemptOutcome, **fields: object) -> Attempt:
    return Attempt.model_validate(
        {
            "model": target.model,
            "provider": target.provider,
            "provider_model": target.provider_model,
            "outcome": outcome,
            **fields,
        }
    )
