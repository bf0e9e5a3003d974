"""The chain end to end, over real HTTP to the simulated providers.

Each row of DESIGN.md's table "What each failure gets" is played here with the
providers' real error bodies (`worker.simulator.catalogue`).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.chainkit import ID_OF, ORDER, fault, run, settings, turn
from worker.errors import TurnFailed
from worker.guard import Availability, Conclusion, Signal
from worker.guard.testing import ScriptedGuard
from worker.simulator import Fault, Simulator
from worker.simulator.catalogue import Kind
from worker.types import AttemptOutcome, Status

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


async def test_healthy_turn_is_answered_by_the_primary(sim: Simulator) -> None:
    result = await run(settings(sim.url), turn())
    assert result.status is Status.OK
    assert result.step == 0
    assert result.effective_model == "openai/alpha"
    assert result.effective_provider == "oa"
    assert result.reply is not None
    assert "alpha" in result.reply.text
    assert result.usage.output_tokens > 0
    assert result.cost_micros > 0
    assert [a.outcome for a in result.attempts] == [AttemptOutcome.OK]
    assert sim.calls("alpha") == 1
    assert sim.calls("beta") == 0


async def test_attempts_are_placed_on_the_turn_s_timeline(sim: Simulator) -> None:
    """Each attempt ends `ended_ms` after the turn began; a streamed answer's first byte
    falls inside its attempt, and a call that streamed nothing has none."""
    sim.set_faults("alpha", Fault(status=500))
    result = await run(settings(sim.url), turn(stream=True))
    *errors, answer = result.attempts
    assert [a.outcome for a in errors] == [AttemptOutcome.ERROR] * 2
    ends = [a.ended_ms for a in result.attempts]
    assert ends == sorted(ends)
    assert ends[-1] <= result.latency_ms
    assert all(a.ended_ms >= a.latency_ms for a in result.attempts)
    assert all(a.first_byte_ms is None for a in errors)
    assert answer.first_byte_ms is not None
    assert 0 <= answer.first_byte_ms <= answer.latency_ms
    plain = await run(settings(sim.url), turn())
    assert plain.attempts[-1].first_byte_ms is None  # the whole answer came at once


# (primary kind, catalogue error, calls the primary receives, effective step)
FALLS_BACK: list[tuple[Kind, str, int]] = [
    ("openai", "server_error", 2),
    ("anthropic", "api_error", 2),
    ("gemini", "internal", 2),
    ("openai", "proxy_502_html", 2),
    ("gemini", "deadline_exceeded", 2),
    ("openai", "server_is_overloaded", 1),
    ("anthropic", "overloaded_error", 1),
    ("gemini", "unavailable", 1),
    ("openai", "empty_503", 1),
]


@pytest.mark.parametrize(("kind", "name", "primary_calls"), FALLS_BACK)
async def test_server_side_failures_fall_back_to_the_next_model(
    sim: Simulator, kind: Kind, name: str, primary_calls: int
) -> None:
    chain = ORDER[kind]
    sim.set_faults(ID_OF[chain[0]], fault(kind, name))
    result = await run(settings(sim.url, chain), turn())
    assert result.status is Status.OK
    assert result.step == 1
    assert result.primary_model == chain[0]
    assert result.effective_model == chain[1]
    assert sim.calls(ID_OF[chain[0]]) == primary_calls
    errors = [a for a in result.attempts if a.outcome is AttemptOutcome.ERROR]
    assert [a.retry_index for a in errors] == list(range(primary_calls))
    assert all(a.http_status is not None for a in errors)


STOPS: list[tuple[Kind, str, Status, str]] = [
    ("openai", "insufficient_quota", Status.DEGRADED, "provider_quota_exhausted"),
    ("openai", "credit_balance_exhausted", Status.DEGRADED, "provider_quota_exhausted"),
    ("openai", "billing_hard_limit_reached", Status.DEGRADED, "provider_quota_exhausted"),
    ("anthropic", "spend_limit", Status.DEGRADED, "provider_quota_exhausted"),
    ("anthropic", "workspace_spend_limit", Status.DEGRADED, "provider_quota_exhausted"),
    ("anthropic", "credit_balance_too_low", Status.DEGRADED, "provider_quota_exhausted"),
    ("openai", "invalid_api_key", Status.FAILED, "auth_failed"),
    ("anthropic", "authentication_error", Status.FAILED, "auth_failed"),
    ("anthropic", "permission_error", Status.FAILED, "auth_failed"),
    ("gemini", "api_key_invalid", Status.FAILED, "auth_failed"),
    ("gemini", "permission_denied", Status.FAILED, "auth_failed"),
    ("openai", "invalid_request_error", Status.FAILED, "invalid_request"),
    ("anthropic", "invalid_request_error", Status.FAILED, "invalid_request"),
    ("anthropic", "request_too_large", Status.FAILED, "invalid_request"),
    ("gemini", "invalid_argument", Status.FAILED, "invalid_request"),
]


@pytest.mark.parametrize(("kind", "name", "status", "reason"), STOPS)
async def test_money_auth_and_bad_requests_never_fall_back(
    sim: Simulator, kind: Kind, name: str, status: Status, reason: str
) -> None:
    chain = ORDER[kind]
    sim.set_faults(ID_OF[chain[0]], fault(kind, name))
    result = await run(settings(sim.url, chain), turn())
    assert result.status is status
    assert result.reason == reason
    assert sim.calls(ID_OF[chain[0]]) == 1
    assert sim.calls(ID_OF[chain[1]]) == 0
    assert sim.calls(ID_OF[chain[2]]) == 0


async def test_unprocessable_entity_fails_without_fallback(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=422, body={"detail": "unprocessable"}))
    result = await run(settings(sim.url), turn())
    assert result.status is Status.FAILED
    assert result.reason == "invalid_request"
    assert sim.calls("beta") == 0


async def test_degraded_turn_carries_the_configured_message(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "insufficient_quota"))
    config = settings(sim.url, degradation={"action": "message", "message": "Back soon."})
    result = await run(config, turn())
    assert result.degradation == "message"
    assert result.degradation_message == "Back soon."
    assert result.attempts[0].error_class == "quota_exhausted"


async def test_first_byte_timeout_moves_to_the_next_model(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(stall_first_byte_s=30))
    started = time.monotonic()
    result = await run(settings(sim.url, first_byte_timeout_s=0.3), turn())
    assert time.monotonic() - started < 3
    assert result.status is Status.OK
    assert result.step == 1
    assert result.attempts[0].error_class == "first_byte_timeout"
    assert sim.calls("alpha") == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_stream_that_opens_then_goes_silent_is_a_first_byte_timeout(
    sim: Simulator, kind: Kind
) -> None:
    chain = ORDER[kind]
    sim.set_faults(ID_OF[chain[0]], Fault(stall_before_content_s=30))
    result = await run(settings(sim.url, chain, first_byte_timeout_s=0.3), turn(stream=True))
    assert result.status is Status.OK
    assert result.effective_model == chain[1]
    assert result.attempts[0].error_class == "first_byte_timeout"


async def test_connection_refused_retries_once_then_moves_on(sim: Simulator) -> None:
    config = settings(sim.url, ("openai/dead", "anthropic/beta"))
    result = await run(config, turn())
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    errors = result.attempts[:2]
    assert [a.error_class for a in errors] == ["connection_error", "connection_error"]
    assert [a.retry_index for a in errors] == [0, 1]


@pytest.mark.parametrize(
    "headers",
    [{"retry-after": "1"}, {"retry-after-ms": "300"}],
    ids=["seconds", "milliseconds"],
)
async def test_rate_limit_waits_for_retry_after_when_it_fits(
    sim: Simulator, headers: dict[str, str]
) -> None:
    sim.set_faults(
        "beta",
        Fault(
            status=429,
            body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
            headers=headers,
            times=1,
        ),
    )
    started = time.monotonic()
    result = await run(settings(sim.url, ORDER["anthropic"]), turn())
    waited = time.monotonic() - started
    assert result.status is Status.OK
    assert result.step == 0
    assert sim.calls("beta") == 2
    expected = float(headers.get("retry-after", 0)) or int(headers["retry-after-ms"]) / 1000
    assert waited >= expected * 0.95
    assert [a.error_class for a in result.attempts] == ["rate_limited", None]


async def test_rate_limit_waits_for_an_http_date_retry_after(sim: Simulator) -> None:
    from email.utils import formatdate

    sim.set_faults(
        "alpha",
        Fault(
            status=429,
            # HTTP dates have whole seconds: two seconds ahead is at least one.
            headers={"retry-after": formatdate(time.time() + 2, usegmt=True)},
            times=1,
        ),
    )
    config = settings(sim.url, retry={"base_delay_s": 0.01, "retry_after_cap_s": 3})
    started = time.monotonic()
    result = await run(config, turn())
    assert result.step == 0
    assert sim.calls("alpha") == 2
    assert time.monotonic() - started >= 0.9


async def test_rate_limit_longer_than_the_cap_moves_on_at_once(sim: Simulator) -> None:
    sim.set_faults("beta", fault("anthropic", "rate_limit_error", retry_after_s=30))
    started = time.monotonic()
    result = await run(settings(sim.url, ORDER["anthropic"]), turn())
    assert time.monotonic() - started < 2
    assert result.step == 1
    assert sim.calls("beta") == 1


async def test_rate_limit_longer_than_the_deadline_moves_on(sim: Simulator) -> None:
    sim.set_faults("beta", fault("anthropic", "rate_limit_error", retry_after_s=0.9))
    result = await run(settings(sim.url, ORDER["anthropic"]), turn(deadline_s=0.5))
    assert sim.calls("beta") == 1
    assert result.step == 1


async def test_context_length_error_goes_only_to_a_larger_window(sim: Simulator) -> None:
    config = settings(
        sim.url,
        ("openai/alpha", "openai/alpha-mini", "anthropic/beta"),
        models={
            "openai/alpha": {
                "vendor": "openai",
                "context_window": 8000,
                "serve": [{"provider": "oa", "model_id": "alpha"}],
            },
            "openai/alpha-mini": {
                "vendor": "openai",
                "context_window": 4000,
                "serve": [{"provider": "oa", "model_id": "alpha-mini"}],
            },
        },
    )
    sim.set_faults("alpha", fault("openai", "context_length_exceeded"))
    result = await run(config, turn())
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    assert sim.calls("alpha-mini") == 0
    assert [a.error_class for a in result.attempts[:2]] == [
        "context_length_exceeded",
        "context_too_small",
    ]


async def test_context_length_error_with_no_larger_window_fails(sim: Simulator) -> None:
    sim.set_faults("gamma", fault("gemini", "context_too_long"))
    config = settings(
        sim.url,
        ("google/gamma", "openai/alpha-mini"),
        models={
            "openai/alpha-mini": {
                "vendor": "openai",
                "context_window": 50_000,
                "serve": [{"provider": "oa", "model_id": "alpha-mini"}],
            }
        },
    )
    result = await run(config, turn())
    assert result.status is Status.FAILED
    assert sim.calls("alpha-mini") == 0


async def test_the_deadline_stops_everything_at_once(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(stall_first_byte_s=30))
    started = time.monotonic()
    result = await run(settings(sim.url, first_byte_timeout_s=5), turn(deadline_s=0.4))
    assert time.monotonic() - started < 1.5
    assert result.status is Status.FAILED
    assert result.reason == "deadline_exceeded"
    assert result.attempts[-1].error_class == "interrupted"
    assert sim.calls("beta") == 0


async def test_caller_cancellation_stops_the_turn_without_fallback(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(stall_first_byte_s=30))
    task = asyncio.create_task(run(settings(sim.url, first_byte_timeout_s=5), turn()))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)
    assert sim.calls("beta") == 0


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_error_after_content_streamed_locks_the_turn_to_that_model(
    sim: Simulator, kind: Kind
) -> None:
    chain = ORDER[kind]
    sim.set_faults(ID_OF[chain[0]], Fault(error_after_tokens=3))
    pieces: list[str] = []
    result = await run(settings(sim.url, chain), turn(stream=True), on_text=pieces.append)
    assert result.status is Status.FAILED
    assert result.effective_model == chain[0]
    assert "".join(pieces)
    assert sim.calls(ID_OF[chain[1]]) == 0
    assert sim.calls(ID_OF[chain[2]]) == 0


async def test_stream_that_stalls_after_content_surfaces_the_error(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(stall_after_tokens=2, stall_after_s=30))
    config = settings(sim.url)
    config = config.model_copy(
        update={
            "providers": {
                **config.providers,
                "oa": config.providers["oa"].model_copy(update={"total_timeout_s": 0.8}),
            }
        }
    )
    result = await run(config, turn(stream=True))
    assert result.status is Status.FAILED
    assert result.reason == "response_timeout"
    assert sim.calls("beta") == 0


async def test_streamed_text_reaches_the_caller_as_it_arrives(sim: Simulator) -> None:
    pieces: list[str] = []
    result = await run(settings(sim.url), turn(stream=True), on_text=pieces.append)
    assert result.status is Status.OK
    assert len(pieces) > 1
    assert result.reply is not None
    assert "".join(pieces) == result.reply.text


async def test_provider_failover_comes_before_model_fallback(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "server_is_overloaded"))
    result = await run(settings(sim.url, ("openai/multi", "anthropic/beta")), turn())
    assert result.status is Status.OK
    assert result.step == 0
    assert result.effective_model == "openai/multi"
    assert result.effective_provider == "az"
    assert sim.calls("alpha-az") == 1
    assert sim.calls("beta") == 0


async def test_when_every_model_fails_the_error_carries_every_attempt(sim: Simulator) -> None:
    for model_id in ("alpha", "beta", "gamma"):
        sim.set_faults(model_id, Fault(status=503))
    result = await run(settings(sim.url), turn())
    assert result.status is Status.FAILED
    assert result.reason == "chain_exhausted"
    with pytest.raises(TurnFailed) as caught:
        result.raise_for_status()
    assert isinstance(caught.value, ExceptionGroup)
    errors = [a for a in result.attempts if a.outcome is AttemptOutcome.ERROR]
    assert len(errors) >= 3
    codes = [getattr(e, "code", None) for e in caught.value.exceptions]
    assert codes == [a.error_class for a in errors]


async def test_the_turn_is_never_rewritten_to_mention_fallback(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    request = turn()
    await run(settings(sim.url), request)
    sent = sim.requests("beta")[0].body
    assert sent["system"] == request.messages[0].content
    assert [m["content"] for m in sent["messages"]] == [request.messages[1].content]


class _OpensOnFailure(ScriptedGuard):
    """A fleet whose breaker for a model opens as soon as one of its calls fails."""

    async def conclude(self, end: Conclusion) -> None:
        await super().conclude(end)
        if end.signal is Signal.FAILURE:
            self.availability[end.target.provider_model] = Availability.OPEN


async def test_a_retry_is_not_sent_to_a_breaker_that_opened_meanwhile(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "server_error", times=1))
    result = await run(settings(sim.url), turn(), guard=_OpensOnFailure())
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    outcomes = [(a.model, a.outcome, a.error_class) for a in result.attempts]
    assert outcomes[1] == ("openai/alpha", AttemptOutcome.SKIPPED, Availability.OPEN.value)
    assert sim.calls("alpha") == 1  # the retry that would have succeeded was not sent
