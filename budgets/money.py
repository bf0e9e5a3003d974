"""Money as integer micro-dollars: prices, costs rounded up, and dollars for operators.

No float ever touches an amount: costs are computed with integers and rounded
up (a reservation or a charge never under-counts), and dollars typed by an
operator are parsed digit by digit.
"""

from __future__ import annotations

import re

from budgets.errors import InvalidAmountError

__all__ = [
    "MAX_MICROS",
    "MICROS_PER_DOLLAR",
    "check_micros",
    "cost_micros",
    "format_micros",
    "parse_dollars",
    "worst_case_micros",
]

MICROS_PER_DOLLAR = 1_000_000
TOKENS_PER_MTOK = 1_000_000
# One billion dollars: every sum the Lua scripts make stays below 2**53, exact in a double.
MAX_MICROS = 1_000 * MICROS_PER_DOLLAR * MICROS_PER_DOLLAR
_DOLLARS = re.compile(r"\$?([0-9]{1,10})(?:\.([0-9]{1,6}))?")


def _count(name: str, value: object) -> int:
    # bool is an int subclass; True tokens or True micros are a caller's bug.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidAmountError(f"{name} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise InvalidAmountError(f"{name} must not be negative (got {value})")
    return value


def check_micros(name: str, value: object) -> int:
    """`value` if it is a whole, non-negative number of micro-dollars up to `MAX_MICROS`."""
    micros = _count(name, value)
    if micros > MAX_MICROS:
        raise InvalidAmountError(
            f"{name} is {micros} micro-dollars; at most {MAX_MICROS} are allowed"
        )
    return micros


def cost_micros(
    input_tokens: int,
    output_tokens: int,
    input_micros_per_mtok: int,
    output_micros_per_mtok: int,
) -> int:
    """The cost of a call in micro-dollars, rounded up to the next whole micro-dollar.

    Prices are micro-dollars per million tokens; the exact cost is computed first
    and rounded once, so many small calls are not each rounded up twice.
    """
    total = _count("input_tokens", input_tokens) * _count(
        "input_micros_per_mtok", input_micros_per_mtok
    ) + _count("output_tokens", output_tokens) * _count(
        "output_micros_per_mtok", output_micros_per_mtok
    )
    return -(-total // TOKENS_PER_MTOK)


def worst_case_micros(
    estimated_input_tokens: int,
    max_output_tokens: int,
    input_micros_per_mtok: int,
    output_micros_per_mtok: int,
    *,
    input_margin_pct: int = 0,
) -> int:
    """What an attempt can cost at most: the input estimate (plus a margin) and every output token.

    `input_margin_pct` covers a rough input estimate (e.g. characters / 4); it is
    rounded up in tokens.
    """
    margin = _count("input_margin_pct", input_margin_pct)
    tokens = _count("estimated_input_tokens", estimated_input_tokens)
    padded = -(-tokens * (100 + margin) // 100)
    return cost_micros(padded, max_output_tokens, input_micros_per_mtok, output_micros_per_mtok)


def parse_dollars(text: str) -> int:
    """Dollars as an operator types them ("5", "5.00", "$0.0015") to micro-dollars.

    Refuses negatives, more than six decimals, exponents, NaN, infinities,
    separators and anything else that is not plain digits.
    """
    if not isinstance(text, str):
        raise InvalidAmountError(f"an amount of dollars must be text, not {type(text).__name__}")
    shown = text if len(text) <= 40 else text[:40] + "…"
    stripped = text.strip()
    match = _DOLLARS.fullmatch(stripped)
    if match is None:
        if stripped.startswith("-"):
            reason = "must not be negative"
        elif re.fullmatch(r"\$?[0-9]*\.[0-9]{7,}", stripped):
            reason = "has more than 6 decimals (the smallest amount is $0.000001)"
        else:
            reason = 'is not an amount of dollars like "5", "5.00" or "0.000001"'
        raise InvalidAmountError(f"{shown!r} {reason}")
    whole, fraction = match.group(1), match.group(2) or ""
    micros = int(whole) * MICROS_PER_DOLLAR + int(fraction.ljust(6, "0"))
    if micros > MAX_MICROS:
        raise InvalidAmountError(
            f"{shown!r} is more than the largest amount, {format_micros(MAX_MICROS)}"
        )
    return micros


def format_micros(micros: int) -> str:
    """Micro-dollars for people: "$5.00", "$0.0015", "-$1.25"; `parse_dollars` reads it back."""
    if not isinstance(micros, int) or isinstance(micros, bool):
        raise InvalidAmountError(f"micro-dollars must be an integer, not {type(micros).__name__}")
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS_PER_DOLLAR)
    digits = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole}.{digits}"
