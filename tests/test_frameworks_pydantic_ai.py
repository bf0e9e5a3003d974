"""relevo as a pydantic-ai model: real agents, over real HTTP to the simulated providers.

The chain is tests.chainkit's (openai/alpha, then anthropic/beta, then google/gamma);
the fleet test runs a real Celery worker on an in-process Redis.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.exceptions import AgentRunError, UserError
from pydantic_ai.messages import ImageUrl, ModelRequest, ModelResponse, ThinkingPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from tests.chainkit import ORDER, model, settings
from worker.adapters import make_client
from worker.fleet import Producer
from worker.fleet.testing import stub_fleet
from worker.frameworks import Engine, InProcess, ThroughFleet, TurnNotAnswered
from worker.frameworks.pydantic_ai import RelevoModel, TurnNotAnsweredError
from worker.frameworks.pydantic_ai.reasoning import seal, unseal
from worker.guard import Availability
from worker.guard.testing import ScriptedGuard
from worker.settings import Settings
from worker.simulator import Fault, Simulator
from worker.turn import Chain
from worker.types import Reasoning

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


ROOT = Path(__file__).resolve().parent.parent
DOWN = Fault(status=503)  # overloaded: the chain moves on at once
THINKING = {"anthropic/beta": model("anthropic", ("an", "beta"), thinking_budget_tokens=1024)}


@asynccontextmanager
async def relevo(config: Settings, **options: Any) -> AsyncIterator[RelevoModel]:
    engine = InProcess.from_settings(config)
    try:
        yield RelevoModel(engine, tenant_id="acme", **options)
    finally:
        await engine.aclose()


def support_agent(**kwargs: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(instructions="You are the support agent.", **kwargs)

    @agent.tool_plain
    def lookup_order(order_id: int) -> str:
        """Find an order."""
        return f"order {order_id}: tracking 1Z999"

    @agent.tool_plain
    def track_parcel(tracking: str) -> str:
        """Where a parcel is."""
        return f"parcel {tracking}: out for delivery"

    return agent


def two_tool_loop(sim: Simulator, served: str) -> None:
    sim.set_faults(
        served,
        Fault(reply_tool="lookup_order", tool_args={"order_id": 42}, times=1),
        Fault(reply_tool="track_parcel", tool_args={"tracking": "1Z999"}, times=1),
    )


def responses(messages: list[Any]) -> list[ModelResponse]:
    return [m for m in messages if isinstance(m, ModelResponse)]


async def test_an_agent_finishes_its_tool_loop_on_the_backup(sim: Simulator) -> None:
    sim.set_faults("alpha", DOWN)
    two_tool_loop(sim, "beta")
    async with relevo(settings(sim.url)) as relevo_model:
        result = await support_agent().run("Where is order 42?", model=relevo_model)
    steps = responses(result.all_messages())
    assert [s.model_name for s in steps] == ["anthropic/beta"] * 3
    assert [p.tool_name for s in steps for p in s.tool_calls] == ["lookup_order", "track_parcel"]
    assert result.output.startswith("Answer from beta.")
    details = steps[0].provider_details or {}
    assert details["step"] == 1
    assert [a["outcome"] for a in details["attempts"]] == ["error", "ok"]
    # What the tools returned went back to the model, after the system prompt it was given.
    last = sim.requests("beta")[-1].body
    assert last["system"] == "You are the support agent."
    results = [b for m in last["messages"] for b in m["content"] if isinstance(b, dict)]
    assert any("out for delivery" in str(b.get("content")) for b in results)


async def test_usage_and_cost_are_the_turns(sim: Simulator) -> None:
    sim.set_faults("alpha", Fault(cache_read_tokens=40, reasoning_tokens=3, tokens=5))
    async with relevo(settings(sim.url)) as relevo_model:
        result = await Agent(relevo_model).run("Where is order 42?")
    [step] = responses(result.all_messages())
    usage = step.usage
    assert usage.cache_read_tokens == 40
    assert usage.input_tokens > 40  # pydantic-ai counts cache reads in the input
    assert usage.output_reasoning_tokens == 3
    assert usage.output_tokens == 5 + 3
    assert usage.cost is not None
    assert usage.cost > 0
    assert step.finish_reason == "stop"


async def test_run_stream_streams_text_then_runs_tools(sim: Simulator) -> None:
    sim.set_faults("alpha", DOWN)
    sim.set_faults(
        "beta",
        Fault(reply_tool="lookup_order", tool_args={"order_id": 42}, times=1),
        Fault(tokens=12, token_interval_s=0.01),
    )
    async with relevo(settings(sim.url)) as relevo_model:
        agent = support_agent(model=relevo_model)
        async with agent.run_stream("Where is order 42?") as run:
            pieces = [p async for p in run.stream_text(delta=True, debounce_by=None)]
            messages = run.all_messages()
    assert len(pieces) > 1
    assert "".join(pieces).startswith("Answer from beta.")
    steps = responses(messages)
    assert [p.tool_name for p in steps[0].tool_calls] == ["lookup_order"]
    assert steps[-1].model_name == "anthropic/beta"
    assert steps[-1].usage.output_tokens == 12


async def test_agent_iter_walks_the_same_loop_streamed(sim: Simulator) -> None:
    two_tool_loop(sim, "alpha")
    async with relevo(settings(sim.url)) as relevo_model:
        agent = support_agent(model=relevo_model)
        async with agent.iter("Where is order 42?") as run:
            async for node in run:
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as stream:
                        async for _ in stream:
                            pass
    assert run.result is not None
    assert run.result.output.startswith("Answer from alpha.")
    assert sim.calls("alpha") == 3


class Invoice(BaseModel):
    number: str
    total: float


async def test_output_type_through_a_forced_output_tool(sim: Simulator) -> None:
    async with relevo(settings(sim.url)) as relevo_model:
        result = await Agent(relevo_model, output_type=Invoice).run("Read the invoice.")
    assert isinstance(result.output, Invoice)
    body = sim.requests("alpha")[-1].body
    assert body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in body["tools"]] == ["final_result"]


async def test_native_structured_output_is_a_json_schema(sim: Simulator) -> None:
    schemas = {"openai/alpha": model("openai", ("oa", "alpha"), structured_output=True)}
    async with relevo(settings(sim.url, models=schemas)) as relevo_model:
        agent = Agent(relevo_model, output_type=NativeOutput(Invoice))
        result = await agent.run("Read the invoice.")
    assert isinstance(result.output, Invoice)
    sent = sim.requests("alpha")[-1].body["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["schema"]["required"] == ["number", "total"]


async def test_a_tool_forced_by_name(sim: Simulator) -> None:
    tools = [ToolDefinition(name=name) for name in ("lookup_order", "track_parcel")]
    async with relevo(settings(sim.url)) as relevo_model:
        response = await relevo_model.request(
            [ModelRequest.user_text_prompt("Track 1Z999.")],
            {"tool_choice": ["track_parcel"]},
            ModelRequestParameters(function_tools=tools),
        )
    assert [p.tool_name for p in response.tool_calls] == ["track_parcel"]
    body = sim.requests("alpha")[-1].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "track_parcel"}}
    assert [t["function"]["name"] for t in body["tools"]] == ["track_parcel"]


async def test_model_settings_reach_the_provider(sim: Simulator) -> None:
    async with relevo(settings(sim.url)) as relevo_model:
        await Agent(relevo_model).run(
            "Hello",
            model_settings={
                "max_tokens": 77,
                "temperature": 0.3,
                "seed": 7,
                "stop_sequences": ["END"],
            },
        )
    body = sim.requests("alpha")[-1].body
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 77
    assert (body["temperature"], body["seed"], body["stop"]) == (0.3, 7, ["END"])


async def test_what_relevo_cannot_send_is_refused_by_name(sim: Simulator) -> None:
    async with relevo(settings(sim.url)) as relevo_model:
        agent = Agent(relevo_model)
        with pytest.raises(UserError, match="stop"):
            await agent.run("Hi", model_settings={"stop_sequences": ["a", "b", "c", "d", "e"]})
        with pytest.raises(UserError, match="https"):
            await agent.run(["Look", ImageUrl("http://example.com/a.png")])
    assert sim.calls() == 0


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_claude_thinking_round_trips_through_the_agent(sim: Simulator, stream: bool) -> None:
    sim.set_faults(
        "beta",
        Fault(
            reply_tool="lookup_order", tool_args={"order_id": 42}, times=1, redacted_thinking=True
        ),
    )
    config = settings(sim.url, ORDER["anthropic"], models=THINKING)
    async with relevo(config) as relevo_model:
        # Room for the thinking budget (1024): Claude thinks only with max_tokens above it.
        agent = support_agent(model=relevo_model, model_settings={"max_tokens": 2048})
        if stream:
            async with agent.run_stream("Where is order 42?") as run:
                await run.get_output()
                messages = run.all_messages()
        else:
            messages = (await agent.run("Where is order 42?")).all_messages()
    thinking = [p for p in responses(messages)[0].parts if isinstance(p, ThinkingPart)]
    assert [p.provider_name for p in thinking] == ["relevo", "relevo"]
    assert thinking[0].content  # the text shows as the part's content
    first, redacted = (unseal(p.signature or "") for p in thinking)
    assert (first.origin, redacted.origin) == ("anthropic", "anthropic")
    assert redacted.redacted
    # The simulated Claude refuses a tool loop that lost its thinking: this one went back whole.
    assert sim.calls("beta", "ok") == 2
    blocks = sim.requests("beta")[-1].body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "redacted_thinking", "tool_use"]
    assert blocks[0]["signature"] == first.signature
    assert blocks[1]["data"] == redacted.redacted


def test_the_reasoning_envelope_keeps_every_field_and_refuses_tampering() -> None:
    reasoning = Reasoning(origin="anthropic", text="t", signature="c2ln", redacted="cmVk")
    assert unseal(seal(reasoning)) == reasoning
    for bad in ("c2ln", "relevo.v1:not-base64!", seal(reasoning)[:-4] + "AAAA"):
        with pytest.raises(UserError, match="signature"):
            unseal(bad)


def _refusing(config: Settings) -> Engine:
    guard = ScriptedGuard({"alpha": Availability.OPEN}, refuse={"an": "tenant_budget_exhausted"})
    client = make_client()
    return InProcess(Chain.from_settings(config, client, guard=guard), [client.aclose])


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_a_degraded_turn_raises_or_answers_with_its_message(
    sim: Simulator, stream: bool
) -> None:
    config = settings(sim.url)

    async def ask(on_degraded: Any) -> str:
        engine = _refusing(config)
        agent = Agent(RelevoModel(engine, tenant_id="acme", on_degraded=on_degraded))
        try:
            if not stream:
                return str((await agent.run("Hello")).output)
            async with agent.run_stream("Hello") as run:
                return await run.get_output()
        finally:
            await engine.aclose()

    with pytest.raises(TurnNotAnsweredError, match="degraded: tenant_budget_exhausted") as caught:
        await ask("raise")
    assert isinstance(caught.value, AgentRunError)
    assert isinstance(caught.value, TurnNotAnswered)
    assert caught.value.result.degradation_message
    assert await ask("message") == caught.value.result.degradation_message


async def test_every_model_down_raises_even_when_messages_are_asked_for(sim: Simulator) -> None:
    for served in ("alpha", "beta", "gamma"):
        sim.set_faults(served, DOWN)
    async with relevo(settings(sim.url), on_degraded="message") as relevo_model:
        with pytest.raises(TurnNotAnsweredError, match="failed") as caught:
            await Agent(relevo_model).run("Hello")
    assert len(caught.value.result.attempts) == 3


async def test_a_direct_request_without_an_agent(sim: Simulator) -> None:
    async with relevo(settings(sim.url)) as relevo_model:
        response = await relevo_model.request(
            [ModelRequest.user_text_prompt("Hello")], None, ModelRequestParameters()
        )
    assert response.model_name == "openai/alpha"
    assert response.text is not None
    assert response.text.startswith("Answer from alpha.")


@pytest.mark.slow
async def test_through_the_fleet_runs_and_streams(sim: Simulator) -> None:
    sim.set_faults("alpha", DOWN)
    two_tool_loop(sim, "beta")
    with stub_fleet(settings(sim.url), concurrency=2) as fleet:
        engine = ThroughFleet(Producer.from_settings(fleet.settings), timeout_s=20)
        try:
            agent = support_agent(model=RelevoModel(engine, tenant_id="acme"))
            ran = await agent.run("Where is order 42?")
            async with agent.run_stream("Hello") as run:
                pieces = [p async for p in run.stream_text(delta=True, debounce_by=None)]
        finally:
            await engine.aclose()
    assert [s.model_name for s in responses(ran.all_messages())] == ["anthropic/beta"] * 3
    assert "".join(pieces).startswith("Answer from beta.")


@pytest.mark.slow
def test_the_example_runs_as_the_readme_says() -> None:
    done = subprocess.run(
        [sys.executable, "examples/pydantic_ai_agent.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 3
    assert "claude-sim error 529" in steps[0]
    assert "calls lookup_order" in steps[0]
    assert "calls track_parcel" in steps[1]
    assert "claude-sim skipped (breaker_open)" in steps[2]
    assert all("-> openai/gpt-sim" in step for step in steps)
    assert "calls to claude-sim: 2" in lines
