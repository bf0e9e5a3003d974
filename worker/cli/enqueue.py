"""`relevo enqueue`: send a turn to the fleet, and with `--wait` print its result.

relevo enqueue --config FILE [--input FILE|-] [--wait] [--timeout S]

Redis is asked first, with the operator timeout, so that a dead or refusing Redis gets
its one line at once; should it go away between that question and the send, sending
gives up within seconds too, and says whether the turn will run: exit 6 when nothing of
it was recorded (`TurnNotSent`), exit 10 with its id printed when it was (`TurnRecorded`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from worker.cli.common import (
    EXIT_BY_STATUS,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_RECORDED,
    EXIT_REJECTED,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    OperatorError,
    add_chain_option,
    chosen_chain,
    operator_redis,
    read_input,
    redis_trouble,
)
from worker.cli.parsing import Commands, add_command, add_config_option, positive_seconds
from worker.fleet.errors import FleetUnavailable, TurnRecorded
from worker.fleet.operator_config import load_config
from worker.observability.visible import json_visible
from worker.settings import RedisSettings
from worker.turn.intake import checked_turn

__all__ = ["register"]

_EXITS = (
    *(EXIT_OK, EXIT_USAGE, EXIT_DEGRADED, EXIT_FAILED, EXIT_REJECTED),
    *(EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_UNREADABLE, EXIT_RECORDED),
)


def register(commands: Commands) -> None:
    """Add `enqueue` to the `relevo` parser."""
    enqueue = add_command(
        commands,
        "enqueue",
        "send a turn to the fleet",
        exits=_EXITS,
        details="Prints the turn id; with --wait, the turn's result as JSON, and exits "
        "with its status. A --wait that times out prints the turn id and how to fetch the "
        "result later: the turn stays queued.",
        notes={
            EXIT_OK: "queued (without --wait), or the turn answered ok",
            EXIT_UNAVAILABLE: "Redis did not answer or refused this client: before the turn "
            "was recorded (it will not run), or while --wait read its result (it runs: "
            "relevo result ID)",
        },
    )
    add_config_option(enqueue, "chain configuration (TOML)")
    enqueue.add_argument("--input", default="-", help="turn request JSON file, or - for stdin")
    enqueue.add_argument("--wait", action="store_true", help="wait and print the result")
    add_chain_option(enqueue)
    enqueue.add_argument(
        "--timeout",
        type=positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="with --wait: how long to wait (default 300)",
    )
    enqueue.set_defaults(func=_enqueue)


def _enqueue(args: argparse.Namespace) -> int:
    from celery.exceptions import TimeoutError as WaitTimedOut

    from worker.fleet.app import make_app
    from worker.fleet.enqueue import enqueue_turn

    settings = load_config(args.config, require_secrets=False)
    request = checked_turn(read_input(args.input), settings.limits)
    request = chosen_chain(request, args.chain, settings)
    asyncio.run(_answers(settings.redis))
    app = make_app(settings)
    with _unavailable(settings.redis):
        handle = enqueue_turn(request, app=app, limits=settings.limits)
    if not args.wait:
        print(handle.turn_id)
        return EXIT_OK
    later = f"; `relevo result {handle.turn_id}` prints it once it finishes"
    try:
        with _unavailable(settings.redis, later):
            result = handle.get(timeout_s=args.timeout)
    except WaitTimedOut:
        raise OperatorError(
            f"no result for turn {handle.turn_id} within {args.timeout:g}s (is a worker "
            f"consuming queue {settings.worker.queue!r}?); the turn stays queued{later}",
            EXIT_TIMEOUT,
        ) from None
    print(json_visible(result.to_json()))
    return EXIT_BY_STATUS.get(result.status, EXIT_FAILED)


async def _answers(where: RedisSettings) -> None:
    """Raise `OperatorError` (exit 6) unless Redis answers this client now."""
    async with operator_redis(where) as client:
        await client.ping()


@contextmanager
def _unavailable(where: RedisSettings, hint: str = "") -> Iterator[None]:
    """The fleet's Redis failing becomes `OperatorError` (exit 6), ending with `hint`."""
    try:
        yield
    except TurnRecorded as exc:
        # Its id on stdout, as a queued turn's: the turn runs, and a script keeps the id.
        print(exc.turn_id)
        raise OperatorError(
            f"{exc}; turn {exc.turn_id} will run: keep its id (`relevo result {exc.turn_id}`); "
            "sending it again with the same id is safe, under a new id it runs twice",
            EXIT_RECORDED,
        ) from None
    except FleetUnavailable as exc:
        if exc.rabbitmq:
            fix = "the user and password in" if exc.refused else "--config or"
            message = f"{exc}; check {fix} [broker] url (RELEVO_BROKER__URL){hint}"
            raise OperatorError(message, EXIT_UNAVAILABLE) from None
        raise redis_trouble(where, exc, hint) from None
