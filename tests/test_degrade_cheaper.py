"""`[degradation] action = "cheaper_model"`: a turn the budget refused gets one call on a
cheaper model; a provider's quota never moves a turn to it.

Real HTTP to the simulator; the guard is scripted (`ScriptedGuard`, which refuses per
provider), except for one test on a real Redis ledger.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from redis.asyncio import Redis

import budgets
from tests.chainkit import fault, model, run, settings, turn
from worker.errors import ConfigError
from worker.guard.protocol import Availability, Signal
from worker.guard.redis_guard import open_guard
from worker.guard.testing import ScriptedGuard
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.turn.stand_in import CHEAPER_MODEL_REASONS
from worker.types import AttemptOutcome, Status, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PRIMARY, CHEAP = "openai/alpha", "google/gamma-lite"
# The cheap model is on other providers than the primary (oa), so `refuse` can tell them
# apart: first Gemini (gg), then Anthropic's endpoint (an).
CHEAP_ID, CHEAP_BACKUP_ID = "gamma-lite", "lite-an"
MESSAGE = "Back soon."


def cheaper(sim: Simulator, **sections: Any) -> Settings:
    """The three-model chain, alpha first, degrading to the cheap model."""
    sections.setdefault("budgets", {"held_wait_s": 0})
    return settings(
        sim.url,
        models={CHEAP: model("google", ("gg", CHEAP_ID), ("an", CHEAP_BACKUP_ID), prices=(1, 1))},
        degradation={"action": "cheaper_model", "cheaper_model": CHEAP, "message": MESSAGE},
        **sections,
    )


def assert_message(result: TurnResult, reason: str) -> None:
    """The turn degraded as "message" does, for `reason`, without a cheap answer."""
    assert result.status is Status.DEGRADED
    assert result.reason == reason
    assert result.degradation == "message"
    assert result.degradation_message == MESSAGE
    assert result.reply is None
    assert result.effective_model is None


@pytest.mark.parametrize("reason", sorted(CHEAPER_MODEL_REASONS))
async def test_a_budget_refusal_gets_the_cheaper_models_answer(sim: Simulator, reason: str) -> None:
    guard = ScriptedGuard(refuse={"oa": reason})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert result.status is Status.DEGRADED
    assert result.reason == reason
    assert result.degradation == "cheaper_model"
    assert result.degradation_message is None
    assert result.reply is not None
    assert result.reply.text
    assert (result.effective_model, result.effective_provider) == (CHEAP, "gg")
    # No step of the chain: the fallback rate does not count money-moved turns.
    assert result.step is None
    assert sim.calls("alpha") == 0
    assert sim.calls(CHEAP_ID) == 1
    assert sim.calls() == 1
    skipped, answered = result.attempts
    assert (skipped.model, skipped.outcome, skipped.error_class) == (
        PRIMARY,
        AttemptOutcome.SKIPPED,
        reason,
    )
    assert (answered.model, answered.provider, answered.outcome) == (
        CHEAP,
        "gg",
        AttemptOutcome.OK,
    )
    # Reserved as a fallback, concluded and settled like any attempt, at the result's cost.
    first, cheap = guard.reserved
    assert (first.provider, first.fallback) == ("oa", False)
    assert (cheap.provider, cheap.fallback) == ("gg", True)
    [(target, charge, signal, cost)] = guard.concluded
    assert (target.model, charge, signal) == (CHEAP, cheap, Signal.SUCCESS)
    assert cost == result.cost_micros
    assert result.cost_micros > 0


async def test_a_refusal_after_the_primary_failed_gets_the_cheaper_model(
    sim: Simulator,
) -> None:
    sim.set_faults("alpha", Fault(status=503))
    guard = ScriptedGuard(refuse={"an": "fallback_cap_reached"})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert result.reason == "fallback_cap_reached"
    assert result.degradation == "cheaper_model"
    assert result.effective_model == CHEAP
    assert sim.calls("beta") == 0
    assert sim.calls(CHEAP_ID) == 1
    outcomes = [(a.model, a.outcome, a.error_class) for a in result.attempts]
    assert outcomes == [
        (PRIMARY, AttemptOutcome.ERROR, "overloaded"),
        ("anthropic/beta", AttemptOutcome.SKIPPED, "fallback_cap_reached"),
        (CHEAP, AttemptOutcome.OK, None),
    ]


async def test_a_providers_quota_error_never_moves_to_the_cheaper_model(
    sim: Simulator,
) -> None:
    sim.set_faults("alpha", fault("openai", "insufficient_quota"))
    guard = ScriptedGuard()
    result = await run(cheaper(sim), turn(), guard=guard)
    assert_message(result, "provider_quota_exhausted")
    assert sim.calls("alpha") == 1
    assert sim.calls(CHEAP_ID) + sim.calls(CHEAP_BACKUP_ID) == 0
    assert [c.provider for c in guard.reserved] == ["oa"]


async def test_an_exhausted_account_never_moves_to_the_cheaper_model(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.EXHAUSTED})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert_message(result, "provider_quota_exhausted")
    assert sim.calls() == 0


async def test_a_refused_cheap_reservation_degrades_with_the_first_reason(
    sim: Simulator,
) -> None:
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted", "gg": "fallback_cap_reached"})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert_message(result, "tenant_budget_exhausted")
    assert sim.calls() == 0
    assert [(a.model, a.error_class) for a in result.attempts] == [
        (PRIMARY, "tenant_budget_exhausted"),
        (CHEAP, "fallback_cap_reached"),
    ]
    # One reservation on the cheap model: a refusal there does not try its other provider.
    assert [c.provider for c in guard.reserved] == ["oa", "gg"]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(Fault(status=503), id="server_error"),
        pytest.param(fault("gemini", "api_key_invalid"), id="auth_failed"),
        pytest.param(fault("gemini", "failed_precondition"), id="its_own_quota"),
    ],
)
async def test_a_failed_cheap_call_degrades_with_the_first_reason(
    sim: Simulator, failure: Fault
) -> None:
    sim.set_faults(CHEAP_ID, failure)
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted"})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert_message(result, "tenant_budget_exhausted")
    # One call: no retry, and not the cheap model's other provider either.
    assert sim.calls(CHEAP_ID) == 1
    assert sim.calls(CHEAP_BACKUP_ID) + sim.calls("alpha") == 0
    assert result.attempts[-1].outcome is AttemptOutcome.ERROR
    # The failed call's reservation is given back (none of these is billed).
    [(_, charge, _, cost)] = guard.concluded
    assert (charge.provider, cost) == ("gg", None)
    assert result.cost_micros == 0


async def test_a_cheap_call_past_the_deadline_degrades_and_is_charged(sim: Simulator) -> None:
    sim.set_faults(CHEAP_ID, Fault(latency_s=2.0))
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted"})
    config = cheaper(sim, first_byte_timeout_s=5.0)
    result = await run(config, turn(deadline_s=0.5), guard=guard)
    assert_message(result, "tenant_budget_exhausted")
    assert result.attempts[-1].error_class == "interrupted"
    # Cut short in flight: the provider may bill it, so it is charged at its reservation.
    [(_, charge, _, cost)] = guard.concluded
    assert cost == charge.micros == result.cost_micros


async def test_a_cheap_answer_broken_mid_stream_fails_as_any_locked_turn(
    sim: Simulator,
) -> None:
    # Text already reached the caller: the lock forbids ending with the message instead.
    sim.set_faults(CHEAP_ID, Fault(error_after_tokens=2))
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted"})
    pieces: list[str] = []
    result = await run(cheaper(sim), turn(stream=True), guard=guard, on_text=pieces.append)
    assert pieces
    assert result.status is Status.FAILED
    assert result.effective_model == CHEAP
    assert sim.calls(CHEAP_BACKUP_ID) == 0
    # It streamed, so the provider bills it: charged its input and what it streamed.
    [(_, charge, _, cost)] = guard.concluded
    assert cost == result.cost_micros
    assert cost is not None
    assert 0 < cost < charge.worst


async def test_the_cheap_models_breakers_are_honoured(sim: Simulator) -> None:
    guard = ScriptedGuard({CHEAP_ID: Availability.OPEN}, refuse={"oa": "tenant_budget_exhausted"})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert result.degradation == "cheaper_model"
    assert (result.effective_model, result.effective_provider) == (CHEAP, "an")
    assert sim.calls(CHEAP_ID) == 0
    assert sim.calls(CHEAP_BACKUP_ID) == 1
    assert [(a.provider, a.error_class) for a in result.attempts[1:]] == [
        ("gg", "breaker_open"),
        ("an", None),
    ]


async def test_every_cheap_provider_unavailable_degrades_with_the_first_reason(
    sim: Simulator,
) -> None:
    guard = ScriptedGuard(
        {CHEAP_ID: Availability.COOLDOWN, CHEAP_BACKUP_ID: Availability.EXHAUSTED},
        refuse={"oa": "tenant_budget_exhausted"},
    )
    result = await run(cheaper(sim), turn(), guard=guard)
    assert_message(result, "tenant_budget_exhausted")
    assert sim.calls() == 0
    assert [(a.provider_model, a.error_class) for a in result.attempts[1:]] == [
        (CHEAP_ID, "cooldown"),
        (CHEAP_BACKUP_ID, "provider_quota_exhausted"),
    ]


async def test_the_kill_switch_still_rejects(sim: Simulator) -> None:
    # The switch went on between the primary's refusal and the cheap reservation.
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted", "gg": "kill_switch"})
    request = turn()
    result = await run(cheaper(sim), request, guard=guard)
    assert result.status is Status.REJECTED
    assert result.reason == "kill_switch"
    assert result.degradation is None
    assert sim.calls() == 0
    assert request.turn_id in guard.held[0]


async def test_the_kill_switch_seen_before_any_reservation_rejects(sim: Simulator) -> None:
    guard = ScriptedGuard(kill_switch="incident 42", refuse={"oa": "tenant_budget_exhausted"})
    result = await run(cheaper(sim), turn(), guard=guard)
    assert result.status is Status.REJECTED
    assert result.reason == "kill_switch"
    assert sim.calls() == 0
    assert [c.provider for c in guard.reserved] == ["oa"]


async def test_a_tenant_that_cannot_afford_the_primary_gets_a_cheap_answer_on_redis(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    # alpha's worst case for 1024 output tokens is over $0.008; the cheap model's about $0.001.
    config = cheaper(
        sim,
        redis={"url": redis_url, "namespace": namespace},
        budgets={"default_daily_usd": "0.005", "held_wait_s": 0},
    )
    guard = open_guard(config)
    try:
        result = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert result.status is Status.DEGRADED
    assert result.reason == "tenant_budget_exhausted"
    assert result.degradation == "cheaper_model"
    assert result.effective_model == CHEAP
    assert sim.calls("alpha") == 0
    assert sim.calls(CHEAP_ID) == 1
    client = Redis.from_url(redis_url)
    try:
        ledger = budgets.Ledger(
            client, namespace=namespace, default_limits=config.budgets.default_limits()
        )
        report = await ledger.report("acme")
    finally:
        await client.aclose()
    assert result.cost_micros > 0
    assert report.day.spent_micros == result.cost_micros
    assert report.reserved_micros == 0


# Settings: the cheaper model must be named, configured, and not the primary.

BASE: dict[str, Any] = {
    "chain": {"models": ["a/one", "b/two"]},
    "providers": {
        "pa": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"},
        "pk": {
            "kind": "gemini",
            "base_url": "http://127.0.0.1:1",
            "api_key_env": "RELEVO_TEST_NO_SUCH_KEY",
        },
    },
    "models": {
        "a/one": {
            "vendor": "a",
            "context_window": 1000,
            "serve": [{"provider": "pa", "model_id": "one"}],
        },
        "b/two": {
            "vendor": "b",
            "context_window": 1000,
            "serve": [{"provider": "pa", "model_id": "two"}],
        },
        "c/lite": {
            "vendor": "c",
            "context_window": 1000,
            "serve": [{"provider": "pa", "model_id": "lite"}],
        },
        "d/keyless": {
            "vendor": "d",
            "context_window": 1000,
            "serve": [{"provider": "pk", "model_id": "k"}],
        },
    },
}


def with_degradation(**degradation: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["degradation"] = degradation
    return data


def test_a_cheaper_model_outside_the_chain_loads() -> None:
    loaded = load_settings(data=with_degradation(action="cheaper_model", cheaper_model="c/lite"))
    assert loaded.degradation.action == "cheaper_model"
    assert loaded.degradation.cheaper_model == "c/lite"


@pytest.mark.parametrize(
    ("degradation", "says"),
    [
        (
            {"action": "cheaper_model"},
            r'degradation: cheaper_model: needed with action = "cheaper_model"',
        ),
        (
            {"action": "cheaper_model", "cheaper_model": "z/nowhere"},
            r"degradation\.cheaper_model: 'z/nowhere' is not defined under \[models\]",
        ),
        (
            {"action": "cheaper_model", "cheaper_model": "a/one"},
            r"degradation\.cheaper_model: 'a/one' is the chain's primary",
        ),
        ({"action": "cheaper_model", "cheaper_model": "not a slug"}, r"degradation\.cheaper_model"),
    ],
)
def test_a_bad_cheaper_model_is_named(degradation: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_settings(data=with_degradation(**degradation))


def test_the_cheaper_models_api_key_is_checked_at_start_up() -> None:
    data = with_degradation(action="cheaper_model", cheaper_model="d/keyless")
    with pytest.raises(ConfigError, match=r"providers\.pk\.api_key_env.*RELEVO_TEST_NO_SUCH_KEY"):
        load_settings(data=data)
    # Without the action the model is never called, so its key is not needed.
    data["degradation"]["action"] = "message"
    assert load_settings(data=data).degradation.cheaper_model == "d/keyless"
