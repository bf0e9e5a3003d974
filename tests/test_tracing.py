"""OpenTelemetry traces: one trace from `enqueue_turn` through Celery to each attempt.

Spans go to the SDK's in-memory exporter on this process's tracer provider, which
`configure_tracing` keeps (a process that set OpenTelemetry up keeps its own exporter).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from celery.signals import before_task_publish
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from structlog.testing import capture_logs

from tests.chainkit import run, settings, turn
from worker.fleet import enqueue_turn
from worker.fleet.app import TASK_NAME
from worker.fleet.testing import stub_fleet
from worker.guard import Availability
from worker.guard.testing import ScriptedGuard
from worker.observability import tracing
from worker.settings import ObservabilitySettings
from worker.simulator import Fault, Simulator
from worker.types import AttemptOutcome, Status

CHAIN = ("openai/alpha", "anthropic/beta")
EXPORTER = InMemorySpanExporter()


def _provider() -> TracerProvider:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    return provider


_provider().add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture(autouse=True)
def _no_spans_left(fresh_sim: Simulator, provider_key: str) -> Iterator[None]:
    EXPORTER.clear()
    yield
    tracing.configure_tracing(ObservabilitySettings())  # off again for the other tests


@pytest.fixture
def traced() -> None:
    assert tracing.configure_tracing(ObservabilitySettings(tracing=True))


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


@pytest.mark.usefixtures("traced")
async def test_a_turn_span_has_a_child_per_attempt_with_the_genai_names(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=500))
    sim.set_faults("beta", Fault(answer_model="beta-20261201"))
    request = turn()
    config = settings(sim.url, CHAIN)
    providers = {name: p.gen_ai_provider for name, p in config.providers.items()}
    result = await tracing.traced_turn(request, run(config, request), None, providers)
    assert result.status is Status.OK
    spans = EXPORTER.get_finished_spans()
    [turn_span] = named(spans, "relevo.turn")
    calls = [s for s in spans if s.kind is SpanKind.CLIENT]
    # alpha failed, was retried once and failed again; beta answered.
    assert [s.name for s in calls] == ["chat alpha", "chat alpha", "chat beta"]
    assert len(spans) == 4
    for call in calls:
        assert call.parent is not None
        assert call.parent.span_id == turn_span.context.span_id
        assert call.context.trace_id == turn_span.context.trace_id
        assert call.attributes is not None
        assert call.attributes["gen_ai.operation.name"] == "chat"
    failed, retried, answered = (dict(c.attributes or {}) for c in calls)
    # The conventions' well-known name of the API; the configured name beside it.
    assert (failed["gen_ai.provider.name"], failed["relevo.provider"]) == ("openai", "oa")
    assert failed["gen_ai.request.model"] == "alpha"
    assert failed["error.type"] == result.attempts[0].error_class == "server_error"
    assert failed["http.response.status_code"] == 500
    assert retried["relevo.retry_index"] == 1
    assert calls[0].status.status_code is StatusCode.ERROR
    assert "gen_ai.response.model" not in failed
    assert (answered["gen_ai.provider.name"], answered["relevo.provider"]) == ("anthropic", "an")
    assert answered["gen_ai.request.model"] == "beta"
    assert answered["gen_ai.response.model"] == "beta-20261201"  # as the provider said
    assert answered["gen_ai.usage.input_tokens"] == result.usage.input_tokens > 0
    assert answered["gen_ai.usage.output_tokens"] == result.usage.output_tokens > 0
    assert "error.type" not in answered
    assert calls[2].status.status_code is StatusCode.UNSET
    # The turn: asked for the primary, answered by the backup, as its log line says.
    assert turn_span.parent is None
    assert turn_span.kind is SpanKind.INTERNAL
    whole = dict(turn_span.attributes or {})
    assert whole["relevo.turn_id"] == request.turn_id
    assert whole["gen_ai.request.model"] == "alpha"
    assert (whole["gen_ai.provider.name"], whole["relevo.provider"]) == ("anthropic", "an")
    assert whole["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert (whole["relevo.status"], whole["relevo.step"], whole["relevo.attempts"]) == ("ok", 1, 3)
    assert turn_span.status.status_code is StatusCode.UNSET


@pytest.mark.usefixtures("traced")
async def test_the_turn_span_names_its_chain_and_carries_its_metadata(sim: Simulator) -> None:
    request = turn().model_copy(update={"metadata": {"agent": "triage", "user": "u-42"}})
    result = await tracing.traced_turn(request, run(settings(sim.url, CHAIN), request), None, {})
    assert result.metadata == {"agent": "triage", "user": "u-42"}
    [turn_span] = named(EXPORTER.get_finished_spans(), "relevo.turn")
    whole = dict(turn_span.attributes or {})
    assert whole["relevo.chain"] == "default"
    assert (whole["relevo.metadata.agent"], whole["relevo.metadata.user"]) == ("triage", "u-42")


@pytest.mark.usefixtures("traced")
async def test_a_skipped_model_is_an_event_on_the_turn_span(sim: Simulator) -> None:
    request = turn()
    guard = ScriptedGuard({"alpha": Availability.OPEN})
    config = settings(sim.url, CHAIN)
    providers = {name: p.gen_ai_provider for name, p in config.providers.items()}
    result = await tracing.traced_turn(request, run(config, request, guard=guard), None, providers)
    assert [a.outcome for a in result.attempts] == [AttemptOutcome.SKIPPED, AttemptOutcome.OK]
    spans = EXPORTER.get_finished_spans()
    assert [s.name for s in spans] == ["chat beta", "relevo.turn"]
    [event] = spans[1].events
    assert event.name == "relevo.model_skipped"
    assert dict(event.attributes or {}) == {
        "gen_ai.provider.name": "openai",
        "relevo.provider": "oa",
        "gen_ai.request.model": "alpha",
        "relevo.model": "openai/alpha",
        "relevo.reason": "breaker_open",
    }


@pytest.mark.usefixtures("traced")
def test_one_trace_runs_from_the_enqueue_through_celery_to_each_attempt(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=500, times=1))
    config = settings(sim.url, CHAIN, observability={"tracing": True})
    caller = trace.get_tracer("tests")
    with stub_fleet(config, concurrency=2) as fleet, caller.start_as_current_span("caller") as up:
        handle = enqueue_turn(turn(), app=fleet.app, limits=fleet.settings.limits)
        result = handle.get(timeout_s=20)
    assert result.status is Status.OK
    spans = EXPORTER.get_finished_spans()
    [enqueue] = named(spans, "relevo.enqueue")
    [turn_span] = named(spans, "relevo.turn")
    calls = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert [s.name for s in calls] == ["chat alpha", "chat alpha"]  # failed, then retried
    trace_id = up.get_span_context().trace_id
    assert {s.context.trace_id for s in [enqueue, turn_span, *calls]} == {trace_id}
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == up.get_span_context().span_id
    assert (enqueue.attributes or {})["messaging.message.id"] == handle.turn_id
    # The worker's turn span continues the producer's, across the broker.
    assert turn_span.kind is SpanKind.CONSUMER
    assert turn_span.parent is not None
    assert turn_span.parent.is_remote
    assert turn_span.parent.span_id == enqueue.context.span_id
    assert (turn_span.attributes or {})["relevo.queue.wait_ms"] >= 0
    assert {c.parent.span_id for c in calls if c.parent} == {turn_span.context.span_id}
    assert (calls[0].attributes or {})["error.type"] == "server_error"


def without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every `opentelemetry` import fail here, as where the packages are not installed."""
    for name in [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]:
        monkeypatch.setitem(sys.modules, name, None)


async def test_with_tracing_off_nothing_is_recorded_and_turns_run(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing.trace_celery(TASK_NAME)  # the publish hooks, as a process that traced once has
    assert not tracing.configure_tracing(ObservabilitySettings())
    # Off, no hook so much as imports OpenTelemetry: any import would fail the turn.
    without_opentelemetry(monkeypatch)
    request = turn()
    coro = run(settings(sim.url, CHAIN), request)
    assert tracing.traced_turn(request, coro) is coro  # the turn itself: no wrapper
    assert (await coro).status is Status.OK
    headers = {"id": "t-1"}
    before_task_publish.send(sender=TASK_NAME, headers=headers, routing_key="relevo")
    assert headers == {"id": "t-1"}
    assert tracing.carried(object()) is None
    assert EXPORTER.get_finished_spans() == ()


async def test_without_opentelemetry_tracing_stays_off(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_opentelemetry(monkeypatch)
    with capture_logs() as logs:
        assert not tracing.configure_tracing(ObservabilitySettings(tracing=True))
    assert [e["event"] for e in logs] == ["tracing.unavailable"]
    request = turn()
    result = await tracing.traced_turn(request, run(settings(sim.url, CHAIN), request))
    assert result.status is Status.OK
    assert EXPORTER.get_finished_spans() == ()
