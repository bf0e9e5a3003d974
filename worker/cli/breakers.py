"""`relevo breakers`: the fleet's breakers, cooldowns and exhausted marks; open/close/reset."""

from __future__ import annotations

import argparse
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from rich.table import Table

import breakers
from worker.cli.common import (
    Commands,
    add_redis_options,
    console,
    duration,
    emit_json,
    iso,
    operator_command,
    operator_redis,
    redis_settings,
    utc,
)
from worker.guard.stores import breaker_store
from worker.settings import RedisSettings, Settings, load_settings

__all__ = ["register"]


@dataclass(frozen=True)
class _Fleet:
    """Where the breakers live and how they are configured, from `--config` or defaults."""

    redis: RedisSettings
    settings: Settings | None

    def store(self, client: Redis) -> breakers.FleetBreakers:
        if self.settings is None:
            return breakers.FleetBreakers(client, namespace=self.redis.namespace)
        return breaker_store(self.settings, client, know_scopes=True)


def _fleet(config: str | None) -> _Fleet:
    if config is None:
        return _Fleet(redis_settings(None), None)
    settings = load_settings(config, require_secrets=False)
    return _Fleet(settings.redis, settings)


# -- relevo breakers -------------------------------------------------------------------


def _scope_json(s: breakers.ScopeReport) -> dict[str, Any]:
    pinned = math.isinf(s.retry_in_s)
    return {
        "scope": s.scope,
        "state": str(s.state),
        "calls_in_window": s.calls_in_window,
        "failures_in_window": s.failures_in_window,
        "failure_rate": s.failure_rate,
        "opened_at": iso(s.opened_at_ms),
        "opened_at_ms": s.opened_at_ms,
        "retry_in_s": None if pinned else s.retry_in_s,
        "pinned": pinned,
        "probe_holders": list(s.probe_holders),
    }


def _report_json(report: breakers.FleetReport) -> dict[str, Any]:
    return {
        "now": iso(report.now_ms),
        "scopes": [_scope_json(s) for s in report.scopes],
        "cooldowns": [
            {"account": c.pair.account, "model": c.pair.model, "remaining_s": c.remaining_s}
            for c in report.cooldowns
        ],
        "exhausted": [
            {"account": e.account, "remaining_s": e.remaining_s} for e in report.exhausted
        ],
    }


def _rate(s: breakers.ScopeReport) -> str:
    rate = s.failure_rate
    shown = "-" if rate is None else f"{rate:.0%}"
    return f"{s.failures_in_window}/{s.calls_in_window} ({shown})"


def _print_report(report: breakers.FleetReport) -> None:
    out = console()
    table = Table(title=f"Breakers at {utc(report.now_ms)}", title_justify="left")
    for name in ("scope", "state", "failures/calls", "opened at", "retry in", "probe holder"):
        table.add_column(name, no_wrap=name == "scope")
    for s in report.scopes:
        table.add_row(
            s.scope,
            str(s.state),
            _rate(s),
            utc(s.opened_at_ms),
            duration(s.retry_in_s),
            ", ".join(s.probe_holders) or "-",
        )
    out.print(table if report.scopes else "No breaker scopes known yet.")
    cools = Table(title="Cooldowns", title_justify="left")
    cools.add_column("account|model", no_wrap=True)
    cools.add_column("seconds left")
    for c in report.cooldowns:
        cools.add_row(f"{c.pair.account}|{c.pair.model}", f"{c.remaining_s:.1f}")
    out.print(cools if report.cooldowns else "No cooldowns.")
    marks = Table(title="Exhausted accounts", title_justify="left")
    marks.add_column("account", no_wrap=True)
    marks.add_column("seconds left")
    for e in report.exhausted:
        marks.add_row(e.account, f"{e.remaining_s:.1f}")
    out.print(marks if report.exhausted else "No exhausted accounts.")


async def _show(args: argparse.Namespace) -> int:
    fleet = _fleet(args.config)
    async with operator_redis(fleet.redis) as client:
        report = await breakers.Operators(fleet.store(client)).report()
    if args.json:
        emit_json(_report_json(report))
    else:
        _print_report(report)
    return 0


_Force = Callable[[breakers.Operators, str, float | None], Awaitable[breakers.BreakerState]]
# Each force command returns the state *before*; the state after follows from the action.
_ACTIONS: dict[str, tuple[_Force, breakers.BreakerState]] = {
    "open": (lambda ops, scope, s: ops.force_open(scope, s), breakers.BreakerState.OPEN),
    "close": (lambda ops, scope, _: ops.force_close(scope), breakers.BreakerState.CLOSED),
    "reset": (lambda ops, scope, _: ops.reset(scope), breakers.BreakerState.CLOSED),
}


async def _force(args: argparse.Namespace) -> int:
    scope: str = breakers.validate_name(args.scope, "scope")
    seconds: float | None = getattr(args, "seconds", None)
    force, after = _ACTIONS[args.action]
    fleet = _fleet(args.config)
    async with operator_redis(fleet.redis) as client:
        before = await force(breakers.Operators(fleet.store(client)), scope, seconds)
    if args.json:
        emit_json({"scope": scope, "before": str(before), "after": str(after), "for_s": seconds})
        return 0
    note = ""
    if args.action == "open":
        note = " (pinned until closed)" if seconds is None else f" for {seconds:g}s"
    print(f"{scope}: {before} -> {after}{note}")
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def register(commands: Commands) -> None:
    """Add `breakers` (and its open/close/reset) to the `relevo` command."""
    show = commands.add_parser("breakers", help="show or force the fleet's circuit breakers")
    add_redis_options(show)
    show.set_defaults(func=operator_command(_show))
    actions = show.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (
        ("open", "open a breaker now (pinned until closed, or --for SECONDS)"),
        ("close", "close a breaker now"),
        ("reset", "forget a breaker's state, window and probe slots"),
    ):
        sub = actions.add_parser(action, help=text)
        sub.add_argument("scope", metavar="SCOPE", help="e.g. vendor:openai")
        if action == "open":
            sub.add_argument("--for", dest="seconds", type=_seconds, metavar="SECONDS")
        add_redis_options(sub)
        sub.set_defaults(func=operator_command(_force))
