"""budgets without Redis: names that become keys, prices, rounding, dollars for operators."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgets import (
    InvalidAmountError,
    InvalidNameError,
    Limits,
    check_provider,
    check_tenant,
    cost_micros,
    format_micros,
    parse_dollars,
)
from budgets.keys import BudgetKeys, check_charge_id
from budgets.money import MAX_MICROS, worst_case_micros


@pytest.mark.parametrize("tenant", ["acme", "A", "_", "0", "acme-eu.prod_2", "x" * 64])
def test_plain_tenant_ids_are_accepted(tenant: str) -> None:
    assert check_tenant(tenant) == tenant


@pytest.mark.parametrize(
    ("tenant", "problem"),
    [
        ("", "must not be empty"),
        ("a|b", "'|' at position 1"),
        ("a%2Fb", "'%' at position 1"),
        ("*", "'*' at position 0"),
        ("acme*", "'*' at position 4"),
        ("{x}", "'{' at position 0"),
        ("../etc", "starts with '.'"),
        ("a/../b", "each part between '/' starting with a letter, a digit or '_'"),
        ("a//b", "each part between '/'"),
        ("team/", "each part between '/'"),
        ("..", "starts with '.'"),
        ("-acme", "starts with '-'"),
        ("ac me", "' ' at position 2"),
        ("acme\n", "'\\n' at position 4"),
        ("acme\t", "'\\t' at position 4"),
        ("аcme", "non-ASCII character 'а' at position 0"),  # Cyrillic a
        ("acme\u200b", "non-ASCII character"),  # zero-width space
        ("ａcme", "non-ASCII character"),  # fullwidth a
        ("x" * 65, "must be at most 64 characters, not 65"),
        ("x" * 1000, "not 1000"),
    ],
)
def test_tenant_ids_that_could_inject_keys_are_refused_with_the_reason(
    tenant: str, problem: str
) -> None:
    with pytest.raises(InvalidNameError, match="tenant id") as caught:
        check_tenant(tenant)
    assert problem in str(caught.value)


def test_long_refused_values_are_shortened_in_the_message() -> None:
    with pytest.raises(InvalidNameError) as caught:
        check_tenant("y" * 1000)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("value", [None, 7, b"acme", ["acme"]])
def test_a_tenant_id_must_be_a_string(value: object) -> None:
    with pytest.raises(InvalidNameError, match="must be a string"):
        check_tenant(value)


def test_charge_ids_may_hold_a_colon_but_not_other_separators() -> None:
    assert check_charge_id("turn-1:0") == "turn-1:0"
    for bad in ("=total", "a b", "a*", ":x", "", "x" * 201):
        with pytest.raises(InvalidNameError, match="charge id"):
            check_charge_id(bad)


def test_provider_names_follow_the_tenant_rules() -> None:
    assert check_provider("openai") == "openai"
    with pytest.raises(InvalidNameError, match="provider"):
        check_provider("open:ai")


def test_keys_build_every_tenant_key_under_the_namespace_hash_tag() -> None:
    keys = BudgetKeys("ns")
    assert keys.tenants() == "{ns}:budget:tenants"
    assert keys.limits("acme") == "{ns/acme}:budget:limits"
    assert keys.charge("acme", "t:0") == "{ns/acme}:budget:charge:t:0"
    assert keys.day("acme", "2026-11-30") == "{ns/acme}:budget:day:2026-11-30"
    assert keys.month("acme", "2026-11") == "{ns/acme}:budget:month:2026-11"
    assert keys.handoffs() == "{ns}:handoffs"
    with pytest.raises(InvalidNameError):
        keys.held("a}:b")
    with pytest.raises(InvalidNameError, match="namespace"):
        BudgetKeys("bad namespace")


def test_period_keys_are_those_12_hours_either_side_of_the_client_clock() -> None:
    noon = int(datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp() * 1000)
    keys, periods = BudgetKeys("ns").periods("acme", noon)
    assert periods == ["2026-11-30", "2026-12-01", "2026-11", "2026-12"]
    assert keys == [
        "{ns/acme}:budget:day:2026-11-30",
        "{ns/acme}:budget:day:2026-12-01",
        "{ns/acme}:budget:month:2026-11",
        "{ns/acme}:budget:month:2026-12",
    ]
    assert BudgetKeys("ns").periods("acme", noon - 86_400_000)[1][2:] == ["2026-11", "2026-11"]


def test_cost_rounds_a_fraction_of_a_micro_dollar_up() -> None:
    # 1 token at $0.15 per million tokens is 0.15 micro-dollars: charged as 1.
    assert cost_micros(1, 0, 150_000, 0) == 1
    assert cost_micros(0, 0, 150_000, 600_000) == 0
    assert cost_micros(1_000_000, 1_000_000, 3_000_000, 15_000_000) == 18_000_000


def test_cost_rounds_once_on_the_total_not_per_side() -> None:
    # 0.5 + 0.5 micro-dollars: rounding each side up would charge 2.
    assert cost_micros(1, 1, 500_000, 500_000) == 1


@given(
    st.integers(0, 2_000_000),
    st.integers(0, 200_000),
    st.integers(0, 100_000_000),
    st.integers(0, 100_000_000),
)
def test_cost_is_the_smallest_whole_micro_dollar_not_below_the_exact_cost(
    tin: int, tout: int, pin: int, pout: int
) -> None:
    exact = Fraction(tin * pin + tout * pout, 1_000_000)
    cost = cost_micros(tin, tout, pin, pout)
    assert isinstance(cost, int)
    assert exact <= cost < exact + 1


@pytest.mark.parametrize(
    "args", [(-1, 0, 1, 1), (0, -1, 1, 1), (1, 1, -5, 1), (1.5, 0, 1, 1), (True, 0, 1, 1)]
)
def test_cost_refuses_negative_fractional_or_boolean_inputs(args: tuple[object, ...]) -> None:
    with pytest.raises(InvalidAmountError):
        cost_micros(*args)  # type: ignore[arg-type]


def test_worst_case_counts_every_output_token_and_pads_the_input_estimate() -> None:
    assert worst_case_micros(1000, 500, 3_000_000, 15_000_000) == 3_000 + 7_500
    # 1001 tokens + 10 % = 1101.1 -> 1102 tokens.
    assert worst_case_micros(1001, 0, 1_000_000, 0, input_margin_pct=10) == 1102
    assert worst_case_micros(10, 10, 1, 1) == 1


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("5", 5_000_000),
        ("5.00", 5_000_000),
        (" 100 ", 100_000_000),
        ("$0.0015", 1_500),
        ("0.000001", 1),
        ("0", 0),
        ("1000000000", MAX_MICROS),
    ],
)
def test_dollars_parse_to_exact_micro_dollars(text: str, micros: int) -> None:
    assert parse_dollars(text) == micros


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-5", "must not be negative"),
        ("-0.01", "must not be negative"),
        ("0.0000001", "more than 6 decimals"),
        ("NaN", "not an amount"),
        ("inf", "not an amount"),
        ("1e3", "not an amount"),
        ("1,000", "not an amount"),
        ("1_000", "not an amount"),
        ("5.", "not an amount"),
        (".5", "not an amount"),
        ("", "not an amount"),
        ("five", "not an amount"),
        ("٥", "not an amount"),  # Arabic-Indic five
        ("1000000000.000001", "more than the largest amount"),
    ],
)
def test_bad_dollar_amounts_get_a_clear_error(text: str, reason: str) -> None:
    with pytest.raises(InvalidAmountError, match=reason):
        parse_dollars(text)


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (5_000_000, "$5.00"),
        (1_500, "$0.0015"),
        (1, "$0.000001"),
        (0, "$0.00"),
        (-1_250_000, "-$1.25"),
    ],
)
def test_micro_dollars_format_for_people(micros: int, text: str) -> None:
    assert format_micros(micros) == text


@given(st.integers(0, MAX_MICROS))
def test_formatted_amounts_parse_back_to_the_same_micro_dollars(micros: int) -> None:
    assert parse_dollars(format_micros(micros)) == micros


@pytest.mark.parametrize(
    "kwargs",
    [
        {"daily_micros": -1, "monthly_micros": 1},
        {"daily_micros": 1, "monthly_micros": 1.0},
        {"daily_micros": 1, "monthly_micros": 1, "fallback_cap_micros": -3},
        {"daily_micros": MAX_MICROS + 1, "monthly_micros": 1},
        {"daily_micros": True, "monthly_micros": 1},
    ],
)
def test_limits_refuse_negative_float_boolean_or_huge_amounts(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidAmountError):
        Limits(**kwargs)  # type: ignore[arg-type]
