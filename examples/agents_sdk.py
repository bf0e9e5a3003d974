"""An OpenAI Agents SDK agent on relevo: a tool loop that finishes while its primary is down.

    pip install -e '.[agents]'
    python examples/agents_sdk.py

Nothing leaves the machine and no API key is needed: relevo's simulated providers and
an in-process Redis (fakeredis, which the fleet-wide breakers live in) run in this
process. The chain is `examples/simulated.toml`'s: `anthropic/claude-sim`, then
`openai/gpt-sim`, then `google/gemini-sim`. The primary answers 529 overloaded to every
call; after its second failure its breaker opens for every process sharing that Redis,
and the next step skips it without a call. The agent looks an order up, tracks its
parcel, then answers; each step prints which model answered, and what the primary did.

The agent's code is the SDK's own: only its `model` is relevo's (`RelevoModel`). The
simulated backup is told which tool to call at each step (its `Fault`s): a simulator
does not read the conversation, it shows what relevo does around it.
"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled

from worker.fleet.testing import InProcessRedis
from worker.frameworks import InProcess
from worker.frameworks.openai_agents import RelevoModel
from worker.guard import open_guard
from worker.observability import configure_logging
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import TurnResult

PRIMARY, BACKUP = "claude-sim", "gpt-sim"
CONFIG = Path(__file__).with_name("simulated.toml")
# The breakers of a small example: two failures in a row open the primary's for a minute.
BREAKERS = {"consecutive_failures_threshold": 2, "min_calls_in_window": 2, "break_s": 60}


@function_tool
def lookup_order(order_id: str) -> str:
    """Find an order by its id: its status and the parcel's tracking number."""
    return f"order {order_id}: shipped on Monday, tracking number 1Z999AA10123456784"


@function_tool
def track_parcel(tracking_number: str) -> str:
    """Where a parcel is, by its tracking number."""
    return f"parcel {tracking_number}: at the local depot, out for delivery tomorrow"


def example_settings(sim_url: str, redis_url: str) -> Settings:
    """`examples/simulated.toml`, its providers on the simulator, its breakers on `redis_url`."""
    data: dict[str, Any] = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    for name, provider in data["providers"].items():
        provider["base_url"] = f"{sim_url}/v1" if name == "openai_sim" else sim_url
    data["redis"] = {"url": redis_url, "namespace": "relevo-agents-example"}
    data["breakers"] = BREAKERS
    return load_settings(data=data)


def report(step: int, result: TurnResult) -> None:
    """One line per model call of the agent: who answered, and what the primary did."""
    reply = result.reply
    did = "answered" if reply is None or not reply.tool_calls else "called"
    what = ", ".join(c.name for c in reply.tool_calls) if reply and reply.tool_calls else "text"
    primary = next(a for a in result.attempts if a.provider_model == PRIMARY)
    code = "" if primary.http_status is None else f" {primary.http_status}"
    print(
        f"step {step}: {result.effective_model} {did} ({what}); "
        f"{result.primary_model}: {primary.outcome}{code} {primary.error_class}"
    )


async def main() -> None:
    set_tracing_disabled(True)  # the SDK would export its traces to OpenAI
    # relevo's logs go to stderr, warnings only (a breaker opening): this prints its own lines.
    configure_logging(level="warning")
    with Simulator() as sim, InProcessRedis() as redis_url:
        sim.set_faults(PRIMARY, Fault(status=529))
        sim.set_faults(
            BACKUP,
            Fault(reply_tool="lookup_order", tool_args={"order_id": "A-1042"}, times=1),
            Fault(
                reply_tool="track_parcel",
                tool_args={"tracking_number": "1Z999AA10123456784"},
                times=1,
            ),
        )
        settings = example_settings(sim.url, redis_url)
        engine = InProcess.from_settings(settings, guard=open_guard(settings))
        results: list[TurnResult] = []

        def on_result(result: TurnResult) -> None:
            results.append(result)
            report(len(results), result)

        model = RelevoModel(engine, tenant_id="acme", on_result=on_result)
        agent = Agent(
            name="support",
            instructions="Answer questions about orders. Use the tools.",
            tools=[lookup_order, track_parcel],
            model=model,
        )
        try:
            run = await Runner.run(agent, "Where is my order A-1042?")
        finally:
            await engine.aclose()
        print(f"answer: {run.final_output}")
        print(f"calls the primary received: {sim.calls(PRIMARY)}")


if __name__ == "__main__":
    asyncio.run(main())
