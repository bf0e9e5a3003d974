"""`relevo enqueue`: send a turn to the fleet, and with `--wait` print its result.

relevo enqueue --config FILE [--input FILE|-] [--wait] [--timeout S]

Redis is asked first, with the operator timeout: Celery's producer would otherwise
retry a dead or refusing broker for about 20 s and end in a traceback. The producer is
also told to give up quickly, should Redis go away between that question and the send.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from worker.cli.common import (
    EXIT_BY_STATUS,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OPERATOR_TIMEOUT_S,
    OperatorError,
    operator_redis,
    read_input,
    redis_trouble,
)
from worker.cli.parsing import Commands, add_command, positive_seconds
from worker.errors import STORE_DOWN, STORE_REFUSED
from worker.fleet.operator_config import load_config
from worker.settings import RedisSettings, Settings
from worker.turn.intake import checked_turn

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["register"]

_EXITS = (
    *(EXIT_OK, EXIT_USAGE, EXIT_DEGRADED, EXIT_FAILED, EXIT_REJECTED),
    *(EXIT_UNAVAILABLE, EXIT_TIMEOUT),
)
# Celery's publish and result-store reconnects: a couple of quick tries, not a 20 s loop.
_QUICK_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


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
        notes={EXIT_OK: "queued (without --wait), or the turn answered ok"},
    )
    enqueue.add_argument(
        "--config", required=True, metavar="FILE", help="chain configuration (TOML)"
    )
    enqueue.add_argument("--input", default="-", help="turn request JSON file, or - for stdin")
    enqueue.add_argument("--wait", action="store_true", help="wait and print the result")
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

    from worker.fleet.enqueue import enqueue_turn

    settings = load_config(args.config, require_secrets=False)
    request = checked_turn(read_input(args.input), settings.limits)
    asyncio.run(_answers(settings.redis))
    app = _producer(settings)
    with _redis_failures(settings.redis):
        handle = enqueue_turn(request, app=app, limits=settings.limits)
    if not args.wait:
        print(handle.turn_id)
        return EXIT_OK
    later = f"; `relevo result {handle.turn_id}` prints it once it finishes"
    try:
        with _redis_failures(settings.redis, later):
            result = handle.get(timeout_s=args.timeout)
    except WaitTimedOut:
        raise OperatorError(
            f"no result for turn {handle.turn_id} within {args.timeout:g}s (is a worker "
            f"consuming queue {settings.worker.queue!r}?); the turn stays queued{later}",
            EXIT_TIMEOUT,
        ) from None
    print(result.to_json())
    return EXIT_BY_STATUS.get(result.status, EXIT_FAILED)


async def _answers(where: RedisSettings) -> None:
    """Raise `OperatorError` (exit 6) unless Redis answers this client now."""
    async with operator_redis(where) as client:
        await client.ping()


def _producer(settings: Settings) -> Celery:
    from worker.fleet.app import make_app

    app = make_app(settings)
    conf: Any = app.conf
    conf.update(
        broker_connection_timeout=OPERATOR_TIMEOUT_S,
        broker_connection_max_retries=_QUICK_RETRY["max_retries"],
        broker_transport_options={
            **conf.broker_transport_options,
            "socket_connect_timeout": OPERATOR_TIMEOUT_S,
        },
        redis_socket_connect_timeout=OPERATOR_TIMEOUT_S,
        result_backend_transport_options={
            **conf.result_backend_transport_options,
            "retry_policy": _QUICK_RETRY,
        },
        task_publish_retry_policy=_QUICK_RETRY,
    )
    return app


@contextmanager
def _redis_failures(where: RedisSettings, hint: str = "") -> Iterator[None]:
    """Redis failing under Celery becomes `OperatorError` (exit 6), ending with `hint`."""
    try:
        yield
    except Exception as exc:
        cause = _redis_cause(exc)
        if cause is None:
            raise
        raise redis_trouble(where, cause, hint) from None


def _redis_cause(exc: BaseException) -> BaseException | None:
    """The Redis or socket error behind what Celery raised, if that is what it was."""
    from kombu.exceptions import OperationalError

    if isinstance(exc, STORE_REFUSED + STORE_DOWN):
        return exc
    # kombu wraps a failed publish; Celery's result store ends its reconnects in a
    # RuntimeError raised from the last connection error.
    if isinstance(exc, OperationalError | RuntimeError) and exc.__cause__ is not None:
        return _redis_cause(exc.__cause__) or (exc if isinstance(exc, OperationalError) else None)
    return exc if isinstance(exc, OperationalError) else None
