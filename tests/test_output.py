"""The answer to a turn that asked for JSON: parsed, checked against the schema, or invalid."""

from __future__ import annotations

import pytest

from tests.chainkit import KEY, model, run, settings, turn
from worker.errors import OutputInvalid
from worker.simulator import Fault, Simulator
from worker.turn.output import read_output
from worker.turn.policy import Decision, rule_for
from worker.types import JsonObjectFormat, JsonSchemaFormat, Status

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


async def test_a_filtered_answer_to_a_schema_turn_is_withheld_not_invalid(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's filter stopped the answer before any content: nothing to validate,
    and no fallback (the backup would be sent the same prompt)."""
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    config = settings(
        sim.url,
        ("anthropic/beta", "openai/alpha"),
        models={
            "anthropic/beta": model("anthropic", ("an", "claude-beta-4-5"), structured_output=True),
            "openai/alpha": model("openai", ("oa", "alpha"), structured_output=True),
        },
    )
    sim.set_faults("claude-beta-4-5", Fault(content_filter_after_tokens=0))
    result = await run(config, turn().model_copy(update={"response_format": ORDER}))
    assert (result.status, result.reason) == (Status.FAILED, "content_filter")
    assert sim.calls("alpha") == 0
