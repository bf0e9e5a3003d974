"""`relevo demo`: the chain against simulated providers that misbehave on cue.

Runs in one process with no Redis and no API keys: simulated providers on
loopback, the real adapters and chain, and a few hundred turns in phases
(healthy, a primary outage, a rate-limit burst, an auth failure) with a summary
of what each turn got and how many calls each provider received.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from worker.adapters import make_client
from worker.chain import Chain
from worker.models import Message, TurnRequest, TurnResult
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator

__all__ = ["run_demo"]

CHAIN = ("anthropic/claude-sim", "openai/gpt-sim", "google/gemini-sim")
MODEL_IDS = {"anthropic/claude-sim": "claude-sim", "openai/gpt-sim": "gpt-sim"}
MODEL_IDS["google/gemini-sim"] = "gemini-sim"


@dataclass(frozen=True)
class Phase:
    name: str
    turns: int
    faults: dict[str, tuple[Fault, ...]]


PHASES = (
    Phase("healthy", 80, {}),
    Phase("primary outage (529)", 80, {"claude-sim": (Fault(status=529),)}),
    Phase(
        "rate-limit burst",
        80,
        {"claude-sim": (Fault(status=429, headers={"retry-after": "0.2"}, rate=0.5),)},
    ),
    Phase("primary key revoked (401)", 20, {"claude-sim": (Fault(status=401),)}),
)


def demo_settings(url: str) -> Settings:
    providers = {
        "anthropic_sim": {"kind": "anthropic", "base_url": url},
        "openai_sim": {"kind": "openai", "base_url": f"{url}/v1"},
        "gemini_sim": {"kind": "gemini", "base_url": url},
    }
    models = {
        slug: {
            "vendor": slug.split("/")[0],
            "context_window": 100_000,
            "input_usd_per_mtok": 3,
            "output_usd_per_mtok": 15,
            "serve": [{"provider": provider, "model_id": MODEL_IDS[slug]}],
        }
        for slug, provider in zip(CHAIN, providers, strict=True)
    }
    return load_settings(
        data={
            "chain": {"models": list(CHAIN)},
            "providers": providers,
            "models": models,
            "retry": {"base_delay_s": 0.05, "retry_after_cap_s": 1.0},
        }
    )


def _request(i: int) -> TurnRequest:
    return TurnRequest(
        tenant_id=f"tenant-{i % 4}",
        messages=(
            Message(role="system", content="You are a support agent."),
            Message(role="user", content=f"Question number {i}?"),
        ),
        deadline_s=10,
    )


async def _run_phase(chain: Chain, phase: Phase, concurrency: int) -> list[TurnResult]:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> TurnResult:
        async with gate:
            return await chain.run(_request(i))

    return list(await asyncio.gather(*(one(i) for i in range(phase.turns))))


def _summary(rows: Sequence[tuple[Phase, list[TurnResult], dict[str, int]]]) -> Table:
    table = Table(title="relevo demo: what each turn got")
    for column in ("phase", "turns", "status", "step", "effective model", "provider calls"):
        table.add_column(column)
    for phase, results, calls in rows:
        status = Counter(r.status.value for r in results)
        steps = Counter(r.step for r in results if r.step is not None)
        models = Counter(r.effective_model for r in results if r.effective_model)
        table.add_row(
            phase.name,
            str(len(results)),
            _fmt(status),
            _fmt({f"step {k}": v for k, v in sorted(steps.items())}),
            _fmt(models),
            _fmt(calls),
        )
    return table


def _fmt(counts: dict[str, int] | Counter[str]) -> str:
    return "\n".join(f"{name}: {count}" for name, count in counts.items()) or "-"


async def _main(concurrency: int, console: Console) -> None:
    with Simulator() as sim:
        settings = demo_settings(sim.url)
        rows = []
        async with make_client() as client:
            chain = Chain.from_settings(settings, client)
            for phase in PHASES:
                sim.reset()
                for model_id, faults in phase.faults.items():
                    sim.set_faults(model_id, *faults)
                with console.status(f"{phase.name}: {phase.turns} turns"):
                    results = await _run_phase(chain, phase, concurrency)
                calls = {m: sim.calls(m) for m in MODEL_IDS.values()}
                rows.append((phase, results, calls))
        console.print(_summary(rows))


def run_demo(*, concurrency: int = 20, console: Console | None = None) -> None:
    """Run the demo and print its summary."""
    asyncio.run(_main(concurrency, console or Console()))
