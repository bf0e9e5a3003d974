"""`relevo breakers`: the fleet's breakers, cooldowns and exhausted marks; open/close/reset,
and clear-gone for a model the provider serves again."""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.table import Table

import breakers
from worker.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    console,
    duration,
    emit_json,
    iso,
    operator_action,
    operator_command,
    operator_redis,
    operator_who,
    utc,
    warn,
)
from worker.cli.parsing import Commands, add_command, add_redis_options, positive_seconds
from worker.fleet.audit import AuditTrail, cli_actor
from worker.fleet.operations import BREAKER_ACTIONS, operator_fleet

__all__ = ["register"]

_EXITS = (EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE)


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
            {
                "account": c.pair.account,
                "model": c.pair.model,
                "remaining_s": c.remaining_s,
                "gone": c.gone,
            }
            for c in report.cooldowns
        ],
        "exhausted": [
            {"account": e.account, "remaining_s": e.remaining_s} for e in report.exhausted
        ],
    }


def _rate(s: breakers.ScopeReport) -> str:
    if s.opened_by_operator:
        return "opened by hand"
    failures, calls = s.window_shown
    rate = s.failure_rate
    shown = "-" if rate is None else f"{rate:.0%}"
    when = " when opened" if s.state is not breakers.BreakerState.CLOSED else ""
    return f"{failures}/{calls} ({shown}){when}"


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
    cools.add_column("why")
    for c in report.cooldowns:
        why = "gone (clear-gone)" if c.gone else "rate limit"
        cools.add_row(f"{c.pair.account}|{c.pair.model}", f"{c.remaining_s:.1f}", why)
    out.print(cools if report.cooldowns else "No cooldowns.")
    marks = Table(title="Exhausted accounts", title_justify="left")
    marks.add_column("account", no_wrap=True)
    marks.add_column("seconds left")
    for e in report.exhausted:
        marks.add_row(e.account, f"{e.remaining_s:.1f}")
    out.print(marks if report.exhausted else "No exhausted accounts.")


async def _show(args: argparse.Namespace) -> int:
    fleet = operator_fleet(args.config)
    async with operator_redis(fleet.config.redis, shared=True) as client:
        report = await breakers.Operators(fleet.store(client)).report()
    if args.json:
        emit_json(_report_json(report))
    else:
        _print_report(report)
    return 0


async def _force(args: argparse.Namespace) -> int:
    scope: str = breakers.validate_name(args.scope, "scope")
    seconds: float | None = getattr(args, "seconds", None)
    fleet = operator_fleet(args.config)
    who = cli_actor(operator_who(args.who))
    async with operator_redis(fleet.config.redis, shared=True) as client:
        trail = AuditTrail(client, namespace=fleet.config.redis.namespace)
        async with trail.acting(who, f"breaker.{args.action}", scope, "") as done:
            before, warning = await fleet.force(client, args.action, scope, seconds)
            done.text = f"{scope}: {before} -> {BREAKER_ACTIONS[args.action]}"
    if warning is not None:
        warn(warning)
    after = BREAKER_ACTIONS[args.action]
    if args.json:
        emit_json({"scope": scope, "before": str(before), "after": str(after), "for_s": seconds})
        return 0
    note = ""
    if args.action == "open":
        note = " (pinned until closed)" if seconds is None else f" for {seconds:g}s"
    print(f"{scope}: {before} -> {after}{note}")
    return 0


async def _clear_gone(args: argparse.Namespace) -> int:
    account: str = breakers.validate_name(args.provider, "provider")
    model: str = breakers.validate_name(args.model, "model")
    who = operator_who(args.who)
    fleet = operator_fleet(args.config)
    async with operator_redis(fleet.config.redis, shared=True) as client:
        trail = AuditTrail(client, namespace=fleet.config.redis.namespace)
        pair = f"{account}|{model}"
        async with trail.acting(cli_actor(who), "breakers.clear_gone", pair, "") as done:
            cleared = await fleet.clear_gone(client, account, model, who)
            done.text = "gone mark cleared" if cleared is not None else "not marked gone"
    left_s = None if cleared is None else cleared.remaining_s
    if args.json:
        emit_json(
            {"account": account, "model": model, "cleared": cleared is not None, "left_s": left_s}
        )
    elif left_s is None:
        print(f"{account}|{model} was not marked gone: nothing to clear")
    else:
        left = duration(left_s)
        print(f"{account}|{model}: gone mark cleared ({left} left); the fleet calls it again")
    return 0


def register(commands: Commands) -> None:
    """Add `breakers` (and its open/close/reset) to the `relevo` command."""
    show = add_command(
        commands,
        "breakers",
        "show or force the fleet's circuit breakers",
        exits=_EXITS,
        details="Without an action: every known scope (the chain's, with --config, and "
        "every scope the fleet has used) with its state, failures in the window and probe "
        "holders, then the cooldowns and exhausted accounts.",
    )
    add_redis_options(show)
    show.set_defaults(func=operator_command(_show))
    actions = show.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (
        ("open", "open a breaker now (pinned until closed, or --for SECONDS)"),
        ("close", "close a breaker now"),
        ("reset", "forget a breaker's state, window and probe slots"),
    ):
        sub = add_command(actions, action, text, exits=_EXITS, details=_SCOPES_HELP)
        sub.add_argument("scope", metavar="SCOPE", help="e.g. vendor:openai")
        sub.add_argument("--who", help="for the audit trail; defaults to $USER")
        if action == "open":
            sub.add_argument(
                "--for",
                dest="seconds",
                type=positive_seconds,
                metavar="SECONDS",
                help="then half-open (default: open until closed)",
            )
        add_redis_options(sub)
        sub.set_defaults(func=operator_action(_force))
    gone = add_command(
        actions,
        "clear-gone",
        "call a model again that the provider did not know (its gone mark ends now)",
        exits=_EXITS,
        details="A 404 for a model (retired, deployment deleted) marks the pair gone and "
        "the fleet skips it for [breakers] model_gone_s. Once the model is back (or the "
        "chain was fixed), this ends the mark at once. PROVIDER and MODEL are as `relevo "
        "breakers` lists them (account|model). A rate limit's cooldown is refused (exit 2): "
        "it ends by itself. Recorded in the audit trail with --who.",
    )
    gone.add_argument("provider", metavar="PROVIDER", help="the provider account, e.g. openai")
    gone.add_argument("model", metavar="MODEL", help="the provider's model id, e.g. gpt-5")
    gone.add_argument("--who", help="defaults to $USER")
    add_redis_options(gone)
    gone.set_defaults(func=operator_action(_clear_gone))


_SCOPES_HELP = (
    "SCOPE is vendor:<vendor> or model:<model>@<provider>. With --config FILE naming a "
    "chain, it must be one of the chain's scopes or one the fleet has used (else exit 2). "
    "Without a chain to check against, any such scope is accepted, with a warning on "
    "stderr when the fleet has not used it yet."
)
