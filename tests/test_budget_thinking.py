"""Thinking is inside a call's worst case: each reservation holds every output token its
provider may bill, thinking included, and a call billed past its worst case all the same
is charged, logged and counted (`relevo_charges_over_worst_case_total`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

import budgets
from tests.chainkit import MODEL_OF, ORDER, model, run, settings, turn
from worker.adapters.base import ProviderCall
from worker.adapters.output_limit import billable_output_tokens
from worker.fleet.loop import LoopThread
from worker.fleet.runner import TurnRunner
from worker.guard.testing import ScriptedGuard
from worker.observability.metrics import CHARGES_OVER_WORST_CASE_TOTAL
from worker.settings import ProviderSettings, Settings
from worker.simulator import Fault, Simulator
from worker.turn.capability import Fit, fit_turn
from worker.turn.pricing import cost_of, reservation_micros
from worker.types import Status, TurnRequest

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


MAX_TOKENS = 4000
TEXT = 16
PROVIDER = {"openai": "oa", "anthropic": "an", "gemini": "gg"}
# Reasoning models as the simulator knows them.
MODEL_ID = {"openai": "o4-mini", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}
# What each API counts against the turn's limit, thinking included, as it documents it.
GEMINI_HIGH = 24_576  # Google's budget for OpenAI's "high" effort, beside maxOutputTokens


def reasoning_config(sim: Simulator, kind: str) -> Settings:
    slug = MODEL_OF[kind]
    entry = model(
        slug.split("/")[0], (PROVIDER[kind], MODEL_ID[kind]), prices=(1, 4), reasoning=True
    )
    return settings(sim.url, ORDER[kind], models={slug: entry})


def thinking_turn(max_tokens: int = MAX_TOKENS) -> TurnRequest:
    return turn().model_copy(update={"max_tokens": max_tokens, "reasoning_effort": "high"})


def allowance(kind: str, body: Mapping[str, Any]) -> int:
    """The output tokens the request body lets the provider bill, thinking included."""
    if kind == "openai":
        # Reasoning tokens count inside either name (a local server knows `max_tokens`).
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        assert isinstance(limit, int)
        return limit
    if kind == "anthropic":
        limit, thinking = body["max_tokens"], body.get("thinking")
        assert isinstance(limit, int)
        if isinstance(thinking, dict) and "budget_tokens" in thinking:
            assert thinking["budget_tokens"] < limit  # thinking counts inside it
        return limit
    generation = body["generationConfig"]
    assert isinstance(generation, dict)
    budget = generation.get("thinkingConfig", {}).get("thinkingBudget", 0)
    return int(generation["maxOutputTokens"]) + int(budget)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_a_reservation_holds_every_output_token_the_provider_may_bill(
    sim: Simulator, kind: str
) -> None:
    """A reasoning turn at high effort, its thinking as long as the body allows: the
    provider's bill stays within the reserved worst case, on every API."""
    config = reasoning_config(sim, kind)
    slug = MODEL_OF[kind]
    guard = ScriptedGuard()
    sim.set_faults(MODEL_ID[kind], Fault(tokens=TEXT))
    await run(config, thinking_turn(), guard=guard)
    body = sim.requests(MODEL_ID[kind])[-1].body
    allowed = allowance(kind, body)
    fit = fit_turn(thinking_turn(), config.models[slug])
    assert isinstance(fit, Fit)
    margin = config.budgets.input_margin_pct
    [charge] = guard.reserved
    assert charge.worst == reservation_micros(
        fit.input_tokens, allowed, config.models[slug], input_margin_pct=margin
    )
    # The provider thinks all it may: billed within the worst case, charged what it billed.
    sim.set_faults(MODEL_ID[kind], Fault(tokens=TEXT, reasoning_tokens=allowed - TEXT))
    guard = ScriptedGuard()
    result = await run(config, thinking_turn(), guard=guard)
    assert result.status is Status.OK
    assert result.usage.output_tokens == allowed
    [(_, charged, _, cost)] = guard.concluded
    assert cost == result.cost_micros == cost_of(result.usage, config.models[slug])
    assert cost is not None
    assert cost <= charged.worst


def test_gemini_on_vertex_reserves_its_thinking_budget_too() -> None:
    vertex = ProviderSettings(kind="vertex", region="us-central1", project="relevo-test")
    call = ProviderCall(
        model_id="gemini-2.5-pro",
        messages=(),
        tools=(),
        max_tokens=1000,
        stream=False,
        reasoning=True,
        reasoning_effort="high",
    )
    assert billable_output_tokens(vertex, call) == 1000 + GEMINI_HIGH
    claude = replace(call, model_id="claude-sonnet-4-5@20250929")
    assert billable_output_tokens(vertex, claude) == 1000  # Claude's thinking is inside
    newer = replace(call, model_id="gemini-3-pro-preview")
    assert billable_output_tokens(vertex, newer) == 1000  # a level names no tokens


def test_a_call_billed_past_its_worst_case_is_charged_logged_and_counted(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    """Three turns of a provider that thinks past max_tokens (no real API lets it, the
    simulator does): each is charged what it billed, and the failed bound shows."""
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    sim.set_faults("alpha", Fault(tokens=TEXT, reasoning_tokens=4000))
    runner = TurnRunner(config, loop=LoopThread())
    try:
        with capture_logs() as logs:
            results = [
                runner.answer(turn().model_copy(update={"max_tokens": 256}).model_dump(mode="json"))
                for _ in range(3)
            ]
        spent = runner.loop.run(runner.guard.ledger.report("acme"), timeout_s=5).day.spent_micros
        counted = runner.metrics.registry.get_sample_value(
            CHARGES_OVER_WORST_CASE_TOTAL, {"model": "openai/alpha", "provider": "oa"}
        )
    finally:
        runner.close()
    assert [r["status"] for r in results] == ["ok"] * 3
    prices = config.models["openai/alpha"]
    for result in results:
        usage = result["usage"]
        assert usage["output_tokens"] == TEXT + 4000
        billed = budgets.cost_micros(
            usage["input_tokens"],
            usage["output_tokens"],
            prices.input_micros_per_mtok,
            prices.output_micros_per_mtok,
        )
        assert result["cost_micros"] == billed
    assert spent == sum(r["cost_micros"] for r in results)
    assert counted == 3
    over = [e for e in logs if e["event"] == "budget.charge_over_worst_case"]
    assert len(over) == 3
    assert all(e["charged_micros"] > e["worst_micros"] for e in over)
    assert {e["model"] for e in over} == {"openai/alpha"}
