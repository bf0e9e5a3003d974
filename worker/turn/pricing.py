"""What one call costs: its whole usage report at the model's prices, in micro-dollars;
and what an attempt reserves before it knows."""

from __future__ import annotations

import budgets
from worker.settings import ModelSettings
from worker.types import Usage

__all__ = ["cost_of", "reservation_micros"]

_TOKENS_PER_MTOK = 1_000_000  # prices are per million tokens


def cost_of(usage: Usage, model: ModelSettings) -> int:
    """The cost of `usage` on `model` in micro-dollars, rounded up once on the total.

    Each kind of token is priced exactly in integers and the sum rounded up, so a
    call is never charged a micro-dollar per kind. `reasoning_tokens` are part of
    `output_tokens` and are not priced again.
    """
    exact = (
        usage.input_tokens * model.input_micros_per_mtok
        + usage.cache_write_tokens * model.cache_write_micros_per_mtok
        + usage.cache_read_tokens * model.cache_read_micros_per_mtok
        + usage.output_tokens * model.output_micros_per_mtok
    )
    return -(-exact // _TOKENS_PER_MTOK)


def reservation_micros(
    input_tokens: int, output_tokens: int, model: ModelSettings, *, input_margin_pct: int
) -> int:
    """What an attempt of `model` reserves for `output_tokens` of answer: the input
    estimate padded by `input_margin_pct`, every input token at the dearest input price
    (a cache write), rounded up."""
    return budgets.worst_case_micros(
        input_tokens,
        output_tokens,
        model.worst_input_micros_per_mtok,
        model.output_micros_per_mtok,
        input_margin_pct=input_margin_pct,
    )
