"""Prices by prompt size: a call whose prompt passes a tier's `above_input_tokens` is
billed all its tokens at that tier's prices, and a reservation holds the dearest tier its
padded input estimate reaches."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

import budgets
from tests.chainkit import KEY, model, run, settings, turn
from worker.guard.testing import ScriptedGuard
from worker.settings import ModelSettings
from worker.simulator import Fault, Simulator
from worker.turn.capability import Fit, fit_turn
from worker.turn.pricing import cost_of, padded_tokens, reservation_micros
from worker.types import Status, Usage

# Gemini 2.5 Pro's: $1.25 / $10 up to 200k prompt tokens, $2.50 / $15 above.
ABOVE = 200_000
GEMINI_PRO: dict[str, Any] = {
    "input_usd_per_mtok": "1.25",
    "output_usd_per_mtok": "10",
    "cache_read_usd_per_mtok": "0.31",
    "price_tiers": [
        {
            "above_input_tokens": ABOVE,
            "input_usd_per_mtok": "2.5",
            "output_usd_per_mtok": "15",
            "cache_read_usd_per_mtok": "0.625",
        }
    ],
}


def priced(vendor: str = "google", **fields: Any) -> ModelSettings:
    base = {
        "vendor": vendor,
        "serve": [{"provider": "p", "model_id": "m"}],
        "context_window": 10**6,
    }
    return ModelSettings.model_validate(base | (fields or GEMINI_PRO))


def test_a_prompt_one_token_past_the_boundary_is_billed_wholly_at_the_tier() -> None:
    pro = priced()
    at = Usage(input_tokens=ABOVE, output_tokens=1000)
    past = Usage(input_tokens=ABOVE + 1, output_tokens=1000)
    assert cost_of(at, pro) == 250_000 + 10_000  # 200k x $1.25, 1k x $10
    assert cost_of(past, pro) == -(-(ABOVE + 1) * 5 // 2) + 15_000  # all at $2.50 / $15
    # Cached tokens are part of the prompt's size, and priced at the tier's read price.
    cached = Usage(input_tokens=1, cache_read_tokens=ABOVE, output_tokens=0)
    assert cost_of(cached, pro) == -(-(2_500_000 + ABOVE * 625_000) // 1_000_000)


def test_a_reservation_is_priced_at_the_tier_its_padded_estimate_falls_in() -> None:
    pro, margin = priced(), 20
    below = ABOVE * 100 // 120  # padded by 20 %: exactly the boundary
    assert padded_tokens(below, margin) == ABOVE
    assert padded_tokens(below + 1, margin) > ABOVE
    base = budgets.worst_case_micros(below, 100, 1_250_000, 10_000_000, input_margin_pct=margin)
    tier = budgets.worst_case_micros(below + 1, 100, 2_500_000, 15_000_000, input_margin_pct=margin)
    assert reservation_micros(below, 100, pro, input_margin_pct=margin) == base
    assert reservation_micros(below + 1, 100, pro, input_margin_pct=margin) == tier
    # Every call it may be billed for is within it: the real prompt is at most the estimate.
    for prompt in (ABOVE, ABOVE + 1, padded_tokens(below + 1, margin)):
        usage = Usage(input_tokens=prompt, output_tokens=100)
        assert cost_of(usage, pro) <= reservation_micros(
            below + 1, 100, pro, input_margin_pct=margin
        )


def test_a_tier_s_unset_cache_prices_follow_its_own_input_price() -> None:
    claude = priced(
        "anthropic",
        input_usd_per_mtok="3",
        output_usd_per_mtok="15",
        price_tiers=[
            {"above_input_tokens": ABOVE, "input_usd_per_mtok": "6", "output_usd_per_mtok": "22.5"}
        ],
    )
    prices = claude.prices(ABOVE + 1)
    assert (prices.input, prices.output) == (6_000_000, 22_500_000)
    assert prices.cache_write == 7_500_000  # Anthropic's 1.25x, of the tier's $6
    assert prices.cache_read == 6_000_000
    assert claude.prices(ABOVE).input == 3_000_000


def test_tiers_must_come_in_increasing_sizes() -> None:
    tier = {"input_usd_per_mtok": "2", "output_usd_per_mtok": "3"}
    with pytest.raises(ValidationError, match="increase"):
        priced(
            input_usd_per_mtok="1",
            price_tiers=[{"above_input_tokens": 500, **tier}, {"above_input_tokens": 100, **tier}],
        )
    with pytest.raises(ValidationError):
        priced(input_usd_per_mtok="1", price_tiers=[{"above_input_tokens": 0, **tier}])


async def test_a_turn_past_a_tier_is_reserved_and_charged_at_the_tier(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over real HTTP: a boundary small enough that the turn's prompt passes it."""
    sim.reset()
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    tiers = [{"above_input_tokens": 5, "input_usd_per_mtok": "20", "output_usd_per_mtok": "80"}]
    entry = model("openai", ("oa", "alpha"), prices=(2, 8), price_tiers=tiers)
    config = settings(sim.url, ("openai/alpha", "anthropic/beta"), models={"openai/alpha": entry})
    sim.set_faults("alpha", Fault(tokens=12))
    guard = ScriptedGuard()
    request = turn().model_copy(update={"max_tokens": 64})
    result = await run(config, request, guard=guard)
    assert result.status is Status.OK
    usage = result.usage
    assert usage.prompt_tokens > 5
    assert result.cost_micros == budgets.cost_micros(
        usage.input_tokens, usage.output_tokens, 20_000_000, 80_000_000
    )
    fit = fit_turn(request, config.models["openai/alpha"])
    assert isinstance(fit, Fit)
    margin = config.budgets.input_margin_pct
    [charge] = guard.reserved
    assert charge.worst == budgets.worst_case_micros(
        fit.input_tokens, 64, 20_000_000, 80_000_000, input_margin_pct=margin
    )


def test_a_model_without_tiers_keeps_its_one_price() -> None:
    flat = priced(input_usd_per_mtok="1.25", output_usd_per_mtok="10")
    assert flat.prices(10**7) == flat.prices(0) == flat.worst_prices(10**7)
    assert flat.prices(0).input == flat.input_micros_per_mtok == 1_250_000
    assert flat.prices(0).output == 10_000_000
