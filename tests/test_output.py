"""The answer to a turn that asked for JSON: parsed, checked against the schema, or invalid."""

from __future__ import annotations

import pytest

from worker.errors import OutputInvalid
from worker.turn.output import read_output
from worker.turn.policy import Decision, rule_for
from worker.types import JsonObjectFormat, JsonSchemaFormat

ORDER = JsonSchemaFormat(
    name="order",
    json_schema={
        "type": "object",
        "properties": {"id": {"type": "string"}, "total": {"type": "number"}},
        "required": ["id", "total"],
        "additionalProperties": False,
    },
)


def test_an_answer_that_matches_the_schema_is_parsed() -> None:
    assert read_output('{"id": "A-1", "total": 12.5}', ORDER) == {"id": "A-1", "total": 12.5}


def test_a_turn_that_asked_for_nothing_reads_nothing() -> None:
    assert read_output("plain words", None) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Sure! Here it is: {", "not JSON"),
        ('{"id": "A-1"}', "'total' is a required property"),
        ('{"id": "A-1", "total": "twelve"}', "at total"),
        ('{"id": "A-1", "total": 1, "note": "x"}', "Additional properties"),
    ],
)
def test_an_answer_that_does_not_match_is_output_invalid(text: str, says: str) -> None:
    with pytest.raises(OutputInvalid, match=says) as raised:
        read_output(text, ORDER)
    assert raised.value.code == "output_invalid"


def test_json_object_mode_wants_an_object() -> None:
    assert read_output('{"a": [1, 2]}', JsonObjectFormat()) == {"a": [1, 2]}
    with pytest.raises(OutputInvalid, match="not an object"):
        read_output("[1, 2]", JsonObjectFormat())


def test_an_invalid_answer_moves_on_neutrally_and_is_billed() -> None:
    """The model answered in the wrong shape: the backup may follow the schema, and the
    model's health is not at issue."""
    rule = rule_for(OutputInvalid("x"))
    assert rule.decision is Decision.NEXT
    assert rule.signal.value == "neutral"
    assert rule.billed
