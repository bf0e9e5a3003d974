"""A pydantic-ai agent on relevo: a two-tool loop that finishes while its primary model is down.

    pip install -e '.[pydantic-ai]'    # from a checkout: examples/ is not in the package
    python examples/pydantic_ai_agent.py

Runs on this machine alone, with no Redis server and no API keys: simulated Anthropic and
OpenAI APIs on loopback, an in-process Redis (fakeredis) and a Celery worker, as
`relevo demo` does. The agent's model is `RelevoModel` through the fleet
(`ThroughFleet`): the one line that differs from an agent on a vendor's model.

The primary, anthropic/claude-sim, answers 529 overloaded to every call. Its breaker, kept
in Redis for the whole fleet, opens after two failures; from then on the primary is
skipped without a call. The backup, openai/gpt-sim, asks for the order, then for the
parcel's tracking, then answers. Each step prints the attempts and the model that answered.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tomllib

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse

from worker.fleet import Producer
from worker.fleet.testing import stub_fleet
from worker.frameworks import ThroughFleet
from worker.frameworks.pydantic_ai import RelevoModel
from worker.observability import configure_logging
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator

PRIMARY, BACKUP = "claude-sim", "gpt-sim"

CONFIG = """
turn_deadline_s = 20

[chain]
models = ["anthropic/claude-sim", "openai/gpt-sim"]

[redis]
namespace = "relevo-pydantic-ai-example"

[observability]
metrics_port = 0

# Two failures in a row open a model's breaker, for the whole fleet, for 30 s.
[breakers]
consecutive_failures_threshold = 2
break_s = 30
max_break_s = 60

[providers.anthropic_sim]
kind = "anthropic"
base_url = "{sim}"
api_key_env = "SIM_API_KEY"

[providers.openai_sim]
kind = "openai"
base_url = "{sim}/v1"
api_key_env = "SIM_API_KEY"

[models."anthropic/claude-sim"]
vendor = "anthropic"
context_window = 200000
input_usd_per_mtok = 3
output_usd_per_mtok = 15
serve = [{{ provider = "anthropic_sim", model_id = "claude-sim" }}]

[models."openai/gpt-sim"]
vendor = "openai"
context_window = 128000
input_usd_per_mtok = 2.5
output_usd_per_mtok = 10
serve = [{{ provider = "openai_sim", model_id = "gpt-sim" }}]
"""

agent = Agent(instructions="You are the support agent of a parcel shop. Be brief.")


@agent.tool_plain
def lookup_order(order_id: int) -> str:
    """Find an order by its number."""
    return f"order {order_id}: one parcel, tracking number 1Z999, shipped yesterday"


@agent.tool_plain
def track_parcel(tracking: str) -> str:
    """Where a parcel is now, by its tracking number."""
    return f"parcel {tracking}: at the local depot, out for delivery today"


def settings(sim_url: str) -> Settings:
    # Only this file configures the example: no RELEVO_* variable may point it elsewhere.
    for name in [n for n in os.environ if n.startswith("RELEVO_")]:
        del os.environ[name]
    os.environ["SIM_API_KEY"] = "sk-simulated-0000000000000000"
    return load_settings(data=tomllib.loads(CONFIG.format(sim=sim_url)))


def describe(step: int, response: ModelResponse) -> str:
    details = response.provider_details or {}
    tried = [
        f"{a['model']} {a['outcome']}"
        + (f" {a['http_status']}" if a["http_status"] else "")
        + (f" ({a['error_class']})" if a["error_class"] else "")
        for a in details.get("attempts", [])
    ]
    calls = [part.tool_name for part in response.tool_calls]
    did = f"calls {', '.join(calls)}" if calls else "answers"
    return f"step {step}: {'; '.join(tried)} -> {response.model_name} {did}"


async def ask(fleet_settings: Settings) -> int:
    engine = ThroughFleet(Producer.from_settings(fleet_settings), timeout_s=30)
    model = RelevoModel(engine, tenant_id="acme")
    try:
        result = await agent.run("Where is my order 42?", model=model)
    finally:
        await engine.aclose()
    responses = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    for step, response in enumerate(responses, start=1):
        print(describe(step, response))
    print(f"answer: {result.output}")
    print(f"{len(responses)} model steps, ${result.usage.cost or 0:.6f}")
    return 0 if responses[-1].model_name == f"openai/{BACKUP}" else 1


def main() -> int:
    configure_logging(level="error", stream=sys.stderr)
    with Simulator() as sim:
        sim.set_faults(PRIMARY, Fault(status=529))
        sim.set_faults(
            BACKUP,
            Fault(reply_tool="lookup_order", tool_args={"order_id": 42}, times=1),
            Fault(reply_tool="track_parcel", tool_args={"tracking": "1Z999"}, times=1),
        )
        print(f"{PRIMARY} (the primary) is down: it answers 529 overloaded to every call")
        with stub_fleet(settings(sim.url), concurrency=2) as fleet:
            status = asyncio.run(ask(fleet.settings))
        print(f"calls to {PRIMARY}: {sim.calls(PRIMARY)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
