"""The two framework models share one shape: the same options with the same defaults, one
reasoning envelope (reading both alphabets it was ever written in), errors that are
relevo's and the framework's at once, and an `aclose` that closes the engine."""

from __future__ import annotations

import base64
import inspect
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from agents.exceptions import UserError as AgentsUserError
from pydantic_ai.exceptions import UserError as PydanticAIUserError
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from worker.errors import InputError
from worker.frameworks import TurnOptions
from worker.frameworks.envelope import ENVELOPE, seal
from worker.frameworks.openai_agents import AgentsInputError, RelevoProvider
from worker.frameworks.openai_agents import RelevoModel as AgentsModel
from worker.frameworks.openai_agents.reply import Carried, open_carried
from worker.frameworks.pydantic_ai import PydanticAIInputError
from worker.frameworks.pydantic_ai import RelevoModel as PydanticAIModel
from worker.frameworks.pydantic_ai.reasoning import unseal
from worker.frameworks.pydantic_ai.turn import to_turn
from worker.types import Reasoning, TurnRequest, TurnResult

SHARED = ("engine", "tenant_id", "on_degraded", "deadline_s", "side_effect_tools", "on_result")
# Text whose JSON's base64 holds both letters the two alphabets spell differently.
AWKWARD = "\u00ff\u00fe>>>???~~~" * 4


def _options(model: type[Any]) -> dict[str, Any]:
    parameters = inspect.signature(model.__init__).parameters
    return {name: parameters[name].default for name in SHARED}


def test_both_models_take_the_same_options_with_the_same_defaults() -> None:
    agents, pydantic_ai = _options(AgentsModel), _options(PydanticAIModel)
    assert agents == pydantic_ai
    assert agents["deadline_s"] is None  # relevo's own default, the same for both
    assert _options(RelevoProvider) == agents


def test_a_deadline_is_sent_only_when_one_is_set() -> None:
    assert TurnOptions("acme").fields() == {"tenant_id": "acme"}
    assert TurnOptions("acme", deadline_s=9).fields() == {"tenant_id": "acme", "deadline_s": 9}
    assert TurnOptions("acme", deadline_s=9).fields(3) == {"tenant_id": "acme", "deadline_s": 3}
    hello = {"messages": [{"role": "user", "content": "hi"}]}
    assert TurnRequest.model_validate(TurnOptions("acme").fields() | hello).deadline_s == 60.0


def test_one_envelope_written_in_one_alphabet_and_read_in_both() -> None:
    reasoning = Reasoning(origin="anthropic", text=AWKWARD, signature="c2ln")
    data = reasoning.model_dump_json(exclude_defaults=True).encode()
    standard = ENVELOPE + base64.b64encode(data).decode()
    urlsafe = ENVELOPE + base64.urlsafe_b64encode(data).decode()
    assert standard != urlsafe  # the case below reads two different spellings
    assert seal(reasoning) == standard
    for written in (standard, urlsafe):
        assert unseal(written) == reasoning
        carried = Carried(reasoning=reasoning)
        body = carried.model_dump_json().encode()
        assert open_carried(ENVELOPE + base64.urlsafe_b64encode(body).decode()) == carried


def test_input_errors_are_relevos_and_the_frameworks() -> None:
    with pytest.raises(PydanticAIInputError) as pydantic_ai:
        unseal(ENVELOPE + "not base64!")
    assert isinstance(pydantic_ai.value, InputError)
    assert isinstance(pydantic_ai.value, PydanticAIUserError)
    assert issubclass(AgentsInputError, InputError)
    assert issubclass(AgentsInputError, AgentsUserError)


def test_pydantic_ai_marks_the_side_effect_tools_it_is_given() -> None:
    tools = [ToolDefinition(name=n, parameters_json_schema={"type": "object"}) for n in "ab"]
    params = ModelRequestParameters(function_tools=tools)
    options = TurnOptions("acme", side_effect_tools=frozenset({"b"}))
    turn = to_turn(
        [ModelRequest(parts=[UserPromptPart(content="hi")])],
        None,
        params,
        instructions=[],
        options=options,
        stream=False,
    )
    assert [(t.name, t.side_effects) for t in turn.tools] == [("a", False), ("b", True)]


class _Engine:
    closed = 0

    async def run(self, request: TurnRequest) -> TurnResult:
        raise AssertionError("not called")

    async def stream(self, request: TurnRequest) -> AsyncGenerator[str | TurnResult, None]:
        raise AssertionError("not called")
        yield ""

    async def aclose(self) -> None:
        self.closed += 1


async def test_each_model_closes_its_engine_when_asked() -> None:
    engine = _Engine()
    await AgentsModel(engine, tenant_id="acme").aclose()
    await RelevoProvider(engine, tenant_id="acme").aclose()
    await PydanticAIModel(engine, tenant_id="acme").aclose()
    assert engine.closed == 3
