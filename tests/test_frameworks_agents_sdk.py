"""relevo as the OpenAI Agents SDK's model: the SDK's own `Runner` drives agents whose
model calls are relevo turns, over real HTTP to the simulated providers.

What each provider received is read back from the simulator: the agent's tools,
settings, output schema and reasoning reach the wire; what comes back reaches the agent.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    Runner,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException, UserError
from agents.items import ReasoningItem, ToolCallItem
from agents.models.interface import ModelTracing
from agents.tool import FunctionTool
from openai.types.responses import ResponseCompletedEvent, ResponseTextDeltaEvent
from openai.types.shared import Reasoning as OpenAIReasoning
from pydantic import BaseModel

from tests.chainkit import ORDER, model, settings
from worker.adapters import make_client
from worker.fleet import Producer
from worker.fleet.testing import stub_fleet
from worker.frameworks import InProcess, ThroughFleet, TurnNotAnswered
from worker.frameworks.envelope import seal
from worker.frameworks.openai_agents import (
    AgentsInputError,
    AgentsTurnNotAnswered,
    RelevoModel,
    RelevoProvider,
)
from worker.frameworks.openai_agents.reply import Carried, open_carried
from worker.guard import Availability
from worker.guard.testing import ScriptedGuard
from worker.simulator import CallOutcome, Fault, Simulator
from worker.turn import Chain
from worker.types import Reasoning, Status, TurnResult

ROOT = Path(__file__).resolve().parent.parent
set_tracing_disabled(True)  # the SDK would export its traces to OpenAI

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()
MODELS = {
    "openai/alpha": model(
        "openai", ("oa", "alpha"), inputs=["text", "image", "pdf"], structured_output=True
    ),
    "openai/o4-mini": model("openai", ("oa", "o4-mini"), reasoning=True),
    # Claude with extended thinking: the budget must stay under the turn's max_tokens.
    "anthropic/beta": model("anthropic", ("an", "beta"), thinking_budget_tokens=1024),
}
called: list[str] = []


@function_tool
def lookup(order_id: str) -> str:
    """Find an order."""
    called.append(f"lookup {order_id}")
    return f"order {order_id}: shipped"


@function_tool
def refund(order_id: str) -> str:
    """Refund an order."""
    called.append(f"refund {order_id}")
    return "refunded"


class Verdict(BaseModel):
    shipped: bool
    order_id: str


@pytest.fixture(autouse=True)
def _no_tool_called(fresh_sim: Simulator, provider_key: str) -> None:
    called.clear()


@pytest.fixture
def results() -> list[TurnResult]:
    return []


@pytest.fixture
async def engine(sim: Simulator) -> Any:
    engine = InProcess.from_settings(settings(sim.url, models=MODELS))
    yield engine
    await engine.aclose()


def _agent(model: RelevoModel, **extra: Any) -> Agent[Any]:
    return Agent(name="support", instructions="You are the support agent.", model=model, **extra)


def _body(sim: Simulator, served: str, index: int = -1) -> dict[str, Any]:
    return dict(sim.requests(served)[index].body)


async def test_an_agent_finishes_its_tool_loop_on_the_backup(
    sim: Simulator, engine: InProcess, results: list[TurnResult]
) -> None:
    sim.set_faults("alpha", Fault(status=503))
    sim.set_faults("beta", Fault(reply_tool="lookup", tool_args={"order_id": "42"}, times=1))
    relevo = RelevoModel(engine, tenant_id="acme", on_result=results.append)
    run = await Runner.run(_agent(relevo, tools=[lookup]), "Where is order 42?")
    assert called == ["lookup 42"]
    assert run.final_output.startswith("Answer from beta.")
    assert [(r.status, r.effective_model, r.step) for r in results] == [
        (Status.OK, "anthropic/beta", 1),
        (Status.OK, "anthropic/beta", 1),
    ]
    assert [r.response_id for r in run.raw_responses] == [r.turn_id for r in results]
    # The second call carried the whole loop: the instructions, the call and its result.
    sent = _body(sim, "beta")
    assert sent["system"] == "You are the support agent."
    [use] = [b for b in sent["messages"][1]["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"order_id": "42"}
    [answer] = sent["messages"][2]["content"]
    assert answer == {
        "type": "tool_result",
        "tool_use_id": use["id"],
        "content": "order 42: shipped",
    }


async def test_a_streamed_run_gets_the_text_as_it_comes(sim: Simulator, engine: InProcess) -> None:
    sim.set_faults("alpha", Fault(reply_tool="lookup", tool_args={"order_id": "7"}, times=1))
    relevo = RelevoModel(engine, tenant_id="acme")
    streamed = Runner.run_streamed(_agent(relevo, tools=[lookup]), "Where is order 7?")
    deltas: list[str] = []
    completed: list[ResponseCompletedEvent] = []
    items = []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            deltas.append(event.data.delta)
        elif event.type == "raw_response_event" and isinstance(event.data, ResponseCompletedEvent):
            completed.append(event.data)
        elif event.type == "run_item_stream_event":
            items.append(event.item)
    assert called == ["lookup 7"]
    assert len(deltas) > 1
    assert "".join(deltas) == streamed.final_output
    assert streamed.final_output.startswith("Answer from alpha.")
    assert any(isinstance(item, ToolCallItem) for item in items)
    assert [c.response.model for c in completed] == ["openai/alpha", "openai/alpha"]
    metadata = completed[-1].response.metadata
    assert metadata == {
        "relevo_status": "ok",
        "relevo_effective_model": "openai/alpha",
        "relevo_effective_provider": "oa",
        "relevo_step": "0",
    }


async def test_a_stream_the_agent_stops_reading_ends_the_turn(
    sim: Simulator, engine: InProcess
) -> None:
    """The SDK closes the model's stream when it stops reading (it raised, or was
    cancelled): the turn ends then, its provider call abandoned, not left running."""
    sim.set_faults("alpha", Fault(tokens=40, token_interval_s=0.05))
    relevo = RelevoModel(engine, tenant_id="acme")
    stream = relevo.stream_response(
        None,
        "Talk.",
        ModelSettings(),
        [],
        None,
        [],
        ModelTracing.DISABLED,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
    )
    async for event in stream:
        if isinstance(event, ResponseTextDeltaEvent):
            break
    await stream.aclose()
    for _ in range(50):  # the simulator counts the call once it sees the client leave
        if sim.calls("alpha", CallOutcome.ABANDONED):
            break
        await asyncio.sleep(0.02)
    assert sim.calls("alpha", CallOutcome.ABANDONED) == 1


async def test_the_agents_settings_reach_the_provider(sim: Simulator, engine: InProcess) -> None:
    relevo = RelevoModel(engine, tenant_id="acme")
    tuned = ModelSettings(
        tool_choice="refund",
        parallel_tool_calls=False,
        temperature=0.3,
        top_p=0.9,
        max_tokens=300,
        extra_args={"seed": 7, "stop": "END"},
    )
    agent = _agent(relevo, tools=[lookup, refund], model_settings=tuned)
    run = await Runner.run(agent, "Refund order 42.")
    # The forced tool was called (the simulator fills its arguments from the schema),
    # then the SDK reset tool_choice so that the agent could answer.
    assert len(called) == 1
    assert called[0].startswith("refund ")
    assert run.final_output.startswith("Answer from alpha.")
    first = _body(sim, "alpha", 0)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "refund"}}
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup", "refund"]
    assert {k: first[k] for k in ("parallel_tool_calls", "temperature", "top_p", "seed")} == {
        "parallel_tool_calls": False,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
    }
    assert first["stop"] == ["END"]
    assert 300 in (first.get("max_tokens"), first.get("max_completion_tokens"))
    assert "tool_choice" not in _body(sim, "alpha")
    # A reasoning model gets the agent's effort, on relevo's three levels.
    reasoning = InProcess.from_settings(
        settings(sim.url, ("openai/o4-mini", "anthropic/beta"), models=MODELS)
    )
    try:
        effort = ModelSettings(reasoning=OpenAIReasoning(effort="minimal"))
        thinker = _agent(RelevoModel(reasoning, tenant_id="acme"), model_settings=effort)
        await Runner.run(thinker, "Think.")
    finally:
        await reasoning.aclose()
    assert _body(sim, "o4-mini")["reasoning_effort"] == "low"


async def test_structured_output_and_usage(sim: Simulator, engine: InProcess) -> None:
    sim.set_faults("alpha", Fault(cache_read_tokens=40, reasoning_tokens=6))
    agent = _agent(RelevoModel(engine, tenant_id="acme"), output_type=Verdict)
    run = await Runner.run(agent, "Has order 42 shipped?")
    assert isinstance(run.final_output, Verdict)
    wanted = _body(sim, "alpha")["response_format"]
    assert wanted["type"] == "json_schema"
    assert wanted["json_schema"]["name"] == "final_output"
    assert wanted["json_schema"]["strict"] is True
    assert set(wanted["json_schema"]["schema"]["properties"]) == {"shipped", "order_id"}
    usage = run.context_wrapper.usage
    assert usage.requests == 1
    assert usage.input_tokens_details.cached_tokens == 40
    assert usage.input_tokens > 40  # every prompt token, the cached ones among them
    assert usage.output_tokens_details.reasoning_tokens == 6
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


async def test_images_and_pdfs_reach_the_provider(sim: Simulator, engine: InProcess) -> None:
    content = [
        {"type": "input_text", "text": "What is on the label?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        {
            "type": "input_file",
            "file_data": f"data:application/pdf;base64,{PDF}",
            "filename": "a.pdf",
        },
    ]
    agent = _agent(RelevoModel(engine, tenant_id="acme"))
    await Runner.run(agent, [{"role": "user", "content": content}])
    [text, image, document] = _body(sim, "alpha")["messages"][1]["content"]
    assert text == {"type": "text", "text": "What is on the label?"}
    assert image["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    assert document["file"] == {
        "filename": "a.pdf",
        "file_data": f"data:application/pdf;base64,{PDF}",
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_claude_thinking_survives_an_sdk_tool_loop(sim: Simulator, stream: bool) -> None:
    """Claude's signed and redacted thinking goes through the SDK's history and back to
    Claude unchanged (the simulated Claude refuses a tool loop without it)."""
    sim.set_faults(
        "beta",
        Fault(reply_tool="lookup", tool_args={"order_id": "42"}, times=1, redacted_thinking=True),
    )
    engine = InProcess.from_settings(settings(sim.url, ORDER["anthropic"], models=MODELS))
    results: list[TurnResult] = []
    relevo = RelevoModel(engine, tenant_id="acme", on_result=results.append)
    agent = _agent(relevo, tools=[lookup], model_settings=ModelSettings(max_tokens=2048))
    try:
        if stream:
            streamed = Runner.run_streamed(agent, "Where is order 42?")
            async for _ in streamed.stream_events():
                pass
            items = streamed.new_items
        else:
            items = (await Runner.run(agent, "Where is order 42?")).new_items
    finally:
        await engine.aclose()
    assert [r.status for r in results] == [Status.OK, Status.OK]
    first = results[0].reply
    assert first is not None
    thinking, redacted = first.reasoning
    carried = [
        open_carried(i.raw_item.encrypted_content) for i in items if isinstance(i, ReasoningItem)
    ]
    assert [c.reasoning for c in carried if c is not None][:2] == [thinking, redacted]
    body = _body(sim, "beta")
    blocks = body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "redacted_thinking", "tool_use"]
    assert blocks[0]["signature"] == thinking.signature
    assert blocks[0]["thinking"] == thinking.text
    assert blocks[1]["data"] == redacted.redacted


async def test_gemini_call_signatures_survive_an_sdk_tool_loop(sim: Simulator) -> None:
    sim.set_faults("gamma", Fault(reply_tool="lookup", tool_args={"order_id": "42"}, times=1))
    engine = InProcess.from_settings(settings(sim.url, ORDER["gemini"], models=MODELS))
    results: list[TurnResult] = []
    relevo = RelevoModel(engine, tenant_id="acme", on_result=results.append)
    try:
        await Runner.run(_agent(relevo, tools=[lookup]), "Where is order 42?")
    finally:
        await engine.aclose()
    assert [(r.status, r.effective_model) for r in results] == [(Status.OK, "google/gamma")] * 2
    first = results[0].reply
    assert first is not None
    [call] = first.tool_calls
    [sent] = [p for p in _body(sim, "gamma")["contents"][1]["parts"] if "functionCall" in p]
    assert sent["thoughtSignature"] == call.signature


def test_the_envelope_carries_reasoning_whole_and_ignores_anyone_elses() -> None:
    reasoning = Reasoning(origin="anthropic", text="hmm", signature="c2ln", redacted=None)
    carried = Carried(reasoning=reasoning, signatures={"call_1": "c2ln"})
    sealed = seal(carried)
    assert sealed.startswith("relevo.v1:")
    assert open_carried(sealed) == carried
    for foreign in (
        None,
        "",
        "gAAAAABopaque-openai-blob",
        "relevo.v1:not base64!",
        "relevo.v1:e30",
    ):
        assert open_carried(foreign) in (None, Carried())


async def _degraded_engine(sim: Simulator) -> Any:
    config = settings(sim.url)
    guard = ScriptedGuard({"alpha": Availability.OPEN}, refuse={"an": "tenant_budget_exhausted"})
    client = make_client()
    return InProcess(Chain.from_settings(config, client, guard=guard), [client.aclose])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_degraded_turn_is_an_exception_or_the_message(sim: Simulator, stream: bool) -> None:
    engine = await _degraded_engine(sim)

    async def run(agent: Agent[Any]) -> Any:
        if not stream:
            return (await Runner.run(agent, "Hello")).final_output
        streamed = Runner.run_streamed(agent, "Hello")
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    try:
        with pytest.raises(AgentsTurnNotAnswered) as caught:
            await run(_agent(RelevoModel(engine, tenant_id="acme")))
        assert isinstance(caught.value, AgentsException)
        assert isinstance(caught.value, TurnNotAnswered)
        assert caught.value.result.status is Status.DEGRADED
        assert "tenant_budget_exhausted" in str(caught.value)
        message = caught.value.result.degradation_message
        assert message
        said = RelevoModel(engine, tenant_id="acme", on_degraded="message")
        assert await run(_agent(said)) == message
        # Structured output cannot be a message: the agent gets the exception.
        with pytest.raises(AgentsTurnNotAnswered):
            await run(_agent(said, output_type=Verdict))
    finally:
        await engine.aclose()
    assert sim.calls() == 0


async def test_what_relevo_cannot_carry_is_refused_by_name(
    sim: Simulator, engine: InProcess
) -> None:
    relevo = RelevoModel(engine, tenant_id="acme")
    cases: list[tuple[Agent[Any], Any, dict[str, Any], str]] = [
        (_agent(relevo, tools=[WebSearchTool()]), "Hi", {}, "function tools only"),
        (_agent(relevo, model_settings=ModelSettings(presence_penalty=1)), "Hi", {}, "presence"),
        (_agent(relevo), "Hi", {"previous_response_id": "resp_1"}, "previous_response_id"),
        (_agent(relevo), [{"type": "item_reference", "id": "x"}], {}, "'item_reference'"),
    ]
    for agent, given, options, named in cases:
        with pytest.raises(AgentsInputError, match=named) as caught:
            await Runner.run(agent, given, **options)
        assert isinstance(caught.value, UserError)
    assert sim.calls() == 0


async def test_the_provider_serves_the_model_name_default_on_the_default_chain(
    sim: Simulator,
) -> None:
    engine = InProcess.from_settings(settings(sim.url, models=MODELS))
    provider = RelevoProvider(engine, tenant_id="acme", side_effect_tools={"refund"})
    agent = Agent(name="a", model="default", tools=[refund])
    try:
        run = await Runner.run(agent, "Hi", run_config=RunConfig(model_provider=provider))
    finally:
        await provider.aclose()
    assert run.final_output.startswith("Answer from alpha.")
    model = provider.get_model("default")
    assert isinstance(model, RelevoModel)
    assert model.options.side_effect_tools == frozenset({"refund"})
    assert model.options.chain == "default"
    assert isinstance(refund, FunctionTool)


@pytest.mark.slow
async def test_through_the_fleet_an_agent_runs_on_a_worker(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(status=503))
    sim.set_faults("beta", Fault(reply_tool="lookup", tool_args={"order_id": "9"}, times=1))
    results: list[TurnResult] = []
    with stub_fleet(settings(sim.url), concurrency=2) as fleet:
        engine = ThroughFleet(Producer.from_settings(fleet.settings), timeout_s=20)
        relevo = RelevoModel(engine, tenant_id="acme", on_result=results.append)
        try:
            ran = await Runner.run(_agent(relevo, tools=[lookup]), "Where is order 9?")
            streamed = Runner.run_streamed(_agent(relevo), "And now?")
            async for _ in streamed.stream_events():
                pass
        finally:
            await engine.aclose()
    assert called == ["lookup 9"]
    assert ran.final_output.startswith("Answer from beta.")
    assert streamed.final_output.startswith("Answer from beta.")
    assert [r.effective_model for r in results] == ["anthropic/beta"] * 3


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RELEVO_")}


def test_the_example_finishes_its_tool_loop_while_the_primary_is_down() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agents_sdk.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=90,
        env=_clean_env(),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "step 1: openai/gpt-sim called (lookup_order); anthropic/claude-sim: error 529 overloaded",
        "step 2: openai/gpt-sim called (track_parcel); anthropic/claude-sim: error 529 overloaded",
        "step 3: openai/gpt-sim answered (text); anthropic/claude-sim: skipped breaker_open",
    ]
    assert lines[3].startswith("answer: Answer from gpt-sim.")
    assert lines[4] == "calls the primary received: 2"
    assert "breaker.opened" in done.stderr
