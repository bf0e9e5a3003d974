"""The chain's questions to the fleet: breakers, cooldowns, kill switch, budgets, probes."""

from __future__ import annotations

import pytest

from tests.chainkit import fault, run, settings, turn
from worker.guard.protocol import Availability, Signal
from worker.guard.testing import ScriptedGuard
from worker.simulator import Fault, Simulator
from worker.types import AttemptOutcome, Message, Status, Tool, ToolCall

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


async def test_open_breaker_skips_the_model_without_a_call(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.OPEN})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.status is Status.OK
    assert result.step == 1
    assert sim.calls("alpha") == 0
    assert result.attempts[0].outcome is AttemptOutcome.SKIPPED
    assert result.attempts[0].error_class == "breaker_open"


async def test_open_vendor_breaker_skips_every_model_of_that_vendor(sim: Simulator) -> None:
    guard = ScriptedGuard(
        {"alpha": Availability.VENDOR_OPEN, "alpha-mini": Availability.VENDOR_OPEN}
    )
    config = settings(sim.url, ("openai/alpha", "openai/alpha-mini", "anthropic/beta"))
    result = await run(config, turn(), guard=guard)
    assert result.effective_model == "anthropic/beta"
    assert sim.calls("alpha") + sim.calls("alpha-mini") == 0
    assert [a.error_class for a in result.attempts[:2]] == ["vendor_breaker_open"] * 2


async def test_cooldown_skips_the_pair(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.COOLDOWN})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.step == 1
    assert sim.calls("alpha") == 0


async def test_exhausted_account_degrades_without_any_call(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.EXHAUSTED})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.status is Status.DEGRADED
    assert result.reason == "provider_quota_exhausted"
    assert sim.calls() == 0


async def test_kill_switch_rejects_and_holds_the_turn(sim: Simulator) -> None:
    guard = ScriptedGuard(kill_switch="incident 42")
    request = turn()
    result = await run(settings(sim.url), request, guard=guard)
    assert result.status is Status.REJECTED
    assert result.reason == "kill_switch"
    assert sim.calls() == 0
    assert request.turn_id in guard.held[0]
    # The first attempt's reservation is given back.
    assert guard.concluded[0][3] is None


async def test_half_open_calls_only_with_the_probe(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.PROBE})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.step == 0
    assert len(guard.probes) == 1
    assert guard.concluded[-1][2] is Signal.SUCCESS


async def test_half_open_without_the_probe_skips(sim: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.PROBE}, probe_granted=False)
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.step == 1
    assert sim.calls("alpha") == 0
    assert result.attempts[0].error_class == "breaker_half_open"


async def test_failed_probe_does_not_retry_the_same_model(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "server_error"))
    guard = ScriptedGuard({"alpha": Availability.PROBE})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert sim.calls("alpha") == 1
    assert result.step == 1


async def test_verdicts_reach_the_guard(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "server_is_overloaded"))
    sim.set_faults("beta", fault("anthropic", "rate_limit_error", retry_after_s=30))
    guard = ScriptedGuard()
    await run(settings(sim.url), turn(), guard=guard)
    verdicts = [(t.provider_model, v) for t, _, v, _ in guard.concluded]
    assert verdicts == [
        ("alpha", Signal.MODEL_FAILURE),
        ("beta", Signal.RATE_LIMITED),
        ("gamma", Signal.SUCCESS),
    ]


async def test_budget_refusal_degrades_the_turn(sim: Simulator) -> None:
    guard = ScriptedGuard(refuse={"oa": "tenant_budget_exhausted"})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.status is Status.DEGRADED
    assert result.reason == "tenant_budget_exhausted"
    assert sim.calls() == 0


async def test_fallback_cap_stops_the_backup_but_not_the_primary(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    guard = ScriptedGuard(refuse={"an": "fallback_cap_reached"})
    result = await run(settings(sim.url), turn(), guard=guard)
    assert result.status is Status.DEGRADED
    assert result.reason == "fallback_cap_reached"
    assert sim.calls("alpha") == 1
    assert sim.calls("beta") == 0
    assert [c.fallback for c in guard.reserved] == [False, True]


async def test_every_reservation_is_settled_or_released(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "server_error"))
    guard = ScriptedGuard()
    result = await run(settings(sim.url), turn(), guard=guard)
    reserved = sorted(c.charge_id for c in guard.reserved)
    concluded = sorted(c.charge_id for _, c, _, _ in guard.concluded)
    assert reserved == concluded
    charged = [cost for _, _, _, cost in guard.concluded if cost is not None]
    assert charged == [result.cost_micros]
    assert all(c.micros > 0 for c in guard.reserved)


SEND = Tool(name="send_invoice", side_effects=True)
LOOKUP = Tool(name="lookup_order")


async def test_backup_that_cannot_call_the_tools_is_skipped(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    config = settings(
        sim.url,
        models={"anthropic/beta": _with("anthropic", "an", "beta", tools="none")},
    )
    result = await run(config, turn(tools=(SEND, LOOKUP)))
    assert result.effective_model == "google/gamma"
    assert result.step == 2
    assert result.attempts[1].error_class == "incapable"
    assert sim.calls("beta") == 0


async def test_read_only_degradation_calls_without_side_effecting_tools(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    config = settings(
        sim.url,
        models={
            "anthropic/beta": _with(
                "anthropic", "an", "beta", tools="read_only", degrade_to_read_only=True
            )
        },
    )
    result = await run(config, turn(tools=(SEND, LOOKUP)))
    assert result.effective_model == "anthropic/beta"
    assert result.status is Status.DEGRADED
    assert result.reason == "read_only"
    assert result.read_only
    assert result.dropped_tools == ("send_invoice",)
    assert sim.requests("beta")[0].tools == ("lookup_order",)


async def test_small_window_backup_gets_a_trimmed_history(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    history: list[Message] = [Message(role="system", content="Support agent.")]
    for i in range(10):
        call = ToolCall(id=f"c{i}", name="lookup_order", arguments={"n": i})
        history += [
            Message(role="user", content=f"q{i} " + "x" * 800),
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=f"c{i}", content="y" * 800),
            Message(role="assistant", content="a" * 800),
        ]
    history.append(Message(role="user", content="latest"))
    config = settings(
        sim.url, models={"anthropic/beta": _with("anthropic", "an", "beta", context_window=3000)}
    )
    result = await run(config, turn(messages=tuple(history), tools=(LOOKUP,)))
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    assert result.trimmed_messages > 0
    sent = sim.requests("beta")[0]
    assert sent.body["system"]
    assert sim.requests("alpha")[0].message_count == len(history)
    assert sent.message_count < len(history) - 1


def _with(vendor: str, provider: str, model_id: str, **extra: object) -> dict[str, object]:
    return {
        "vendor": vendor,
        "context_window": 100_000,
        "serve": [{"provider": provider, "model_id": model_id}],
        **extra,
    }


async def test_handoff_degradation_hands_the_turn_to_people(sim: Simulator) -> None:
    sim.set_faults("alpha", fault("openai", "insufficient_quota"))
    guard = ScriptedGuard()
    request = turn()
    config = settings(sim.url, degradation={"action": "handoff"})
    result = await run(config, request, guard=guard)
    assert result.status is Status.DEGRADED
    assert result.degradation == "handoff"
    assert result.degradation_message is None
    [(reason, payload)] = guard.handed_off
    assert reason == "provider_quota_exhausted"
    assert request.turn_id in payload
