"""Where LiteLLM's Router decides a failure differently from relevo's policy table, checked.

Each case puts one fault on the simulated primary (`openai/alpha`), then runs the same
turns through relevo's chain (its Redis guard on a private redis-server) and through
LiteLLM's Router (the two backups as fallbacks, one retry), the simulator's counts
reset in between. For each it prints who answered, what the caller got, and how many
calls each simulated model received:

- `quota`: 429 `insufficient_quota` (the account is out of money);
- `auth`: 401 `invalid_api_key` on every call (a broken key), over `--turns` turns;
- `invalid`: 400 `invalid_request_error` (the request itself is bad);
- `midstream`: a streamed turn whose primary sends 3 content tokens, then an error event.

    .venv/bin/python bench/policy_diff.py     # ~15 s

Output: `FIGURE <name> <value> <unit>` and `DECISION <case> <contender> ...` lines.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit

from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault
from worker.simulator.catalogue import canned
from worker.turn.chain import Chain


def catalogue_fault(name: str) -> Fault:
    error = canned("openai", name)
    body = error.body.decode() if isinstance(error.body, bytes) else error.body
    return Fault(status=error.status, body=body, headers=error.headers)


CASES: dict[str, tuple[Fault, bool]] = {
    "quota": (catalogue_fault("insufficient_quota"), False),
    "auth": (catalogue_fault("invalid_api_key"), False),
    "invalid": (catalogue_fault("invalid_request_error"), False),
    "midstream": (Fault(error_after_tokens=3), True),
}


@dataclass
class Seen:
    """What the caller got from each turn, and the calls each model received."""

    outcomes: list[str]
    calls: dict[str, int]
    streamed: list[str]


async def relevo_case(rig: kit.Rig, stream: bool, turns: int) -> list[tuple[str, str]]:
    settings = kit.relevo_settings(rig.sim_url, rig.redis_url, namespace=f"pd{time.time_ns()}")
    guard = open_guard(settings)
    out: list[tuple[str, str]] = []
    async with make_client() as client:
        chain = Chain.from_settings(settings, client, guard=guard)
        for i in range(turns):
            text: list[str] = []
            result = await chain.run(kit.turn_request(i, stream=stream), on_text=text.append)
            what = f"{result.status}:{result.reason or ''}:{result.effective_model or '-'}"
            out.append((what, "".join(text)))
    await guard.aclose()
    return out


async def litellm_case(rig: kit.Rig, stream: bool, turns: int) -> list[tuple[str, str]]:
    router = kit.litellm_router(rig.sim_url)
    out: list[tuple[str, str]] = []
    for _ in range(turns):
        text: list[str] = []
        try:
            response = await router.acompletion(
                model="primary",
                messages=kit.litellm_messages(),
                max_tokens=kit.MAX_TOKENS,
                stream=stream,
            )
            if stream:
                model = "?"
                async for chunk in response:
                    model = chunk.model or model
                    if chunk.choices and chunk.choices[0].delta.content:
                        text.append(chunk.choices[0].delta.content)
                out.append((f"ok:stream_ended:{model}", "".join(text)))
            else:
                out.append((f"ok::{response.model}", response.choices[0].message.content or ""))
        except Exception as exc:  # what the caller sees is the point
            detail = str(exc).splitlines()[0][:80] if str(exc) else ""
            out.append((f"raised:{type(exc).__name__}:{detail}", "".join(text)))
    return out


async def run_case(rig: kit.Rig, case: str, contender: str, turns: int) -> Seen:
    fault, stream = CASES[case]
    rig.sim.reset()
    rig.sim.set_faults(kit.PRIMARY, fault)
    run = relevo_case if contender == "relevo" else litellm_case
    results = await run(rig, stream, turns)
    counts = rig.sim.counts()
    calls = {m: counts.get(m, {}).get("calls", 0) for m in (kit.PRIMARY, kit.BACKUP, kit.LAST)}
    return Seen([r[0] for r in results], calls, [r[1] for r in results])


async def main_async(args: argparse.Namespace, rig: kit.Rig) -> None:
    for case in CASES:
        turns = args.turns if case == "auth" else 1
        for contender in ("relevo", "litellm"):
            seen = await run_case(rig, case, contender, turns)
            backup_answers = sum(
                1 for o in seen.outcomes if o.startswith("ok") and kit.PRIMARY not in o
            )
            print(
                f"DECISION {case} {contender} turns={turns} outcomes={seen.outcomes} "
                f"calls={seen.calls} streamed={seen.streamed}",
                flush=True,
            )
            prefix = f"policy_{case}_{contender}"
            kit.figure(f"{prefix}_primary_calls", seen.calls[kit.PRIMARY], "calls")
            kit.figure(f"{prefix}_backup_calls", seen.calls[kit.BACKUP], "calls")
            kit.figure(f"{prefix}_turns_answered_by_a_backup", backup_answers, "turns")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=5, help="turns for the broken-key case")
    parser.add_argument("--quick", action="store_true", help="the same (it is already quick)")
    args = parser.parse_args(argv)
    kit.quiet_relevo_logs()
    with kit.rig(None) as rig:
        asyncio.run(main_async(args, rig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
