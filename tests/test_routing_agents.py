"""Agents choose their chain by model name: a cheap triage agent hands off to a planner on
a premium chain, with both frameworks, in process and through the fleet.

The simulated providers answer each chain's primary: `alpha-mini` (the triage chain's)
asks for the hand-off, `beta` (the planner chain's) answers. Each turn's result names the
chain it ran on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, UserError
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import RunContext

from tests.chainkit import settings
from worker.fleet import Producer
from worker.fleet.testing import stub_fleet
from worker.frameworks import Engine, InProcess, ThroughFleet
from worker.frameworks.openai_agents import RelevoModel as AgentsModel
from worker.frameworks.openai_agents import RelevoProvider
from worker.frameworks.pydantic_ai import PydanticAIInputError
from worker.frameworks.pydantic_ai import RelevoModel as PydanticModel
from worker.settings import Settings
from worker.simulator import Fault, Simulator
from worker.types import TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


CHAINS = {
    "triage": {"models": ["openai/alpha-mini", "openai/alpha"]},
    "planner": {"models": ["anthropic/beta", "google/gamma"]},
}


def config(sim: Simulator) -> Settings:
    # Named chains go through the fleet once no relevo 0.1.0 worker may run a turn.
    return settings(sim.url, chains=CHAINS, worker={"oldest_release": "0.2.0"})


@asynccontextmanager
async def engine_for(sim: Simulator, where: str) -> AsyncIterator[Engine]:
    if where == "in-process":
        engine: Engine = InProcess.from_settings(config(sim))
        try:
            yield engine
        finally:
            await engine.aclose()
        return
    with stub_fleet(config(sim), concurrency=4) as fleet:
        engine = ThroughFleet(Producer.from_settings(fleet.settings), timeout_s=20)
        try:
            yield engine
        finally:
            await engine.aclose()


WHERE = [
    pytest.param("in-process"),
    pytest.param("through-the-fleet", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("where", WHERE)
async def test_an_agents_sdk_triage_agent_hands_off_to_a_planner_on_another_chain(
    sim: Simulator, where: str
) -> None:
    sim.set_faults("alpha-mini", Fault(reply_tool="transfer_to_planner", tool_args={}, times=1))
    results: list[TurnResult] = []
    async with engine_for(sim, where) as engine:
        provider = RelevoProvider(engine, tenant_id="acme", on_result=results.append)
        planner = Agent(name="planner", instructions="Plan the trip.", model="planner")
        triage = Agent(name="triage", instructions="Route it.", model="triage", handoffs=[planner])
        run = await Runner.run(
            triage, "Plan my trip to Oslo", run_config=RunConfig(model_provider=provider)
        )
    assert run.last_agent is planner
    assert run.final_output.startswith("Answer from beta.")
    assert [(r.chain, r.effective_model) for r in results] == [
        ("triage", "openai/alpha-mini"),
        ("planner", "anthropic/beta"),
    ]
    assert sim.calls("alpha") == sim.calls("gamma") == 0


async def test_an_agents_sdk_model_name_no_chain_has_is_a_user_error(sim: Simulator) -> None:
    async with engine_for(sim, "in-process") as engine:
        provider = RelevoProvider(engine, tenant_id="acme")
        agent = Agent(name="a", model="premium")
        with pytest.raises(UserError, match=r"no chain named 'premium' \(chains: default, "):
            await Runner.run(agent, "Hi", run_config=RunConfig(model_provider=provider))
        with pytest.raises(UserError, match="'premium'"):
            AgentsModel(engine, tenant_id="acme", chain="premium")
        # No name: the tenant's default chain, else `default`; `default`: that chain, as a
        # request naming it.
        assert isinstance(provider.get_model(None), AgentsModel)
        assert provider.get_model(None).options.chain is None
        assert provider.get_model("default").options.chain == "default"
    assert sim.calls() == 0


@pytest.mark.parametrize("where", WHERE)
async def test_a_pydantic_ai_triage_agent_delegates_to_a_planner_on_another_chain(
    sim: Simulator, where: str
) -> None:
    sim.set_faults("alpha-mini", Fault(reply_tool="plan", tool_args={"goal": "Oslo"}, times=1))
    results: list[TurnResult] = []
    async with engine_for(sim, where) as engine:
        cheap = PydanticModel(engine, tenant_id="acme", chain="triage", on_result=results.append)
        premium = PydanticModel(
            engine,
            tenant_id="acme",
            chain="planner",
            metadata={"agent": "planner"},
            on_result=results.append,
        )
        planner: PydanticAgent[None, str] = PydanticAgent(premium, instructions="Plan it.")
        triage: PydanticAgent[None, str] = PydanticAgent(cheap, instructions="Route it.")

        @triage.tool
        async def plan(ctx: RunContext[None], goal: str) -> str:
            """Hand a planning question to the planner."""
            done = await planner.run(f"Plan a trip to {goal}", usage=ctx.usage)
            return done.output

        ran = await triage.run("Plan my trip to Oslo")
    assert ran.output.startswith("Answer from alpha-mini.")
    assert [(r.chain, r.effective_model, r.metadata) for r in results] == [
        ("triage", "openai/alpha-mini", {}),
        ("planner", "anthropic/beta", {"agent": "planner"}),
        ("triage", "openai/alpha-mini", {}),
    ]
    assert premium.model_name == "planner"


def test_a_pydantic_ai_model_on_a_chain_the_engine_has_not_is_refused_at_construction(
    sim: Simulator,
) -> None:
    class Engine:
        chains = ("default", "triage")

        async def aclose(self) -> None:
            pass

    engine: Any = Engine()
    with pytest.raises(PydanticAIInputError, match=r"no chain named 'premium' \(chains: default"):
        PydanticModel(engine, tenant_id="acme", chain="premium")
    assert PydanticModel(engine, tenant_id="acme", chain="triage").model_name == "triage"


@pytest.mark.slow
def test_the_routing_example_prints_what_the_routing_page_shows() -> None:
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELEVO_")}
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "routing_agents.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    page = (root / "docs" / "routing.md").read_text(encoding="utf-8")
    shown = page.split("$ python examples/routing_agents.py\n", 1)[1].split("```", 1)[0]
    assert done.stdout == shown
