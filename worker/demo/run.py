"""`relevo demo`: the real path end to end, with no Redis server and no API keys.

Embedded (the default): a Redis server in this process (fakeredis over TCP,
with Lua), simulated providers on loopback, and a real Celery worker (threads
pool) in this process. A few hundred turns from four tenants go through
`enqueue_turn` -> Redis broker -> worker -> chain -> simulated providers ->
result backend, while the phases of `worker.demo.plan` inject a primary outage,
its recovery and a rate-limit burst; one tenant has a tiny daily budget and
runs out. A live view shows turns, fallback rate, breakers and budgets; tables
at the end show what each phase got and how many calls each model received.

`relevo demo --redis URL` runs the same against a real Redis server and a
separate `relevo worker` started with the same configuration
(examples/demo.toml); the demo serves the simulated providers at the address
that file names, and resets the file's Redis namespace when it starts.

The embedded demo ignores RELEVO_* environment variables. Logs (structlog and
the standard library's) go to a file of the run's own, not the terminal:
relevo-demo-YYYYmmdd-HHMMSS-PID.log in the temporary directory ($TMPDIR, else
/tmp), named at the end of the run; earlier runs' files are left as they are.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live

from worker.demo.drive import Driver, Monitor
from worker.demo.plan import PHASES, TENANTS, THRIFTY_DAILY_MICROS, THRIFTY_TENANT, demo_settings
from worker.demo.remote import remote_fleet
from worker.demo.stack import Fleet, embedded_fleet
from worker.demo.summary import summarize
from worker.demo.tables import summary_view
from worker.demo.view import LiveState, live_view
from worker.errors import ConfigError
from worker.fleet.operations import fleet_of
from worker.observability.logs import configure_logging

__all__ = ["DEFAULT_CONFIG", "demo_settings", "open_log_file", "run_demo"]

DEFAULT_CONFIG = "examples/demo.toml"
CONSOLE_EXTRA = "pip install 'relevo[console]'"


@dataclass(frozen=True, slots=True)
class _Options:
    rate: float
    concurrency: int
    as_json: bool
    console: Console  # the live view and tables; notices go to stderr


def run_demo(
    *,
    redis_url: str | None = None,
    config: str | Path = DEFAULT_CONFIG,
    rate: float = 15.0,
    concurrency: int = 16,
    as_json: bool = False,
    console: Console | None = None,
    console_port: int | None = None,
) -> int:
    """Run the demo; print the summary (tables, or JSON with `as_json`).

    `rate` is turns sent per second; `concurrency` the client threads (and, embedded,
    the worker's threads). With `console_port` (0: any free port) the operator console
    serves the demo's fleet while it runs; its URL and login token go to stderr.
    Returns how many turns got no result.
    """
    if not 0.5 <= rate <= 100:
        raise ConfigError("--rate: between 0.5 and 100 turns per second")
    if not 1 <= concurrency <= 256:
        raise ConfigError("--concurrency: between 1 and 256")
    # The terminal itself, past the `relevo` command's written-out stdout: the live view
    # is relevo's own drawing (colours, cursor moves) of the demo's own simulated turns.
    console = console or Console(file=getattr(sys.stdout, "raw", sys.stdout))
    options = _Options(rate, concurrency, as_json, console)
    log_file = _logs_to_new_file()
    fleets = (
        embedded_fleet(concurrency) if redis_url is None else remote_fleet(redis_url, Path(config))
    )
    try:
        with fleets as fleet, _console(fleet, console_port):
            summary = _drive(fleet, options)
    except BaseException:  # a failed or interrupted run is when its logs are wanted most
        print(f"relevo demo: logs: {log_file}", file=sys.stderr)
        raise
    if as_json:  # stdout is the JSON alone, for a pipe
        print(json.dumps(summary, indent=2))
        print(f"relevo demo: logs: {log_file}", file=sys.stderr)
    else:
        options.console.print()
        options.console.print(*summary_view(summary))
        options.console.print(f"{summary['total']['turns']} turns in {summary['seconds']} s")
        # Unwrapped and unstyled: a long path folded by rich could not be pasted back.
        options.console.print(f"logs: {log_file}", soft_wrap=True, markup=False, highlight=False)
    lost = int(summary["total"]["lost"])
    if lost:
        print(f"relevo demo: {lost} turns got no result: {summary['errors']}", file=sys.stderr)
    return lost


@contextmanager
def _console(fleet: Fleet, port: int | None) -> Iterator[None]:
    if port is None:
        yield
        return
    try:
        from worker.console import running_console
    except ImportError as exc:
        raise ConfigError(f"--console needs the console extra: {CONSOLE_EXTRA} ({exc})") from None
    with running_console(fleet_of(fleet.settings), port=port) as served:
        print(
            f"relevo demo: console at {served.url} (log in with token {served.token}; "
            "it stops with the demo)",
            file=sys.stderr,
            flush=True,
        )
        yield


def open_log_file() -> tuple[Path, TextIO]:
    """A log file no other run has: two demos, at once or one after the other, keep theirs."""
    stem = f"relevo-demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    directory = Path(tempfile.gettempdir())
    n = 0
    while True:
        path = directory / (f"{stem}-{n}.log" if n else f"{stem}.log")
        try:  # "x": never open, let alone truncate, a file that is already there
            return path, path.open("x", encoding="utf-8")
        except FileExistsError:
            n += 1


def _logs_to_new_file() -> Path:
    """Send every log (structlog, Celery's, warnings) to a new file for the rest of the process."""
    path, stream = open_log_file()
    configure_logging(level="info", json=True, stream=stream)
    root = logging.getLogger()
    root.handlers = [logging.StreamHandler(stream)]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    return path


def _drive(fleet: Fleet, options: _Options) -> dict[str, Any]:
    """Run every phase on `fleet`, with the live view unless JSON is wanted; the summary."""
    header = fleet.header
    threshold = fleet.settings.observability.fallback_alert_threshold
    monitor = Monitor(fleet.settings, TENANTS)
    try:
        monitor.set_daily_limit(THRIFTY_TENANT, THRIFTY_DAILY_MICROS)
        driver = Driver(fleet.app, fleet.sim, rate=options.rate, concurrency=options.concurrency)
        planned = driver.planned(PHASES)
        started = time.monotonic()

        def state() -> LiveState:
            index, elapsed, records = driver.snapshot()
            return LiveState(
                header,
                PHASES,
                index,
                elapsed,
                planned,
                records,
                monitor.latest,
                monitor.changes,
                threshold,
            )

        if options.as_json:
            runs = driver.run(PHASES, on_tick=monitor.poll)
        else:
            with Live(live_view(state()), console=options.console, refresh_per_second=4) as live:

                def tick() -> None:
                    monitor.poll()
                    live.update(live_view(state()))

                runs = driver.run(PHASES, on_tick=tick)
        monitor.poll()
        return summarize(
            runs,
            fleet=monitor.latest,
            changes=monitor.changes,
            mode=fleet.mode,
            seconds=time.monotonic() - started,
        )
    finally:
        monitor.close()
