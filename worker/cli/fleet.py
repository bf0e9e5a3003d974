"""`relevo worker`: run this node's Celery worker processes, and end them with it;
`relevo exporter`: serve the fleet's state from Redis to Prometheus, once per fleet.

relevo worker --config FILE [--processes N] [--threads N] [--metrics-port P] [--node-name NAME]
              [--log-level L]
relevo exporter --config FILE [--port P]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from worker.cli.common import EXIT_OK, EXIT_PORT, EXIT_USAGE, OperatorError
from worker.cli.parsing import Commands, add_command, add_config_option, positive_int
from worker.fleet.exporter import serve_fleet_metrics, serve_metrics
from worker.fleet.operator_config import load_config
from worker.fleet.startup import PARENT_ENV
from worker.settings import environment
from worker.settings.environment import CONFIG_VARIABLE, NODE_VARIABLE, variable

__all__ = ["EXPORTER_PORT", "celery_command", "child_env", "register"]

EXPORTER_PORT = 9465
# Celery's host part of a node name: what a host name may hold.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def register(commands: Commands) -> None:
    """Add `worker` and `exporter` to the `relevo` parser."""
    node = add_command(
        commands,
        "worker",
        "run this node's worker processes",
        exits=(EXIT_OK, EXIT_USAGE),
        details="One Celery worker process per --processes, each on the threads pool; one "
        "process ending stops the others. Any other exit status is a worker process's own.",
    )
    add_config_option(node, "chain configuration (TOML)")
    node.add_argument("--processes", type=positive_int, help="worker processes (default: config)")
    node.add_argument("--threads", type=positive_int, help="threads per process (default: config)")
    node.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port, 0 for none (default: config, 9464)",
    )
    node.add_argument(
        "--node-name",
        type=node_name,
        metavar="NAME",
        help="this node's processes are relevo-0@NAME, relevo-1@NAME…, and NAME in their "
        "heartbeats (default: the host name); on RabbitMQ, two nodes on one machine need "
        "two names",
    )
    node.set_defaults(func=_worker)
    exporter = add_command(
        commands,
        "exporter",
        "serve the fleet's state from Redis to Prometheus (run one per fleet)",
        exits=(EXIT_OK, EXIT_USAGE, EXIT_PORT),
        details="Breakers, budgets, the kill switch, held turns and the queue's depth, read "
        "from Redis at each scrape. Worker nodes serve only their own metrics: one reader "
        "for the fleet, however many nodes.",
        notes={EXIT_PORT: "--port could not be bound (in use, or not allowed)"},
    )
    add_config_option(exporter, "chain configuration (TOML)")
    exporter.add_argument(
        "--port", type=int, default=EXPORTER_PORT, help=f"(default: {EXPORTER_PORT})"
    )
    exporter.set_defaults(func=_exporter)


def node_name(text: str) -> str:
    """An argparse type: a node name as a host name may be written."""
    if not _NODE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return text


def celery_command(
    queue: str, threads: int, name: str, loglevel: str, *, host: str = "%h"
) -> list[str]:
    """The command line of one worker process: the threads pool, one queue; its Celery
    node name is `name@host` (`%h`: the host name)."""
    return [
        *(sys.executable, "-m", "celery", "-A", "worker.fleet.app", "worker"),
        *("--pool", "threads", "--concurrency", str(threads), "--queues", queue),
        *("--hostname", f"{name}@{host}", "--loglevel", loglevel),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]


def _worker(args: argparse.Namespace) -> int:
    config = Path(args.config).resolve()
    settings = load_config(config)
    processes = args.processes or settings.worker.processes
    threads = args.threads or settings.worker.threads
    port = settings.observability.metrics_port if args.metrics_port is None else args.metrics_port
    with serve_metrics(settings, port, processes) as metrics_env:
        named = {} if args.node_name is None else {NODE_VARIABLE: args.node_name}
        env = child_env(config, args.log_level, {**metrics_env, **named})
        level = args.log_level or settings.observability.log_level
        queue, host = settings.worker.queue, args.node_name or "%h"
        commands = [
            celery_command(queue, threads, f"relevo-{i}", level.upper(), host=host)
            for i in range(processes)
        ]
        return _run_children(commands, queue, threads, env)


def child_env(config: Path, log_level: str | None, extra: dict[str, str]) -> dict[str, str]:
    """The environment of this node's worker processes: the configuration by
    `RELEVO_CONFIG`, and `--log-level`, when given, over the configuration's."""
    env = {
        **environment.variables(),
        CONFIG_VARIABLE: str(config),
        PARENT_ENV: str(os.getpid()),  # the children end when this process does
        **extra,
    }
    if log_level is not None:
        env[variable("observability", "log_level")] = log_level
    return env


def _exporter(args: argparse.Namespace) -> int:
    # It reads Redis and calls no provider: no API key needed.
    settings = load_config(Path(args.config).resolve(), require_secrets=False)
    # A scrape's thread waits for the interpreter while the tenants' reading parses a page:
    # handing it over every 0.5 ms rather than 5 keeps a scrape short during a reading
    # (bench/exporter_scale.py). This process runs nothing else.
    sys.setswitchinterval(0.0005)
    stop = threading.Event()

    def finish(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    with serve_fleet_metrics(settings, args.port) as served:
        if not served:
            raise OperatorError(
                f"exporter: port {args.port} could not be bound (see the log line above); "
                "choose another with --port",
                EXIT_PORT,
            )
        print(f"relevo exporter: the fleet's state on port {args.port}", file=sys.stderr)
        while not stop.wait(1.0):
            pass
    return EXIT_OK


def _run_children(commands: list[list[str]], queue: str, threads: int, env: dict[str, str]) -> int:
    children = [
        subprocess.Popen(command, env=env)  # noqa: S603 - our own interpreter and arguments
        for command in commands
    ]
    print(
        f"relevo worker: {len(commands)} processes x {threads} threads on queue {queue!r}",
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
