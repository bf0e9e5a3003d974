"""Two agents on two chains: a cheap triage agent hands off to a planner on a premium chain.

    pip install -e '.[agents]'
    python examples/routing_agents.py

Nothing leaves the machine and no API key is needed: relevo's simulated providers run in
this process. The chains are `examples/simulated.toml`'s models, arranged for two agents:

    [chains.triage]    openai/gpt-sim, google/gemini-sim        (cheap)
    [chains.planner]   anthropic/claude-sim, openai/gpt-sim     (premium)

Each agent names its chain as its model (`Agent(model="planner")`); `RelevoProvider` runs
the agent's turns on it. The triage agent hands off (the simulated gpt-sim is told to call
the hand-off tool: a simulator does not read the conversation), and the planner answers.
Each turn prints its chain and the model that answered.
"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, set_tracing_disabled

from worker.frameworks import InProcess
from worker.frameworks.openai_agents import RelevoProvider
from worker.observability import configure_logging
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import TurnResult

CONFIG = Path(__file__).with_name("simulated.toml")
CHAINS = {
    "triage": {"models": ["openai/gpt-sim", "google/gemini-sim"]},
    "planner": {"models": ["anthropic/claude-sim", "openai/gpt-sim"]},
}


def example_settings(sim_url: str) -> Settings:
    """`examples/simulated.toml` with the two chains, its providers on the simulator."""
    data: dict[str, Any] = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    for name, provider in data["providers"].items():
        provider["base_url"] = f"{sim_url}/v1" if name == "openai_sim" else sim_url
    data["chains"] = CHAINS
    return load_settings(data=data)


def report(result: TurnResult) -> None:
    reply = result.reply
    calls = ", ".join(c.name for c in reply.tool_calls) if reply and reply.tool_calls else ""
    did = f"called {calls}" if calls else "answered"
    print(f"chain {result.chain}: {result.effective_model} {did}")


async def main() -> None:
    set_tracing_disabled(True)  # the SDK would export its traces to OpenAI
    configure_logging(level="warning")
    with Simulator() as sim:
        sim.set_faults("gpt-sim", Fault(reply_tool="transfer_to_planner", tool_args={}, times=1))
        engine = InProcess.from_settings(example_settings(sim.url))
        provider = RelevoProvider(engine, tenant_id="acme", on_result=report)
        planner = Agent(name="planner", instructions="Plan the trip.", model="planner")
        triage = Agent(
            name="triage", instructions="Route the request.", model="triage", handoffs=[planner]
        )
        try:
            run = await Runner.run(
                triage, "Plan my trip to Oslo", run_config=RunConfig(model_provider=provider)
            )
        finally:
            await provider.aclose()
    print(f"{run.last_agent.name}: {run.final_output}")


if __name__ == "__main__":
    asyncio.run(main())
