"""A reasoning model is known by its id, and every field a call did not carry is named.

Each turn runs a chain over real HTTP against the simulated providers, which refuse what
the APIs refuse (a reasoning model's `temperature`, an effort to a model that does not
reason); the attempt's report row names the turn's fields its body left out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.chainkit import KEY, model, run, settings, turn
from worker.adapters.base import ProviderCall
from worker.adapters.left_out import left_out
from worker.adapters.reasoning_models import reasons, reasons_by_id
from worker.simulator import Fault, Simulator
from worker.types import AttemptOutcome, Message, Status, Tool, ToolCall, TurnRequest

WEATHER = Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)


def asking(**fields: Any) -> TurnRequest:
    return turn().model_copy(update=fields)


def one_model(sim: Simulator, provider: str, model_id: str, **extra: Any) -> Any:
    vendor = {"oa": "openai", "gg": "google", "an": "anthropic"}[provider]
    models = {"m/one": model(vendor, (provider, model_id), **extra)}
    return settings(sim.url, ("m/one", "openai/alpha"), models=models)


@pytest.mark.parametrize(
    ("model_id", "ids"),
    [
        ("o3", True),
        ("o4-mini", True),
        ("gpt-5", True),
        ("gpt-5.1", True),
        ("gpt-5-mini-2025-08-07", True),
        ("openai/gpt-5-nano", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4.1", False),
        ("gpt-4o", False),
        ("gemini-2.5-pro", True),
        ("gemini-2.5-flash-lite", True),
        ("gemini-3-pro-preview", True),
        ("gemini-3.1-flash", True),
        ("gemini-2.0-flash", False),
        ("gemini-2.5-flash-image", False),
        ("gemini-2.5-flash-preview-tts", False),
        ("claude-opus-4-7", False),
        ("my-deployment", False),
    ],
)
def test_reasoning_models_are_known_by_their_id(model_id: str, ids: bool) -> None:
    assert reasons_by_id(model_id) is ids
    assert reasons(model_id, None) is ids
    assert reasons(model_id, not ids) is not ids  # the setting overrides the id


async def test_gpt5_mini_needs_no_setting_to_get_its_effort_and_no_sampling(
    sim: Simulator,
) -> None:
    """Configured without `reasoning`, gpt-5-mini still reasons: its effort is sent, the
    temperature it refuses is not, and the row names the temperature as left out."""
    model_id = "gpt-5-mini-left1"
    result = await run(
        one_model(sim, "oa", model_id),
        asking(reasoning_effort="low", temperature=0.3),
    )
    assert result.status is Status.OK, result.attempts
    body = sim.requests(model_id)[-1].body
    assert body["reasoning_effort"] == "low"
    assert "temperature" not in body
    assert result.attempts[0].detail == "left out: temperature"


async def test_an_effort_to_a_model_that_does_not_reason_is_named_left_out(
    sim: Simulator,
) -> None:
    model_id = "gpt-4.1-left2"
    result = await run(
        one_model(sim, "oa", model_id), asking(reasoning_effort="high", temperature=0.3)
    )
    assert result.status is Status.OK
    body = sim.requests(model_id)[-1].body
    assert "reasoning_effort" not in body
    assert body["temperature"] == 0.3
    assert result.attempts[0].detail == "left out: reasoning_effort"


async def test_the_setting_overrides_the_id(sim: Simulator) -> None:
    """An alias says nothing of its model: `reasoning = true` makes it think."""
    model_id = "gemini-flash-latest-left3"
    config = one_model(sim, "gg", model_id, reasoning=True)
    result = await run(config, asking(reasoning_effort="medium"))
    assert result.status is Status.OK
    thinking = sim.requests(model_id)[-1].body["generationConfig"]["thinkingConfig"]
    assert thinking == {"thinkingBudget": 8192}
    assert result.attempts[0].detail is None


async def test_gemini25_thinks_by_its_id_and_parallel_tool_calls_is_left_out(
    sim: Simulator,
) -> None:
    model_id = "gemini-2.5-flash-left4"
    request = asking(reasoning_effort="low", seed=7, parallel_tool_calls=False, tools=(WEATHER,))
    result = await run(one_model(sim, "gg", model_id), request)
    assert result.status is Status.OK
    config = sim.requests(model_id)[-1].body["generationConfig"]
    assert "thinkingConfig" in config
    assert config["seed"] == 7
    assert result.attempts[0].detail == "left out: parallel_tool_calls"


async def test_claude_thinking_leaves_out_the_sampling_and_the_seed(sim: Simulator) -> None:
    model_id = "claude-sonnet-4-5-left5"
    config = one_model(sim, "an", model_id, reasoning=True)
    request = asking(reasoning_effort="low", temperature=0.5, seed=3, max_tokens=8000)
    result = await run(config, request)
    assert result.status is Status.OK
    body = sim.requests(model_id)[-1].body
    assert body["thinking"]["type"] == "enabled"
    assert "temperature" not in body
    assert result.attempts[0].detail == "left out: temperature, seed"


async def test_a_failed_rows_detail_stays_its_error_and_its_log_line_names_what_was_left_out(
    sim: Simulator,
) -> None:
    model_id = "gpt-4.1-left6"
    sim.set_faults(model_id, Fault(status=400, times=1))
    with capture_logs() as events:
        result = await run(one_model(sim, "oa", model_id), asking(reasoning_effort="low"))
    row = result.attempts[0]
    assert row.outcome is AttemptOutcome.ERROR
    assert row.detail is not None
    assert not row.detail.startswith("left out")
    [line] = [e for e in events if e["event"] == "turn.attempt" and e["provider_model"] == model_id]
    assert line["left_out"] == ["reasoning_effort"]


def test_a_claude_tool_loop_another_vendor_began_names_the_effort_it_could_not_send() -> None:
    """Claude may not think on a tool loop whose last assistant turn has no thinking of
    its own: the effort is not sent, and named (read from the conversation's tail)."""
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})
    history = (
        Message(role="user", content="Weather?"),
        Message(role="assistant", content="Hello."),
        Message(role="user", content="And now?"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id="call_1", content="sunny"),
    )
    asked = ProviderCall(
        model_id="claude-sonnet-4-5",
        messages=history,
        tools=(WEATHER,),
        max_tokens=8000,
        stream=False,
        reasoning_effort="low",
        reasoning=True,
    )
    assert left_out("anthropic", asked) == ("reasoning_effort",)
    assert left_out("anthropic", replace(asked, messages=history[:3])) == ()
