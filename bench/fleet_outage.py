"""Fleet outage: how many calls the primary still gets once it fails, fleet-wide.

1, 2, 4 and 8 worker processes share a fixed total of turns in flight
(`--concurrency`, split evenly). Each round, after `--warm-s` of healthy turns the
simulated primary starts answering 503 to everything; the processes keep sending
turns for `--window-s`, then finish the turns in flight. The simulator counts the
503s it sent: every call the primary received after that moment, from the whole fleet.

- relevo: its chain with its breakers and budgets on a private redis-server, the
  breaker tripping on `--threshold` failures in a row and breaking for `--break-s`
  (one probe per break for the fleet).
- LiteLLM: its Router, the two backups as fallbacks and one retry, with its cooldowns
  shared through the same Redis as its docs advise (`redis_host`/`redis_port`,
  `allowed_fails=--threshold`, `cooldown_time=--break-s`).

The worker processes are started once and run every round; before each round the
private Redis is flushed and the simulator's counts reset, so each contender starts
cold. Contenders alternate (relevo, LiteLLM, LiteLLM, relevo, ...) per process count.
Only 127.0.0.1 is spoken to.

    .venv/bin/python bench/fleet_outage.py           # ~3 min: 1,2,4,8 processes, 2 rounds each
    .venv/bin/python bench/fleet_outage.py --quick   # ~40 s: 1,4 processes, 1 round

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit
import redis

from worker.simulator import Fault

CONTENDERS = ("relevo", "litellm")
LATENCY_S = 0.02


@dataclass(frozen=True)
class Round:
    """What one worker process does in one round."""

    contender: str
    concurrency: int
    start_at: float  # time.time()
    stop_at: float
    sim_url: str
    redis_url: str
    namespace: str
    threshold: int
    break_s: float


# --- a worker process ---------------------------------------------------------------------------


def worker(conn: Connection) -> None:
    """Run rounds as the parent sends them; answer each with what its turns did."""
    kit.quiet_relevo_logs()
    import litellm  # noqa: F401  (import once, before the first round, not inside one)

    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(asyncio.run(run_round(job)))


async def run_round(job: Round) -> dict[str, int]:
    outcomes: Counter[str] = Counter()
    async with _contender(job) as turn:
        await asyncio.sleep(max(0.0, job.start_at - time.time()))

        async def lane(lane_id: int) -> None:
            i = lane_id
            while time.time() < job.stop_at:
                try:
                    outcomes[await turn(i)] += 1
                except Exception as exc:  # a failed turn is an outcome too
                    outcomes[f"error:{type(exc).__name__}"] += 1
                i += job.concurrency

        async with asyncio.TaskGroup() as group:
            for lane_id in range(job.concurrency):
                group.create_task(lane(lane_id))
    return dict(outcomes)


@contextlib.asynccontextmanager
async def _contender(job: Round) -> Any:
    if job.contender == "relevo":
        from worker.adapters import make_client
        from worker.guard.redis_guard import open_guard
        from worker.turn.chain import Chain

        breakers = {
            "consecutive_failures_threshold": job.threshold,
            "break_s": job.break_s,
            "probe_ttl_s": job.break_s,
        }
        settings = kit.relevo_settings(
            job.sim_url, job.redis_url, namespace=job.namespace, breakers=breakers
        )
        guard = open_guard(settings)
        async with make_client() as client:
            chain = Chain.from_settings(settings, client, guard=guard)

            async def relevo_turn(i: int) -> str:
                result = await chain.run(kit.turn_request(i))
                return f"{result.status}:{result.effective_model}"

            yield relevo_turn
        await guard.aclose()
    else:
        router = kit.litellm_router(
            job.sim_url,
            redis_url=job.redis_url,
            allowed_fails=job.threshold,
            cooldown_time=job.break_s,
        )
        messages = kit.litellm_messages()

        async def litellm_turn(i: int) -> str:
            response = await router.acompletion(
                model="primary", messages=messages, max_tokens=kit.MAX_TOKENS
            )
            return f"ok:{response.model}"

        yield litellm_turn


# --- the parent ---------------------------------------------------------------------------------


@dataclass
class Result:
    contender: str
    processes: int
    primary_after: int  # 503s the primary sent: calls it received after the outage began
    primary_before: int
    turns: int
    outcomes: dict[str, int]


def one_round(
    rig: kit.Rig, pipes: Sequence[Connection], contender: str, args: argparse.Namespace
) -> Result:
    per_process = args.concurrency // len(pipes)
    with redis.Redis.from_url(rig.redis_url) as store:
        store.flushall()  # a private server: each round starts cold
    rig.sim.reset()
    for model in (kit.PRIMARY, kit.BACKUP, kit.LAST):
        rig.sim.set_faults(model, Fault(latency_s=LATENCY_S))
    start_at = time.time() + args.setup_s
    outage_at = start_at + args.warm_s
    job = Round(
        contender=contender,
        concurrency=per_process,
        start_at=start_at,
        stop_at=outage_at + args.window_s,
        sim_url=rig.sim_url,
        redis_url=rig.redis_url,
        namespace=f"fleet{time.time_ns()}",
        threshold=args.threshold,
        break_s=args.break_s,
    )
    for pipe in pipes:
        pipe.send(job)
    time.sleep(max(0.0, outage_at - time.time()))
    before = rig.sim.calls(kit.PRIMARY)
    rig.sim.set_faults(kit.PRIMARY, Fault(status=503))
    outcomes: Counter[str] = Counter()
    for pipe in pipes:
        if not pipe.poll(args.window_s + 60):
            raise SystemExit("a worker process did not finish its round")
        outcomes.update(pipe.recv())
    after = rig.sim.calls(kit.PRIMARY, "error")
    return Result(contender, len(pipes), after, before, sum(outcomes.values()), dict(outcomes))


def run(args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    context = multiprocessing.get_context("spawn")
    most = max(args.processes)
    pipes: list[Connection] = []
    procs = []
    with kit.rig(None) as rig, contextlib.ExitStack() as stack:
        for _ in range(most):
            ours, theirs = context.Pipe()
            proc = context.Process(target=worker, args=(theirs,), daemon=True)
            proc.start()
            procs.append(proc)
            pipes.append(ours)
        stack.callback(_stop, pipes, procs)
        for pipe in pipes:
            if not pipe.poll(120) or pipe.recv() != "ready":
                raise SystemExit("a worker process did not start")
        deadline = time.monotonic() + args.budget_s
        for repeat in range(args.repeats):
            for n in args.processes:
                order = (
                    CONTENDERS if (repeat + args.processes.index(n)) % 2 == 0 else CONTENDERS[::-1]
                )
                for contender in order:
                    result = one_round(rig, pipes[:n], contender, args)
                    results.append(result)
                    kit.say(
                        f"# {contender:<7} {n} proc #{repeat}: primary got "
                        f"{result.primary_after:5d} calls after the outage "
                        f"({result.primary_before} before), "
                        f"{result.turns} turns {result.outcomes}"
                    )
            if time.monotonic() > deadline:
                kit.say(f"# time budget spent after {repeat + 1} rounds")
                break
    return results


def _stop(pipes: Sequence[Connection], procs: Sequence[Any]) -> None:
    for pipe in pipes:
        with contextlib.suppress(OSError):
            pipe.send(None)
    for proc in procs:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def report(results: list[Result], args: argparse.Namespace) -> None:
    probes = math.ceil(args.window_s / args.break_s)
    target = args.threshold + args.concurrency + probes
    kit.figure("fleet_outage_target_max_primary_calls_relevo", target, "calls")
    for n in args.processes:
        for contender in CONTENDERS:
            rows = [r for r in results if r.contender == contender and r.processes == n]
            if not rows:
                continue
            after = kit.median([r.primary_after for r in rows])
            kit.figure(f"fleet_outage_primary_calls_after_{contender}_p{n}", after, "calls")
            turns = kit.median([r.turns for r in rows])
            kit.figure(f"fleet_outage_turns_{contender}_p{n}", turns, "turns")
            failed = sum(v for r in rows for k, v in r.outcomes.items() if not k.startswith("ok"))
            kit.figure(f"fleet_outage_turns_not_ok_{contender}_p{n}", failed, "turns")
            if contender == "relevo":
                kit.figure(f"fleet_outage_target_met_p{n}", int(after <= target), "bool")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 and 4 processes, 1 round (~40 s)")
    parser.add_argument(
        "--processes", type=lambda s: [int(p) for p in s.split(",")], help="1,2,4,8"
    )
    parser.add_argument("--repeats", type=int, help="rounds per cell (2; quick 1)")
    parser.add_argument("--concurrency", type=int, default=40, help="turns in flight, fleet-wide")
    parser.add_argument("--warm-s", type=float, default=1.5, help="healthy turns first")
    parser.add_argument("--window-s", type=float, help="turns sent after the outage (7; quick 5)")
    parser.add_argument("--setup-s", type=float, default=1.0, help="time to build contenders")
    parser.add_argument("--threshold", type=int, default=3, help="failures that trip / cool (3)")
    parser.add_argument("--break-s", type=float, default=5.0, help="break / cooldown_time (5)")
    parser.add_argument("--budget-s", type=float, default=200.0, help="no new repeat after this")
    args = parser.parse_args(argv)
    quick = {"processes": [1, 4], "repeats": 1, "window_s": 5.0}
    full = {"processes": [1, 2, 4, 8], "repeats": 2, "window_s": 7.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kit.raise_fd_limit()
    started = time.monotonic()
    results = run(args)
    report(results, args)
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
