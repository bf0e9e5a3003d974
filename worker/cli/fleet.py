"""The fleet commands: run a worker node, enqueue turns, read results, tail streams.

relevo worker --config FILE [--processes N] [--threads N] [--metrics-port P]
relevo enqueue --config FILE [--input FILE|-] [--wait] [--timeout S]
relevo result TURN_ID [--config FILE]
relevo tail TURN_ID [--config FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from worker.cli.common import (
    EXIT_BY_STATUS,
    EXIT_FAILED,
    Commands,
    OperatorError,
    add_redis_options,
    operator_command,
    operator_redis,
    positive_int,
    read_input,
    redis_settings,
)
from worker.fleet.exporter import serve_metrics
from worker.fleet.startup import PARENT_ENV
from worker.fleet.turnstore import TurnStore
from worker.settings import load_settings
from worker.turn.intake import checked_turn
from worker.types import TurnResult

__all__ = ["register"]


def register(commands: Commands) -> None:
    """Add `worker`, `enqueue`, `result` and `tail` to the `relevo` parser."""
    node = commands.add_parser("worker", help="run this node's worker processes")
    node.add_argument("--config", required=True, help="chain configuration (TOML)")
    node.add_argument("--processes", type=positive_int, help="worker processes (default: config)")
    node.add_argument("--threads", type=positive_int, help="threads per process (default: config)")
    node.add_argument("--loglevel", default="WARNING", help="Celery's log level")
    node.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port, 0 for none (default: config, 9464)",
    )
    node.set_defaults(func=_worker)

    enqueue = commands.add_parser("enqueue", help="send a turn to the fleet")
    enqueue.add_argument("--config", required=True, help="chain configuration (TOML)")
    enqueue.add_argument("--input", default="-", help="turn request JSON file, or - for stdin")
    enqueue.add_argument("--wait", action="store_true", help="wait and print the result")
    enqueue.add_argument("--timeout", type=float, default=300.0, help="seconds to wait")
    enqueue.set_defaults(func=_enqueue)

    result = commands.add_parser("result", help="print a finished turn's result")
    result.add_argument("turn_id")
    add_redis_options(result, json=False)
    result.set_defaults(func=operator_command(_result))

    tail = commands.add_parser("tail", help="print a streaming turn's content as it arrives")
    tail.add_argument("turn_id")
    add_redis_options(tail, json=False)
    tail.set_defaults(func=operator_command(_tail))


def celery_command(queue: str, threads: int, name: str, loglevel: str) -> list[str]:
    """The command line of one worker process: the threads pool, one queue."""
    return [
        *(sys.executable, "-m", "celery", "-A", "worker.fleet.app", "worker"),
        *("--pool", "threads", "--concurrency", str(threads), "--queues", queue),
        *("--hostname", f"{name}@%h", "--loglevel", loglevel),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]


def _worker(args: argparse.Namespace) -> int:
    config = Path(args.config).resolve()
    settings = load_settings(config)
    processes = args.processes or settings.worker.processes
    threads = args.threads or settings.worker.threads
    port = settings.observability.metrics_port if args.metrics_port is None else args.metrics_port
    with serve_metrics(settings, port) as metrics_env:
        env = {
            **os.environ,
            "RELEVO_CONFIG": str(config),
            PARENT_ENV: str(os.getpid()),  # the children end when this process does
            **metrics_env,
        }
        return _run_children(settings.worker.queue, processes, threads, args.loglevel, env)


def _run_children(
    queue: str, processes: int, threads: int, loglevel: str, env: dict[str, str]
) -> int:
    children = [
        subprocess.Popen(  # noqa: S603 - our own interpreter and arguments, no shell
            celery_command(queue, threads, f"relevo-{i}", loglevel),
            env=env,
        )
        for i in range(processes)
    ]
    print(
        f"relevo worker: {processes} processes x {threads} threads on queue {queue!r}",
        file=sys.stderr,
    )

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    # One process down means a sick node: stop the rest and let the supervisor restart it.
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    forward(signal.SIGTERM, None)
    codes = [child.wait() for child in children]
    return max((abs(code) for code in codes), default=0)


def _enqueue(args: argparse.Namespace) -> int:
    from worker.fleet.app import make_app
    from worker.fleet.enqueue import enqueue_turn

    settings = load_settings(args.config, require_secrets=False)
    request = checked_turn(read_input(args.input), settings.limits)
    handle = enqueue_turn(request, app=make_app(settings), limits=settings.limits)
    if not args.wait:
        print(handle.turn_id)
        return 0
    result = handle.get(timeout_s=args.timeout)
    print(result.to_json())
    return EXIT_BY_STATUS[result.status]


async def _result(args: Any) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where) as redis:
        found: TurnResult | None = await TurnStore(redis, namespace=where.namespace).result(
            args.turn_id
        )
    if found is None:
        raise OperatorError(f"no result for turn {args.turn_id!r} (unknown, or not finished)")
    print(found.to_json())
    return EXIT_BY_STATUS.get(found.status, EXIT_FAILED)


async def _tail(args: Any) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where) as redis:
        async for text in TurnStore(redis, namespace=where.namespace).tail(args.turn_id):
            sys.stdout.write(text)
            sys.stdout.flush()
    sys.stdout.write("\n")
    return 0
