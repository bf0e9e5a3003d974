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
the standard library's) go to a file, not the terminal.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from worker.demo.drive import Driver, Monitor
from worker.demo.plan import PHASES, TENANTS, THRIFTY_DAILY_MICROS, THRIFTY_TENANT, demo_settings
from worker.demo.remote import remote_fleet
from worker.demo.stack import Fleet, embedded_fleet
from worker.demo.summary import summarize
from worker.demo.view import LiveState, live_view, summary_view
from worker.errors import ConfigError
from worker.observability.logs import configure_logging

__all__ = ["DEFAULT_CONFIG", "LOG_FILE", "demo_settings", "run_demo"]

DEFAULT_CONFIG = "examples/demo.toml"
LOG_FILE = Path(tempfile.gettempdir()) / "relevo-demo.log"


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
) -> int:
    """Run the demo; print the summary (tables, or JSON with `as_json`).

    `rate` is turns sent per second; `concurrency` the client threads (and, embedded,
    the worker's threads). Returns how many turns got no result.
    """
    if not 0.5 <= rate <= 100:
        raise ConfigError("--rate: between 0.5 and 100 turns per second")
    if not 1 <= concurrency <= 256:
        raise ConfigError("--concurrency: between 1 and 256")
    options = _Options(rate, concurrency, as_json, console or Console())
    _logs_to(LOG_FILE)
    fleets = (
        embedded_fleet(concurrency) if redis_url is None else remote_fleet(redis_url, Path(config))
    )
    with fleets as fleet:
        summary = _drive(fleet, options)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        options.console.print()
        options.console.print(*summary_view(summary))
        options.console.print(
            f"{summary['total']['turns']} turns in {summary['seconds']} s · logs: {LOG_FILE}"
        )
    lost = int(summary["total"]["lost"])
    if lost:
        print(f"relevo demo: {lost} turns got no result: {summary['errors']}", file=sys.stderr)
    return lost


def _logs_to(path: Path) -> None:
    """Send every log (structlog, Celery's, warnings) to `path` for the rest of the process."""
    stream = path.open("w", encoding="utf-8")
    configure_logging(level="info", json=True, stream=stream)
    root = logging.getLogger()
    root.handlers = [logging.StreamHandler(stream)]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)


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
