"""The same pydantic-ai agent on relevo and on pydantic-ai's own FallbackModel.

One agent with two tools: each run is a three-step tool loop (a call to `lookup_order`,
then to `track_parcel`, then the answer), the backup scripted to answer it that way. The
chain is the primary `alpha` then the backup `beta`, both over OpenAI Chat Completions
on the simulator (`relevo simulate` in its own process, pinned to the other core):

- relevo: `RelevoModel` on a chain in this process with the Redis guard (breakers on a
  private `redis-server`), first-byte timeout 0.5 s, breaker after 2 failures in a row;
- pydantic-ai: `FallbackModel(OpenAIChatModel("alpha"), OpenAIChatModel("beta"))`, as
  its documentation writes it (its defaults: the OpenAI SDK's own retries, no timeout).

Two cases, each contender running the same `--runs` agent runs one after the other:
the primary down (503 overloaded to every call) and the primary slow (every call
answered after 3 s). Printed: the calls the primary received, the agent's wall time
per run (p50, max), and this process's CPU per model step; then the ratios.

    pip install -e '.[bench]'
    python bench/frameworks.py            # ~150 s (10 agent runs each)
    python bench/frameworks.py --quick    # ~80 s (5)

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from worker.frameworks import InProcess
from worker.frameworks.pydantic_ai import RelevoModel
from worker.guard.redis_guard import open_guard
from worker.settings import Settings, load_settings
from worker.simulator import Fault

PRIMARY, BACKUP = kit.PRIMARY, kit.BACKUP
SLOW_S = 3.0
STEPS = 3

agent = Agent(instructions="You are the support agent of a parcel shop. Be brief.")


@agent.tool_plain
def lookup_order(order_id: int) -> str:
    """Find an order by its number."""
    return f"order {order_id}: tracking 1Z999"


@agent.tool_plain
def track_parcel(tracking: str) -> str:
    """Where a parcel is now."""
    return f"parcel {tracking}: out for delivery"


def loop_faults(**extra: Any) -> tuple[Fault, ...]:
    """The three answers of one agent run: two tool calls, then text; `extra` on each."""
    return (
        Fault(reply_tool="lookup_order", tool_args={"order_id": 42}, times=1, **extra),
        Fault(reply_tool="track_parcel", tool_args={"tracking": "1Z999"}, times=1, **extra),
        Fault(**extra),
    )


def relevo_settings(rig: kit.Rig) -> Settings:
    provider = {"api_key_env": kit.KEY_ENV, "first_byte_timeout_s": 0.5}
    model = {"vendor": "openai", "context_window": 100_000}
    prices = {"input_usd_per_mtok": 2, "output_usd_per_mtok": 8}
    return load_settings(
        data={
            "turn_deadline_s": 30,
            "chain": {"models": ["openai/alpha", "openai/beta"]},
            "redis": {"url": rig.redis_url, "namespace": f"bench-fw-{time.time_ns()}"},
            "budgets": {"default_daily_usd": 1_000_000, "default_monthly_usd": 10_000_000},
            "breakers": {"consecutive_failures_threshold": 2, "break_s": 120},
            "providers": {"oa": {"kind": "openai", "base_url": f"{rig.sim_url}/v1", **provider}},
            "models": {
                f"openai/{m}": {**model, **prices, "serve": [{"provider": "oa", "model_id": m}]}
                for m in (PRIMARY, BACKUP)
            },
        }
    )


@dataclass
class Outcome:
    primary_calls: int
    wall_s: list[float]
    cpu_per_step_ms: float


async def measure(rig: kit.Rig, model: Model, runs: int, primary: tuple[Fault, ...]) -> Outcome:
    rig.sim.reset()
    walls: list[float] = []
    steps = 0
    cpu = time.process_time()
    for _ in range(runs):
        rig.sim.set_faults(PRIMARY, *primary)
        rig.sim.set_faults(BACKUP, *loop_faults())
        started = time.perf_counter()
        result = await agent.run("Where is my order 42?", model=model)
        walls.append(time.perf_counter() - started)
        answered = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
        if len(answered) != STEPS:
            raise RuntimeError(f"expected a {STEPS}-step loop, got {len(answered)} steps")
        steps += len(answered)
    cpu_ms = (time.process_time() - cpu) * 1000 / steps
    return Outcome(rig.sim.calls(PRIMARY), walls, cpu_ms)


async def with_relevo(rig: kit.Rig, runs: int, primary: tuple[Fault, ...]) -> Outcome:
    settings = relevo_settings(rig)
    engine = InProcess.from_settings(settings, guard=open_guard(settings))
    try:
        return await measure(rig, RelevoModel(engine, tenant_id="acme"), runs, primary)
    finally:
        await engine.aclose()


async def with_fallback_model(rig: kit.Rig, runs: int, primary: tuple[Fault, ...]) -> Outcome:
    provider = OpenAIProvider(base_url=f"{rig.sim_url}/v1", api_key=kit.KEY)
    model = FallbackModel(
        OpenAIChatModel(PRIMARY, provider=provider), OpenAIChatModel(BACKUP, provider=provider)
    )
    async with provider.client:
        return await measure(rig, model, runs, primary)


Contender = Callable[[kit.Rig, int, tuple[Fault, ...]], Awaitable[Outcome]]
CONTENDERS: dict[str, Contender] = {"relevo": with_relevo, "fallback_model": with_fallback_model}
CASES: dict[str, tuple[Fault, ...]] = {
    "primary_down": (Fault(status=503),),
    # Slow, not broken: if a contender waits, the primary does answer (the loop's answers).
    "primary_slow": (*loop_faults(latency_s=SLOW_S)[:2], Fault(latency_s=SLOW_S)),
}


async def main(runs: int) -> None:
    kit.quiet_relevo_logs()
    client_core, rig_core = kit.cores()
    kit.pin(0, client_core)
    with kit.rig(rig_core) as rig:
        for case, primary in CASES.items():
            outcomes: dict[str, Outcome] = {}
            for name, contender in CONTENDERS.items():
                kit.say(f"{case}: {name}, {runs} agent runs")
                outcomes[name] = await contender(rig, runs, primary)
            for name, o in outcomes.items():
                kit.figure(f"{case}.{name}.primary_calls", o.primary_calls, "calls")
                kit.figure(f"{case}.{name}.wall_p50", kit.median(o.wall_s), "s")
                kit.figure(f"{case}.{name}.wall_max", max(o.wall_s), "s")
                kit.figure(f"{case}.{name}.cpu_per_step", o.cpu_per_step_ms, "ms")
            ours, theirs = outcomes["relevo"], outcomes["fallback_model"]
            kit.figure(
                f"{case}.wall_p50_ratio", kit.median(ours.wall_s) / kit.median(theirs.wall_s), "x"
            )
            kit.figure(
                f"{case}.cpu_per_step_ratio", ours.cpu_per_step_ms / theirs.cpu_per_step_ms, "x"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="agent runs per contender and case")
    parser.add_argument("--quick", action="store_true", help="5 agent runs per contender and case")
    args = parser.parse_args()
    asyncio.run(main(5 if args.quick else args.runs))
