"""`relevo replay-held`: run the turns held while the kill switch was on.

Turns are taken in small batches (each taken exactly once, fleet-wide) and each is
handed to a `RunHeld`; today that runs the chain in this process and returns the
turn's result. Re-enqueueing on Celery is another `RunHeld` returning a task id.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import breakers
from worker.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    Commands,
    OperatorError,
    operator_command,
    operator_redis,
    operator_settings,
    positive_int,
)
from worker.errors import InputError
from worker.types import parse_turn_request

if TYPE_CHECKING:
    from worker.turn.chain import Chain

__all__ = ["BATCH", "ReplaySummary", "RunHeld", "chain_runner", "register", "replay_held"]

BATCH = 10
RunHeld = Callable[[breakers.HeldTurn], Awaitable[dict[str, Any]]]
"""Run (or hand on) one held turn; return a JSON-able line about it.

`InputError` means the payload is not a turn request: the turn is reported and dropped.
"""


@dataclass
class ReplaySummary:
    """What a replay did; `stopped_by` is the kill switch if it came back on meanwhile."""

    replayed: int = 0
    invalid: int = 0
    stopped_by: breakers.KillSwitchState | None = None


def chain_runner(chain: Chain) -> RunHeld:
    """Run each held turn through `chain` in this process; the line is its `TurnResult`."""

    async def run(turn: breakers.HeldTurn) -> dict[str, Any]:
        request = parse_turn_request(turn.payload)
        result = await chain.run(request)
        line: dict[str, Any] = json.loads(result.to_json())
        return line

    return run


async def replay_held(
    held: breakers.HeldTurns,
    switch: breakers.KillSwitch,
    run_one: RunHeld,
    emit: Callable[[dict[str, Any]], None],
    *,
    limit: int | None = None,
    batch: int = BATCH,
) -> ReplaySummary:
    """Take and run held turns until none is left, `limit` is reached or the switch is on."""
    summary = ReplaySummary()
    done = 0
    while limit is None or done < limit:
        state = await switch.status()
        if state is not None:
            summary.stopped_by = state
            break
        taken = await held.take(batch if limit is None else min(batch, limit - done))
        if not taken:
            break
        for index, turn in enumerate(taken):
            try:
                line = await run_one(turn)
            except InputError as exc:
                summary.invalid += 1
                line = {"turn_id": turn.turn_id, "status": "invalid", "error": str(exc)}
                line["payload"] = turn.payload  # the stream no longer has it
            except BaseException:
                # Give back what this batch has not run, so an error loses no turn.
                for rest in taken[index:]:
                    await held.hold(rest.turn_id, rest.payload)
                raise
            else:
                summary.replayed += 1
            emit(line)
        done += len(taken)
    return summary


async def _replay(args: argparse.Namespace) -> int:
    from worker.adapters import make_client
    from worker.guard.redis_guard import open_guard
    from worker.turn.chain import Chain

    settings = operator_settings(args.config)
    where = settings.redis
    async with operator_redis(where) as client:
        switch = breakers.KillSwitch(client, namespace=where.namespace)
        held = breakers.HeldTurns(client, namespace=where.namespace)
        state = await switch.status()
        if state is not None:
            raise OperatorError(
                f"the kill switch is on ({state.reason}, by {state.who}); "
                "turn it off before replaying held turns",
                EXIT_REFUSED,
            )
        async with make_client() as http:
            chain = Chain.from_settings(settings, http, guard=open_guard(settings, client))
            summary = await replay_held(
                held, switch, chain_runner(chain), _print_line, limit=args.limit
            )
        left = await held.count()
    if summary.stopped_by is not None:
        raise OperatorError(
            f"the kill switch came back on ({summary.stopped_by.reason}); replayed "
            f"{summary.replayed}, {left} still held",
            EXIT_REFUSED,
        )
    if summary.invalid:
        raise OperatorError(
            f"{summary.invalid} held turn(s) were not valid turn requests and were dropped "
            "(their payloads are in the output)",
            EXIT_FAILED,
        )
    return EXIT_OK


def _print_line(line: dict[str, Any]) -> None:
    print(json.dumps(line, ensure_ascii=False), flush=True)


def register(commands: Commands) -> None:
    """Add `replay-held` to the `relevo` command."""
    replay = commands.add_parser(
        "replay-held", help="run the turns held while the kill switch was on"
    )
    replay.add_argument("--config", required=True, help="chain configuration (TOML)")
    replay.add_argument("--limit", type=positive_int, metavar="N", help="replay at most N turns")
    replay.set_defaults(func=operator_command(_replay))
