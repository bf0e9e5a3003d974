"""What a turn reports: one `Attempt` per try or skip, then one `TurnResult`.

Reports and logs live outside the model's context. They carry names, codes,
statuses and timings; never API keys, never whole prompts. Log events also carry
the OpenTelemetry GenAI names (`gen_ai.request.model`, `gen_ai.provider.name`…)
beside our own, so a GenAI-aware backend reads them without a mapping.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence

import structlog

from worker.adapters.base import Completion
from worker.adapters.finish import FinishReason
from worker.errors import ModelNotFound, ProviderError
from worker.guard.protocol import Target
from worker.observability.alert import model_gone
from worker.observability.redact import redact_text
from worker.settings import DEFAULT_CHAIN, DegradationSettings
from worker.turn.capability import Fit
from worker.types import (
    Attempt,
    AttemptOutcome,
    Reply,
    Status,
    TurnRequest,
    TurnResult,
    Usage,
)

__all__ = ["LEFT_OUT", "WITHHELD", "TurnReport", "jumps"]

LEFT_OUT = "left out: "
"""How an attempt's `detail` starts when it names the turn's fields its call did not carry."""

log = structlog.get_logger("relevo.turn")

_DETAIL_CHARS = 300
# Finish reasons that withhold the answer: the provider's filter, or the model declining.
WITHHELD = frozenset({FinishReason.CONTENT_FILTER, FinishReason.REFUSAL})
# OpenTelemetry GenAI semantic conventions (gen-ai registry): the names GenAI tooling reads.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
ERROR_TYPE = "error.type"


class TurnReport:
    """Collects a turn's attempts and errors, and builds its result."""

    def __init__(
        self,
        request: TurnRequest,
        *,
        primary_model: str,
        gen_ai_providers: Mapping[str, str] | None = None,
        left_out_field: bool = False,
        chain: str | None = None,
    ) -> None:
        """`left_out_field`: name the fields a call did not carry in the attempt's own
        `left_out`, which relevo 0.1.0's strict readers refuse, not in its `detail`.
        `chain`: the name the result carries of the chain the turn ran on (none: not
        written, as 0.1.0 reads results)."""
        self.request = request
        self.chain = chain
        # On each of the turn's log lines, when it has any.
        self._metadata = {"metadata": request.metadata} if request.metadata else {}
        self.left_out_field = left_out_field
        self.primary_model = primary_model
        # Each configured provider's `gen_ai.provider.name` (`ProviderSettings.gen_ai_provider`).
        self.gen_ai_providers = gen_ai_providers or {}
        self.attempts: list[Attempt] = []
        self._late: list[Attempt] = []
        self.errors: list[Exception] = []
        self.started = time.monotonic()
        # True once content has streamed: no fallback after that.
        self.locked = False
        self.target: Target | None = None
        self.step: int | None = None
        self.fit: Fit | None = None
        self.reply: Reply | None = None
        self.finish_reason: str | None = None
        self.response_model: str | None = None
        self.usage = Usage()
        self.cost_micros = 0
        # Set while the cheaper model answers for a turn money stopped (`stand_in`).
        self._stand_in: tuple[str, DegradationSettings] | None = None
        self._first_byte_at: float | None = None
        # Per target called: the reasoning items and the fields its calls left out
        # (`carrying`).
        self._left_out: dict[tuple[str, str, str], tuple[int, tuple[str, ...]]] = {}

    def carrying(self, target: Target, reasoning: int, fields: tuple[str, ...] = ()) -> None:
        """The calls to `target` leave out `reasoning` items another vendor wrote, and the
        turn's `fields` its body does not carry."""
        key = (target.model, target.provider, target.provider_model)
        self._left_out[key] = (reasoning, fields)

    def lock(self) -> None:
        if not self.locked:
            self._first_byte_at = time.monotonic()
        self.locked = True

    def _add(
        self,
        attempt: Attempt,
        usage: Usage | None = None,
        finish_reason: str | None = None,
        response_model: str | None = None,
    ) -> None:
        now = time.monotonic()
        fields: dict[str, object] = {"ended_ms": round((now - self.started) * 1000)}
        left_out: tuple[str, ...] = ()
        if attempt.outcome is not AttemptOutcome.SKIPPED:
            key = (attempt.model, attempt.provider, attempt.provider_model)
            fields["reasoning_left_out"], left_out = self._left_out.get(key, (0, ()))
            # Results keep relevo 0.1.0's shape while it may read them (no new field):
            # the fields a call did not carry are named in the row's detail, when the
            # row has none of its own, and always on its log line.
            if left_out and self.left_out_field:
                fields["left_out"] = left_out
            elif left_out and attempt.detail is None:
                fields["detail"] = LEFT_OUT + ", ".join(left_out)
        if self._first_byte_at is not None and attempt.outcome is not AttemptOutcome.HEDGE_LOST:
            # Content streams at most once a turn: after it, no other model is tried (a
            # hedge that lost the race sent none).
            began = now - attempt.latency_ms / 1000
            fields["first_byte_ms"] = max(0, round((self._first_byte_at - began) * 1000))
        attempt = attempt.model_copy(update=fields)
        self.attempts.append(attempt)
        # The answering attempt is in the turn's own line (turn.completed); its own
        # line is debug: one info line per healthy turn, failures logged as they happen.
        answered = attempt.outcome is AttemptOutcome.OK
        if answered and not log.is_enabled_for(logging.DEBUG):
            return
        semconv: dict[str, object] = {
            GEN_AI_OPERATION: "chat",
            GEN_AI_PROVIDER: self.gen_ai_providers.get(attempt.provider, attempt.provider),
            GEN_AI_REQUEST_MODEL: attempt.provider_model,
        }
        if answered:
            semconv[GEN_AI_RESPONSE_MODEL] = response_model or attempt.provider_model
        if attempt.error_class is not None:
            semconv[ERROR_TYPE] = attempt.error_class
        if usage is not None:
            semconv[GEN_AI_INPUT_TOKENS] = usage.prompt_tokens
            semconv[GEN_AI_OUTPUT_TOKENS] = usage.output_tokens
        if finish_reason is not None:
            semconv[GEN_AI_FINISH_REASONS] = [finish_reason]
        if left_out and not self.left_out_field:  # else the attempt's own field says it
            semconv["left_out"] = list(left_out)
        (log.debug if answered else log.info)(
            "turn.attempt",
            turn_id=self.request.turn_id,
            tenant_id=self.request.tenant_id,
            **self._metadata,
            **attempt.model_dump(mode="json", exclude_none=True),
            **semconv,
        )

    def skip(self, target: Target, reason: str, detail: str | None = None) -> None:
        self._add(_attempt(target, AttemptOutcome.SKIPPED, error_class=reason, detail=detail))

    def error(
        self,
        target: Target,
        error: ProviderError,
        latency_s: float,
        retry_index: int,
        charged_micros: int | None = None,
    ) -> None:
        """A failed call; `charged_micros` when the provider may bill it all the same."""
        if self.locked and self.target is None:
            self.target = target
        self.errors.append(error)
        self.cost_micros += charged_micros or 0
        if isinstance(error, ModelNotFound):
            model_gone(target.model, target.provider, target.provider_model, error.message)
        self._add(
            _attempt(
                target,
                AttemptOutcome.ERROR,
                http_status=error.status,
                error_class=error.code,
                detail=error.message[:_DETAIL_CHARS],
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
                charged_micros=charged_micros,
            )
        )

    def interrupted(
        self, target: Target, latency_s: float, retry_index: int, charged_micros: int
    ) -> None:
        """The call was cut short by the turn's deadline or the caller's cancellation."""
        self.cost_micros += charged_micros
        self._add(
            _attempt(
                target,
                AttemptOutcome.ERROR,
                error_class="interrupted",
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
                charged_micros=charged_micros,
            )
        )

    def hedge_lost(
        self,
        target: Target,
        latency_s: float,
        retry_index: int,
        charged_micros: int,
        *,
        twin_won: bool,
    ) -> None:
        """A call cut because its twin of a hedged race sent content first: "hedged"
        when the hedge beat it, "hedge" when it was the hedge and lost."""
        self.cost_micros += charged_micros
        self._add(
            _attempt(
                target,
                AttemptOutcome.HEDGE_LOST,
                error_class="hedged" if twin_won else "hedge",
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
                charged_micros=charged_micros,
            )
        )
        if not twin_won:
            # Listed after the attempt it hedged, which is still running: attempts read
            # in the order they started, the primary's first.
            self._late.append(self.attempts.pop())

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
        parsed: object = None,
    ) -> None:
        """The answer; `parsed` is its text read as JSON, when the turn asked for it."""
        self._add(
            _attempt(
                target,
                AttemptOutcome.OK,
                http_status=200,
                latency_ms=round(latency_s * 1000),
                retry_index=retry_index,
                charged_micros=cost_micros,
            ),
            completion.usage,
            completion.finish_reason,
            completion.model,
        )
        self.step, self.target, self.fit = step, target, fit
        self.response_model = completion.model
        self.reply = Reply(
            text=completion.text,
            tool_calls=completion.tool_calls,
            reasoning=completion.reasoning,
            parsed=parsed,
            refusal=completion.refusal,
        )
        self.finish_reason = completion.finish_reason
        self.usage = completion.usage
        self.cost_micros += cost_micros

    def ok(self) -> TurnResult:
        """The turn was answered; read-only answers are a degradation the caller must see,
        and so is a filtered one (`content_filter`) or a refusal."""
        if self.finish_reason in WITHHELD:
            # Not a fallback case: another model would be sent the same prompt. Withheld
            # before any content, nothing was answered (a refusal's words are in
            # `reply.refusal`); after some, the partial answer is the model's, locked to
            # it, and must not pass for a complete one.
            reply, reason = self.reply, str(self.finish_reason)
            if reply is None or not (reply.text or reply.tool_calls):
                return self._result(Status.FAILED, reason)
            return self._result(Status.DEGRADED, reason)
        if self._stand_in is not None:
            # The cheaper model is no step of the chain, and no fallback: money moved the
            # turn, not health, so the fallback rate does not count it.
            self.step = None
            return self._result(Status.DEGRADED, self._stand_in[0], degradation="cheaper_model")
        if self.fit is not None and self.fit.read_only:
            return self._result(Status.DEGRADED, "read_only")
        return self._result(Status.OK, None)

    @property
    def standing_in(self) -> bool:
        """Whether the cheaper model is answering for a money-stopped turn."""
        return self._stand_in is not None

    def stand_in(self, reason: str, settings: DegradationSettings) -> None:
        """The cheaper model is about to answer a turn money stopped for `reason`: its
        answer is then degraded for `reason`, and any other end the message for it."""
        self._stand_in = (reason, settings)

    def degraded(
        self, reason: str, settings: DegradationSettings, error: Exception | None = None
    ) -> TurnResult:
        if error is not None and error not in self.errors:
            self.errors.append(error)
        if self._stand_in is not None:
            # The cheaper model did not answer: the turn ends for what first stopped it.
            reason = self._stand_in[0]
        # "cheaper_model" ends here only without a cheap answer: it then acts as "message".
        action = "message" if settings.action == "cheaper_model" else settings.action
        return self._result(
            Status.DEGRADED,
            reason,
            degradation=action,
            degradation_message=settings.message if action == "message" else None,
        )

    def failed(self, reason: str, error: Exception | None = None) -> TurnResult:
        if self._stand_in is not None and not self.locked:
            # The cheap call failed in a way that fails a turn (a bad key, a request that
            # provider refuses, the deadline): money had stopped the turn, so it degrades.
            return self.degraded(*self._stand_in, error)
        if error is not None and error not in self.errors:
            self.errors.append(error)
        return self._result(Status.FAILED, reason)

    def exhausted(self) -> TurnResult:
        """Every model was tried or skipped and none answered."""
        return self._result(Status.FAILED, "chain_exhausted")

    def rejected(self, reason: str, error: Exception | None = None) -> TurnResult:
        if error is not None:
            self.errors.append(error)
        return self._result(Status.REJECTED, reason)

    def _result(self, status: Status, reason: str | None, **extra: object) -> TurnResult:
        self.attempts += self._late
        self._late.clear()
        target, fit = self.target, self.fit
        failed = status in (Status.FAILED, Status.REJECTED)
        error = "; ".join(str(e) for e in self.errors) if failed and self.errors else None
        if error is not None:
            error = redact_text(error)
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
                "finish_reason": self.finish_reason,
                "usage": self.usage,
                "cost_micros": self.cost_micros,
                "read_only": fit.read_only if fit else False,
                "dropped_tools": fit.dropped_tools if fit else (),
                "trimmed_messages": fit.trimmed_messages if fit else 0,
                "latency_ms": round((time.monotonic() - self.started) * 1000),
                "chain": self.chain,
                "metadata": self.request.metadata,
                **extra,
            }
        )
        result._errors = tuple(self.errors)
        self._log_completed(result)
        return result

    def _log_completed(self, result: TurnResult) -> None:
        target, attempts = self.target, result.attempts
        # The first attempt is always the primary's (a try or a skip): its provider model id.
        requested = attempts[0].provider_model if attempts else result.primary_model
        semconv: dict[str, object] = {GEN_AI_OPERATION: "chat", GEN_AI_REQUEST_MODEL: requested}
        if target is not None:
            semconv[GEN_AI_PROVIDER] = self.gen_ai_providers.get(target.provider, target.provider)
            semconv[GEN_AI_RESPONSE_MODEL] = self.response_model or target.provider_model
        if self.reply is not None:
            semconv[GEN_AI_INPUT_TOKENS] = result.usage.prompt_tokens
            semconv[GEN_AI_OUTPUT_TOKENS] = result.usage.output_tokens
        log.info(
            "turn.completed",
            turn_id=result.turn_id,
            tenant_id=result.tenant_id,
            status=result.status.value,
            reason=result.reason,
            chain=self.chain or DEFAULT_CHAIN,
            **self._metadata,
            primary_model=result.primary_model,
            effective_model=result.effective_model,
            effective_provider=result.effective_provider,
            step=result.step,
            finish_reason=result.finish_reason,
            attempts=len(attempts),
            jumps=jumps(attempts),
            attempt_latency_ms=[a.latency_ms for a in attempts],
            latency_ms=result.latency_ms,
            cost_micros=result.cost_micros,
            **semconv,
        )


def jumps(attempts: Sequence[Attempt]) -> list[dict[str, object]]:
    """Why the turn left each model or provider it left: the last attempt there, in order."""
    moves: list[dict[str, object]] = []
    for here, after in itertools.pairwise(attempts):
        if (here.model, here.provider) != (after.model, after.provider):
            moves.append(
                {
                    "model": here.model,
                    "provider": here.provider,
                    "status": here.http_status,
                    "error_class": here.error_class,
                }
            )
    return moves


def _attempt(target: Target, outcome: AttemptOutcome, **fields: object) -> Attempt:
    if isinstance(fields.get("detail"), str):
        fields["detail"] = redact_text(str(fields["detail"]))
    return Attempt.model_validate(
        {
            "model": target.model,
            "provider": target.provider,
            "provider_model": target.provider_model,
            "outcome": outcome,
            **fields,
        }
    )
