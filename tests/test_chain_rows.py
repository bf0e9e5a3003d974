"""The rows for responses that read alike but mean other things, over real HTTP.

Context overflows worded per provider, rate-limit hints other than Retry-After, a model
the provider no longer serves, and Gemini's per-day quotas: each played with the
provider's real body (`worker.simulator.catalogue`), on the chain alone and, for what
the fleet remembers, on a real Redis.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

import breakers
from tests.chainkit import ID_OF, ORDER, fault, model, run, settings, turn
from worker.adapters.waits import seconds_to_daily_reset
from worker.guard.redis_guard import open_guard
from worker.guard.stores import breaker_store
from worker.observability.metrics import MODEL_NOT_FOUND_TOTAL, TurnMetrics
from worker.simulator import Fault, Simulator
from worker.simulator.catalogue import Kind, canned
from worker.types import AttemptOutcome, Status

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


AZURE = {"openai/azure": model("openai", ("az", "alpha-az"))}


# --- context overflow -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "kind", "name"),
    [
        ("an", "anthropic", "context_limit_with_max_tokens"),
        ("oa", "openai", "context_window_exceeded"),
        ("oa", "openai", "vllm_context_length"),
        ("az", "openai", "context_length_exceeded"),
        ("gg", "gemini", "context_too_long"),
    ],
)
async def test_each_wording_of_a_context_overflow_goes_to_a_larger_window(
    sim: Simulator, provider: str, kind: Kind, name: str
) -> None:
    small = {"context_window": 8000, "serve": [{"provider": provider, "model_id": "small"}]}
    smaller = {"context_window": 4000, "serve": [{"provider": "oa", "model_id": "smaller"}]}
    config = settings(
        sim.url,
        ("x/small", "x/smaller", "anthropic/beta"),
        models={"x/small": {"vendor": "x", **small}, "x/smaller": {"vendor": "x", **smaller}},
    )
    sim.set_faults("small", fault(kind, name))
    result = await run(config, turn())
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    assert sim.calls("small") == 1
    assert sim.calls("smaller") == 0
    assert [a.error_class for a in result.attempts[:2]] == [
        "context_length_exceeded",
        "context_too_small",
    ]


# --- rate-limit hints -------------------------------------------------------------------


def _with(
    kind: Kind,
    name: str,
    *,
    headers: dict[str, str] | None = None,
    swap: tuple[str, str] = ("", ""),
) -> Fault:
    """A catalogue error once, its headers updated and words of its message swapped."""
    error = canned(kind, name)
    body: Any = error.body
    body["error"]["message"] = body["error"]["message"].replace(*swap)
    headers = {**error.headers, **(headers or {})}
    return Fault(status=error.status, body=body, headers=headers, times=1)


async def _waits_then_answers(sim: Simulator, chain: tuple[str, ...], fault_: Fault) -> float:
    sim.set_faults(ID_OF[chain[0]], fault_)
    started = time.monotonic()
    result = await run(settings(sim.url, chain), turn())
    waited = time.monotonic() - started
    assert result.status is Status.OK
    assert result.step == 0, "a short wait on the same model beats a fallback"
    assert sim.calls(ID_OF[chain[0]]) == 2
    assert sim.calls(ID_OF[chain[1]]) == 0
    return waited


async def test_openai_reset_headers_are_waited_for_on_the_same_model(sim: Simulator) -> None:
    # x-ratelimit-remaining-tokens is 0: its reset (644ms) is the wait, not the requests' 12ms.
    waited = await _waits_then_answers(
        sim, ORDER["openai"], _with("openai", "rate_limit_reset_headers")
    )
    assert waited >= 0.6


async def test_openai_try_again_in_the_message_is_waited_for(sim: Simulator) -> None:
    # The quoted body says "in 1.5s"; the same format, shorter, keeps the test quick.
    waited = await _waits_then_answers(
        sim, ORDER["openai"], _with("openai", "rate_limit_try_again", swap=("1.5s", "0.4s"))
    )
    assert waited >= 0.38


async def test_anthropic_reset_timestamps_are_waited_for_on_the_same_model(
    sim: Simulator,
) -> None:
    reset = (datetime.now(UTC) + timedelta(seconds=0.5)).isoformat().replace("+00:00", "Z")
    headers = {
        "anthropic-ratelimit-input-tokens-reset": reset,
        "anthropic-ratelimit-requests-reset": reset,
    }
    waited = await _waits_then_answers(
        sim, ORDER["anthropic"], _with("anthropic", "rate_limit_reset_headers", headers=headers)
    )
    assert waited >= 0.4


# --- model not found --------------------------------------------------------------------

NOT_FOUND: list[tuple[tuple[str, ...], str, Kind, str]] = [
    (ORDER["openai"], "alpha", "openai", "model_not_found"),
    (("openai/azure", "anthropic/beta"), "alpha-az", "openai", "deployment_not_found"),
    (ORDER["anthropic"], "beta", "anthropic", "not_found_error"),
    (ORDER["gemini"], "gamma", "gemini", "not_found"),
]


@pytest.mark.parametrize(("chain", "served", "kind", "name"), NOT_FOUND)
async def test_a_model_that_is_gone_falls_back_and_alerts(
    sim: Simulator, chain: tuple[str, ...], served: str, kind: Kind, name: str
) -> None:
    sim.set_faults(served, fault(kind, name))
    with capture_logs() as logs:
        result = await run(settings(sim.url, chain, models=AZURE), turn())
    assert result.status is Status.OK
    assert result.step == 1
    assert sim.calls(served) == 1, "no retry: the same model would be gone again"
    assert result.attempts[0].error_class == "model_not_found"
    [alert] = [e for e in logs if e["event"] == "model.not_found"]
    assert alert["log_level"] == "error"
    assert alert["provider_model"] == served
    metrics = TurnMetrics()
    metrics.record(result)
    labels = {"model": chain[0], "provider": result.attempts[0].provider, "provider_model": served}
    assert metrics.registry.get_sample_value(MODEL_NOT_FOUND_TOTAL, labels) == 1


# --- Gemini's quotas --------------------------------------------------------------------


async def test_a_gemini_per_minute_quota_waits_for_its_retry_delay(sim: Simulator) -> None:
    # The same "check your plan and billing" words as a spent quota, but a per-minute id.
    per_minute = fault("gemini", "resource_exhausted", times=1, retry_after_s=0.3)
    waited = await _waits_then_answers(sim, ORDER["gemini"], per_minute)
    assert waited >= 0.28


@pytest.mark.parametrize("name", ["daily_quota_exhausted", "quota_billing"])
async def test_a_spent_gemini_quota_degrades_without_fallback(sim: Simulator, name: str) -> None:
    sim.set_faults("gamma", fault("gemini", name))
    result = await run(settings(sim.url, ORDER["gemini"]), turn())
    assert result.status is Status.DEGRADED
    assert result.reason == "provider_quota_exhausted"
    assert result.attempts[0].error_class == "quota_exhausted"
    assert sim.calls() == 1


# --- on the fleet's store ---------------------------------------------------------------


async def _report(config: Any) -> breakers.FleetReport:
    guard = open_guard(config)
    try:
        return await breakers.Operators(breaker_store(config, guard.redis)).report()
    finally:
        await guard.aclose()


async def test_a_gone_model_is_skipped_fleet_wide_for_the_long_skip(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    sim.set_faults("alpha", fault("openai", "model_not_found"))
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    guard = open_guard(config)
    try:
        first = await run(config, turn(), guard=guard)
        second = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert first.step == second.step == 1
    assert sim.calls("alpha") == 1, "the second turn skips the gone model without a call"
    assert second.attempts[0].outcome is AttemptOutcome.SKIPPED
    assert second.attempts[0].error_class == "cooldown"
    [skip] = (await _report(config)).cooldowns
    assert skip.pair == breakers.Pair("oa", "alpha")
    # breakers.model_gone_s (1 h by default), past the 600 s cap of a rate-limit cooldown.
    assert 3500 < skip.remaining_s <= 3600


async def test_gemini_daily_quota_marks_that_model_until_midnight_pacific(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    sim.set_faults("gamma", fault("gemini", "daily_quota_exhausted"))
    sibling = {"google/gamma-2": model("google", ("gg", "gamma-2"))}
    config = settings(
        sim.url, ORDER["gemini"], models=sibling, redis={"url": redis_url, "namespace": namespace}
    )
    other = settings(
        sim.url,
        ("google/gamma-2", "openai/alpha"),
        models=sibling,
        redis={"url": redis_url, "namespace": namespace},
    )
    guard = open_guard(config)
    try:
        spent = await run(config, turn(), guard=guard)
        again = await run(config, turn(), guard=guard)
        sibling_turn = await run(other, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert spent.status is again.status is Status.DEGRADED
    assert spent.reason == again.reason == "provider_quota_exhausted"
    assert sim.calls("gamma") == 1, "a spent daily quota is not asked again"
    assert sim.calls("alpha") == 0, "money is no fallback case"
    # The same account's other model still has its own quota.
    assert sibling_turn.status is Status.OK
    assert sibling_turn.effective_model == "google/gamma-2"
    [mark] = (await _report(config)).exhausted
    assert mark.account == "gg|gamma"
    assert abs(mark.remaining_s - seconds_to_daily_reset()) < 30
