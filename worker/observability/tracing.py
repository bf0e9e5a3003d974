"""OpenTelemetry traces: enqueue, the wait in the queue, the turn, each attempt.

Off unless `[observability] tracing = true`, with `pip install 'relevo[otel]'`. While off,
or without the packages, relevo imports nothing of `opentelemetry` and every hook returns
what it was given or a shared no-op. Spans carry the GenAI names of the logs
(`worker.turn.report`). The rest of relevo calls this module, never `opentelemetry`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from worker.errors import ProviderError
from worker.observability.redact import redact_text
from worker.settings import ObservabilitySettings
from worker.types import AttemptOutcome, Status, TurnRequest, TurnResult, Usage

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["AttemptSpan", "attempt", "carried", "configure_tracing", "trace_celery", "traced_turn"]

log = structlog.get_logger("relevo.tracing")
Turn = Coroutine[Any, Any, TurnResult]
# When the producer sent the turn (epoch s): the worker's clock minus it is the queue wait
# (as exact as the two hosts' clocks agree).
ENQUEUED_AT = "relevo_enqueued_at"
OPERATION, PROVIDER = "gen_ai.operation.name", "gen_ai.provider.name"
REQUEST_MODEL, RESPONSE_MODEL = "gen_ai.request.model", "gen_ai.response.model"
INPUT_TOKENS, OUTPUT_TOKENS = "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"
_tracer: Tracer | None = None
_fields: tuple[str, ...] = ()  # the propagator's header names: traceparent, tracestate...
_tasks: set[str] = set()
# The producer span from Celery's before_task_publish to its after_, on the sending thread.
_sending = threading.local()


class _Target(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def provider_model(self) -> str: ...


def configure_tracing(settings: ObservabilitySettings) -> bool:
    """Tracing on or off as `settings` say; True if spans are being made."""
    global _tracer, _fields  # noqa: PLW0603 - OpenTelemetry's provider is process-wide too
    if not settings.tracing:
        _tracer = None
        return False
    if _tracer is not None:
        return True
    try:
        from opentelemetry import propagate, trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing.unavailable", hint="pip install 'relevo[otel]'")
        return False
    # A provider the process set up (a producer's web app, a test) gets relevo's spans too.
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # OpenTelemetry reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself, and
        # calls a service nobody named `unknown_service:<process>`: that one is relevo.
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "relevo"}))
        provider = TracerProvider(resource=resource)
        # None: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, else localhost:4318.
        url = settings.otlp_endpoint
        url = url and url.rstrip("/").removesuffix("/v1/traces") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
        trace.set_tracer_provider(provider)
    _fields = tuple(propagate.get_global_textmap().fields)
    _tracer = trace.get_tracer("relevo")
    return True


def trace_celery(task_name: str) -> None:
    """Trace `task_name`'s messages: a producer span each, its context in the headers."""
    from celery.signals import after_task_publish, before_task_publish

    _tasks.add(task_name)
    # Celery connects a receiver once, however often it is asked (once per app).
    before_task_publish.connect(_before_publish, weak=False)
    after_task_publish.connect(_after_publish, weak=False)


def _before_publish(
    sender: object = None, headers: dict[str, Any] | None = None, **kw: Any
) -> None:
    if _tracer is None or headers is None or sender not in _tasks:
        return
    from opentelemetry import propagate, trace

    _after_publish(sender, failed=True)  # a send that raised never got to after_task_publish
    _sending.span = span = _tracer.start_span(
        "relevo.enqueue",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.operation.type": "send",
            "messaging.destination.name": str(kw.get("routing_key")),
            "messaging.message.id": str(headers.get("id")),
        },
    )
    propagate.inject(headers, context=trace.set_span_in_context(span))
    headers[ENQUEUED_AT] = time.time()


def _after_publish(sender: object = None, *, failed: bool = False, **_: Any) -> None:
    span: Span | None = getattr(_sending, "span", None)
    if span is not None and sender in _tasks:
        _sending.span = None
        if failed:
            _failed(span, "send_failed")
        span.end()


def carried(request: object) -> dict[str, Any] | None:
    """The trace context a Celery task request brought in its headers; None while off."""
    if _tracer is None:
        return None
    return {k: v for k in (*_fields, ENQUEUED_AT) if (v := getattr(request, k, None)) is not None}


def traced_turn(
    request: TurnRequest,
    turn: Turn,
    carrier: Mapping[str, Any] | None = None,
    gen_ai_providers: Mapping[str, str] | None = None,
) -> Turn:
    """`turn` in the turn's span, parented by `carrier` (else the current span); while
    tracing is off, `turn` itself. `gen_ai_providers`: each configured provider's
    well-known API name (`ProviderSettings.gen_ai_provider`)."""
    if _tracer is None:
        return turn
    return _traced(_tracer, request, turn, carrier or {}, gen_ai_providers or {})


async def _traced(
    tracer: Tracer,
    request: TurnRequest,
    turn: Turn,
    carrier: Mapping[str, Any],
    gen_ai_providers: Mapping[str, str],
) -> TurnResult:
    from opentelemetry import propagate, trace

    attributes: dict[str, Any] = {OPERATION: "chat", "relevo.turn_id": request.turn_id}
    attributes["relevo.tenant_id"] = request.tenant_id
    if isinstance(enqueued := carrier.get(ENQUEUED_AT), int | float):
        attributes["relevo.queue.wait_ms"] = max(0, round((time.time() - enqueued) * 1000))
    remote = any(k in carrier for k in _fields)
    # No exception text on spans: it may quote a prompt, and spans are not redacted.
    with tracer.start_as_current_span(
        "relevo.turn",
        context=propagate.extract(carrier) if remote else None,
        kind=trace.SpanKind.CONSUMER if remote else trace.SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            result = await turn
        except BaseException as exc:
            _failed(span, _error_type(exc))
            raise
        _finish(span, result, gen_ai_providers)
        return result


def _finish(span: Span, result: TurnResult, gen_ai_providers: Mapping[str, str]) -> None:
    """The turn's outcome, named as in its `turn.completed` log line."""
    attempts = result.attempts
    # The first attempt is always the primary's (a try or a skip), as in the log line.
    requested = attempts[0].provider_model if attempts else result.primary_model
    outcome = {
        REQUEST_MODEL: requested,
        "relevo.chain": result.chain or "default",
        **{f"relevo.metadata.{key}": value for key, value in result.metadata.items()},
        "relevo.status": result.status.value,
        "relevo.reason": result.reason,
        "relevo.step": result.step,
        "relevo.attempts": len(attempts),
        "relevo.cost_micros": result.cost_micros,
    }
    for a in attempts:
        if a.outcome is AttemptOutcome.OK:
            outcome |= {PROVIDER: gen_ai_providers.get(a.provider, a.provider)}
            outcome |= {"relevo.provider": a.provider, RESPONSE_MODEL: a.provider_model}
            outcome |= {INPUT_TOKENS: result.usage.prompt_tokens}
            outcome |= {OUTPUT_TOKENS: result.usage.output_tokens}
        elif a.outcome is AttemptOutcome.SKIPPED:
            skipped = {PROVIDER: gen_ai_providers.get(a.provider, a.provider)}
            skipped |= {"relevo.provider": a.provider, REQUEST_MODEL: a.provider_model}
            skipped |= {"relevo.model": a.model, "relevo.reason": a.error_class or ""}
            span.add_event("relevo.model_skipped", skipped)
    span.set_attributes({k: v for k, v in outcome.items() if v is not None})
    if result.status is Status.FAILED:
        _failed(span, result.reason or "failed")


def _failed(span: Span, error_type: str, description: str | None = None) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, description)


def _error_type(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return exc.code
    # As the turn report names a call that the deadline or a shutdown cut short.
    return "interrupted" if isinstance(exc, asyncio.CancelledError) else type(exc).__qualname__


def attempt(
    target: _Target, request: TurnRequest, retry_index: int, gen_ai_provider: str
) -> AttemptSpan:
    """The span of one call to `target`, a child of the turn's span; a no-op while off.
    `gen_ai_provider` is the API's well-known name (`ProviderSettings.gen_ai_provider`)."""
    if _tracer is None:
        return _OFF
    from opentelemetry.trace import SpanKind

    span = _tracer.start_span(
        f"chat {target.provider_model}",
        kind=SpanKind.CLIENT,
        attributes={
            OPERATION: "chat",
            PROVIDER: gen_ai_provider,
            REQUEST_MODEL: target.provider_model,
            "relevo.provider": target.provider,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.request.stream": request.stream,
            "relevo.model": target.model,
            "relevo.retry_index": retry_index,
        },
    )
    return AttemptSpan(span, target.provider_model)


class AttemptSpan:
    """One provider call's span, as a context manager; without a span (off), a no-op."""

    __slots__ = ("_model", "_span", "_token")
    _token: Token[Context] | None

    def __init__(self, span: Span | None = None, model: str = "") -> None:
        self._span, self._model, self._token = span, model, None

    def __enter__(self) -> AttemptSpan:
        if self._span is not None:
            from opentelemetry import context, trace

            # Current, so the HTTP call's own spans (an httpx instrumentation) nest under it.
            self._token = context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._span is None or self._token is None:
            return
        from opentelemetry import context

        context.detach(self._token)
        if isinstance(exc, ProviderError) and exc.status is not None:
            self._span.set_attribute("http.response.status_code", exc.status)
        if exc is not None:
            detail = redact_text(exc.message)[:300] if isinstance(exc, ProviderError) else None
            _failed(self._span, _error_type(exc), detail)
        self._span.end()

    def answered(
        self, usage: Usage, finish_reason: str | None = None, model: str | None = None
    ) -> None:
        """The call answered, with these tokens, by `model` (the provider's word for it;
        the requested model when the provider does not say)."""
        if self._span is not None:
            self._span.set_attribute(RESPONSE_MODEL, model or self._model)
            self._span.set_attribute(INPUT_TOKENS, usage.prompt_tokens)
            self._span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)
            if finish_reason is not None:
                self._span.set_attribute("gen_ai.response.finish_reasons", (finish_reason,))


_OFF = AttemptSpan()
