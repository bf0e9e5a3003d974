"""`relevo replay-held`: the command around `worker.fleet.replay`, and what it reports.

It refuses to start while the kill switch is on (exit 7), prints one JSON line per held
turn, and ends with one line on stderr, and exit 4 or 7, when something needs a person.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import breakers
from worker.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    OperatorError,
    operator_command,
    operator_redis,
    write_out,
)
from worker.cli.parsing import Commands, add_command, add_config_option, positive_int
from worker.fleet.operator_config import load_config
from worker.fleet.replay import CONCURRENCY, ReplaySummary, replay_fleet
from worker.observability.visible import json_visible, one_line

__all__ = ["register"]


async def _replay(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    where = settings.redis
    summary = ReplaySummary()
    async with (
        operator_redis(where, shared=True) as client,
        operator_redis(where) as results,
    ):
        state = await breakers.KillSwitch(client, namespace=where.namespace).status()
        if state is not None:
            raise OperatorError(
                f"the kill switch is on ({one_line(state.reason)}, by {one_line(state.who)}); "
                "turn it off before replaying held turns",
                EXIT_REFUSED,
            )
        try:
            left = await replay_fleet(
                settings,
                client,
                _print_line,
                results=results,
                limit=args.limit,
                concurrency=args.concurrency,
                summary=summary,
                include_expired=args.include_expired,
            )
        except asyncio.CancelledError:  # Ctrl-C: `main` exits 130 after this line
            print(
                f"relevo: interrupted; replayed {summary.replayed}, {summary.given_back} "
                "unfinished turn(s) held again (run replay-held again to resume)",
                file=sys.stderr,
            )
            raise
    return _verdict(summary, left)


def _verdict(summary: ReplaySummary, left: int) -> int:
    """The exit status, after one line on what needs a person, if anything does."""
    problems: list[str] = []
    code = EXIT_OK
    if summary.stopped_by is not None:
        problems.append(f"the kill switch came back on ({one_line(summary.stopped_by.reason)})")
        code = EXIT_REFUSED
    if summary.not_stored:
        problems.append(
            f"{summary.not_stored} replayed result(s) could not be stored "
            "(readers may still see them rejected; the results are in the output)"
        )
        code = code or EXIT_FAILED
    if summary.left_held:
        problems.append(
            f"{summary.left_held} held turn(s) were held by a newer release and are held "
            "again for its replay-held"
        )
        code = code or EXIT_UNREADABLE
    if summary.invalid:
        problems.append(
            f"{summary.invalid} held turn(s) were not valid turn requests and were dropped "
            "(their payloads are in the output)"
        )
        code = code or EXIT_FAILED
    set_aside = []
    if summary.expired:
        set_aside.append(f"{summary.expired} past their deadline (ended queue_deadline)")
    if summary.caller_gone:
        set_aside.append(
            f"{summary.caller_gone} whose caller is gone (nothing says they were sent)"
        )
    if set_aside:
        # Not a failure: what the operator asked for, said once, with the way to run them.
        print(
            f"relevo: skipped {summary.expired + summary.caller_gone} held turn(s): "
            f"{'; '.join(set_aside)}; --include-expired runs such turns",
            file=sys.stderr,
        )
    if problems:
        raise OperatorError(
            f"{'; '.join(problems)}; replayed {summary.replayed}, {left} still held", code
        )
    return EXIT_OK


def _print_line(line: dict[str, Any]) -> None:
    write_out(json_visible(json.dumps(line, ensure_ascii=False)) + "\n")


def register(commands: Commands) -> None:
    """Add `replay-held` to the `relevo` command."""
    replay = add_command(
        commands,
        "replay-held",
        "run the turns held while the kill switch was on, store their results",
        exits=(
            *(EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_REFUSED),
            *(EXIT_UNREADABLE, EXIT_INTERRUPTED),
        ),
        details="One JSON result per line; each result replaces the turn's rejected one "
        "for every reader. Each turn runs within its tenant's max_in_flight, a tenant's "
        "turns in the order they were held. A turn whose deadline passed while held ends "
        "queue_deadline, and one whose caller is gone is dropped, unless --include-expired. "
        "Interrupted, it holds its unfinished turns again: run it again to resume.",
        notes={
            EXIT_FAILED: "some replayed results could not be stored, or some held turns "
            "were not turn requests (both printed)",
            EXIT_REFUSED: "the kill switch is on (or came back on during the replay)",
            EXIT_UNREADABLE: "some held turns were held by a newer release: held again, "
            "for that release's replay-held",
        },
    )
    add_config_option(replay, "chain configuration (TOML)")
    replay.add_argument("--limit", type=positive_int, metavar="N", help="replay at most N turns")
    replay.add_argument(
        "--include-expired",
        action="store_true",
        help="run turns whose deadline passed while held, or whose caller is gone, too",
    )
    replay.add_argument(
        "--concurrency",
        type=positive_int,
        default=CONCURRENCY,
        metavar="N",
        help=f"run at most N turns at once (default {CONCURRENCY})",
    )
    replay.set_defaults(func=operator_command(_replay))
