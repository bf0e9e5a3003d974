"""What one call costs: its whole usage report at the model's prices, in micro-dollars;
and what an attempt reserves before it knows.

A model's prices may depend on the prompt's size (`ModelSettings.price_tiers`): a call
is priced at the tier its whole prompt falls in, and a reservation at the dearest tier
its padded input estimate reaches, since the real prompt is no larger than that.
"""

from __future__ import annotations

import budgets
from worker.settings import ModelSettings
from worker.types import Usage

__all__ = ["cost_of", "padded_tokens", "reservation_micros"]

_TOKENS_PER_MTOK = 1_000_000  # prices are per million tokens


def cost_of(usage: Usage, model: ModelSettings) -> int:
    """The cost of `usage` on `model` in micro-dollars, rounded up once on the total.

    Each kind of token is priced exactly in integers, at the prices of the tier the
    prompt (cached tokens included) falls in, and the sum rounded up, so a call is never
    charged a micro-dollar per kind. `reasoning_tokens` are part of `output_tokens` and
    are not priced again.
    """
    prices = model.prices(usage.prompt_tokens)
    exact = (
        usage.input_tokens * prices.input
        + usage.cache_write_tokens * prices.cache_write
        + usage.cache_read_tokens * prices.cache_read
        + usage.output_tokens * prices.output
    )
    return -(-exact // _TOKENS_PER_MTOK)


def padded_tokens(input_tokens: int, input_margin_pct: int) -> int:
    """The input estimate padded by the margin, rounded up: what a reservation counts."""
    return -(-input_tokens * (100 + input_margin_pct) // 100)


def reservation_micros(
    input_tokens: int, output_tokens: int, model: ModelSettings, *, input_margin_pct: int
) -> int:
    """What an attempt of `model` reserves for `output_tokens` of answer: the input
    estimate padded by `input_margin_pct`, every input token at the dearest input price
    (a cache write), at the dearest tier the padded estimate reaches, rounded up."""
    prices = model.worst_prices(padded_tokens(input_tokens, input_margin_pct))
    return budgets.worst_case_micros(
        input_tokens,
        output_tokens,
        prices.worst_input,
        prices.output,
        input_margin_pct=input_margin_pct,
    )
