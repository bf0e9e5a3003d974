"""`relevo budgets` and `relevo handoffs`: per-tenant spend and the turns handed to people.

Amounts are integer micro-dollars in Redis and in `--json`; text output shows dollars.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from rich.table import Table

import budgets
from budgets import format_micros as usd
from worker.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OperatorError,
    console,
    emit_json,
    iso,
    operator_action,
    operator_command,
    operator_redis,
    operator_who,
    utc,
    warn,
)
from worker.cli.parsing import Commands, add_command, add_redis_options, positive_int
from worker.fleet.audit import AuditTrail, cli_actor
from worker.fleet.operations import budget_reports, check_limits, operator_fleet
from worker.fleet.operator_config import redis_settings
from worker.settings import RedisSettings

__all__ = ["register"]

_EXITS = (EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE)


def _where(path: str | None) -> tuple[RedisSettings, budgets.Limits | None]:
    """Redis, and the default limits of unknown tenants (none without a configuration)."""
    fleet = operator_fleet(path)
    return fleet.config.redis, fleet.default_limits()


def _report_json(report: budgets.BudgetReport) -> dict[str, Any]:
    return {**asdict(report), "now": iso(report.now_ms)}


# -- relevo budgets list / show / set --------------------------------------------------


async def _list(args: argparse.Namespace) -> int:
    where, default = _where(args.config)
    async with operator_redis(where, shared=True) as client:
        ledger = budgets.Ledger(client, namespace=where.namespace, default_limits=default)
        shown = await budget_reports(ledger)
    if args.json:
        emit_json([_report_json(r) for r in shown])
        return 0
    if not shown:
        print("No tenants have budgets or spend yet.")
        return 0
    table = Table(title="Budgets", title_justify="left")
    for name in ("tenant", "limits", "daily", "spent today", "held", "free today"):
        table.add_column(name, no_wrap=name == "tenant")
    for name in ("monthly", "spent this month", "free this month", "fallback cap"):
        table.add_column(name)
    for r in shown:
        cap = r.limits.fallback_cap_micros
        table.add_row(
            r.tenant,
            r.limits_source,
            usd(r.day.limit_micros),
            usd(r.day.spent_micros),
            usd(r.reserved_micros),
            usd(r.day.remaining_micros),
            usd(r.month.limit_micros),
            usd(r.month.spent_micros),
            usd(r.month.remaining_micros),
            "-" if cap is None else usd(cap),
        )
    console().print(table)
    return 0


def _print_report(r: budgets.BudgetReport) -> None:
    out = console()
    periods = Table(
        title=f"Budget of {r.tenant} (limits {r.limits_source}) at {utc(r.now_ms)}",
        title_justify="left",
    )
    for name in ("period", "limit", "spent", "held", "free", "fallback spent", "reclaimed"):
        periods.add_column(name, no_wrap=True)
    for label, p in (("day", r.day), ("month", r.month)):
        periods.add_row(
            f"{label} {p.period}",
            usd(p.limit_micros),
            usd(p.spent_micros),
            usd(p.reserved_micros),
            usd(p.remaining_micros),
            usd(p.fallback_spent_micros),
            f"{usd(p.reclaimed_micros)} ({p.reclaimed_charges})",
        )
    out.print(periods)
    # Holds are expected costs; what they may cost at worst is bounded by the overdraft.
    out.print(
        f"Held in flight: {usd(r.reserved_micros)} expected, {usd(r.reserved_worst_micros)} "
        f"at worst; overdraft {usd(r.limits.overdraft_micros)}"
    )
    if r.day.reclaimed_charges or r.month.reclaimed_charges:
        out.print(
            "Reclaimed: holds whose workers never reported back, charged at their "
            "reservation (their calls may have been billed)"
        )
    cap = r.limits.fallback_cap_micros
    if cap is None:
        out.print("Fallback cap: none")
    else:
        left = usd(r.fallback_remaining_micros or 0)
        held = usd(r.reserved_fallback_micros)
        out.print(f"Fallback cap: {usd(cap)} per day, {left} left ({held} reserved)")
    providers = sorted({*r.day.fallback_by_provider, *r.month.fallback_by_provider})
    if not providers:
        out.print("Fallback spend by provider: none")
        return
    spend = Table(title="Fallback spend by provider", title_justify="left")
    for name in ("provider", "today", "this month"):
        spend.add_column(name, no_wrap=True)
    for name in providers:
        spend.add_row(
            name,
            usd(r.day.fallback_by_provider.get(name, 0)),
            usd(r.month.fallback_by_provider.get(name, 0)),
        )
    out.print(spend)


async def _show(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    where, default = _where(args.config)
    async with operator_redis(where, shared=True) as client:
        ledger = budgets.Ledger(client, namespace=where.namespace, default_limits=default)
        report = await ledger.report(tenant)
    if args.json:
        emit_json(_report_json(report))
    else:
        _print_report(report)
    return 0


def attribution_json(tenant: str, period: budgets.PeriodReport, key: str) -> dict[str, Any]:
    """One period's spend by `key`, as `relevo budgets report --json` and the console give it."""
    shown = period.by(key)
    return {
        "tenant": tenant,
        "period": period.period,
        "by": key,
        "spent_micros": shown.spent_micros,
        "values": shown.values,
        "none_micros": shown.none_micros,
        "other_micros": shown.other_micros,
        "unattributed_micros": shown.unattributed_micros,
    }


async def _attribution(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    key = budgets.check_label_key(args.by)
    where, default = _where(args.config)
    async with operator_redis(where, shared=True) as client:
        ledger = budgets.Ledger(client, namespace=where.namespace, default_limits=default)
        report = await ledger.report(tenant, attributed=True)
    period = report.month if args.month else report.day
    shown = period.by(key)
    if args.json:
        emit_json(attribution_json(tenant, period, key))
        return 0
    out = console()
    out.print(f"{tenant}: spend of {period.period} by {key}", markup=False, highlight=False)
    table = Table()
    for name in ("value", "spent", "share"):
        table.add_column(name, no_wrap=name != "value")
    whole = max(shown.spent_micros, 1)
    for label, micros in shown.rows():
        table.add_row(label, usd(micros), f"{100 * micros / whole:.1f}%")
    table.add_row("total", usd(shown.spent_micros), "", style="bold")
    out.print(table)
    return 0


def _dollars(option: str, text: str) -> int:
    try:
        return budgets.parse_dollars(text)
    except budgets.InvalidAmountError as exc:
        raise OperatorError(f"{option}: {exc}") from None


async def _set(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    daily = _dollars("--daily", args.daily)
    monthly = _dollars("--monthly", args.monthly)
    cap = None if args.fallback_cap is None else _dollars("--fallback-cap", args.fallback_cap)
    overdraft = _dollars("--overdraft", args.overdraft)
    warning = check_limits(daily, monthly, overdraft)
    if warning is not None:
        warn(warning)
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        ledger = budgets.Ledger(client, namespace=where.namespace)
        trail = AuditTrail(client, namespace=where.namespace)
        who = cli_actor(operator_who(args.who))
        async with trail.acting(who, "budgets.set", tenant, "") as done:
            limits = await ledger.set_limits(tenant, daily, monthly, cap, overdraft)
            done.text = f"{tenant}: daily {usd(daily)}, monthly {usd(monthly)}"
    if args.json:
        emit_json({"tenant": tenant, **asdict(limits)})
    else:
        shown = "none" if cap is None else usd(cap)
        print(
            f"{tenant}: daily {usd(limits.daily_micros)}, monthly {usd(limits.monthly_micros)}, "
            f"fallback cap {shown} per day, overdraft {usd(overdraft)}"
        )
    return 0


async def _migrate(args: argparse.Namespace) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        report = await budgets.migrate_keys(client, where.namespace, dry_run=args.dry_run)
    if args.json:
        emit_json({**asdict(report), "changed": report.changed})
        return 0
    _print_migration(report, where.namespace)
    return 0


def _print_migration(report: budgets.MigrationReport, namespace: str) -> None:
    if not report.changed:
        print(f"No budget keys of the old layout under namespace {namespace!r}.")
    else:
        verb = "Would move" if report.dry_run else "Moved"
        print(
            f"{verb} {report.changed} budget key(s) of {report.tenants} tenant(s) to the "
            f"current layout: {report.moved} copied, {report.merged} merged (day and month "
            f"counters added), {report.kept} kept (the current key wins)"
        )
    for key in report.conflicts:
        print(f"  already there: {key}")
    if report.skipped:
        print(f"Left alone: {report.skipped} key(s) under the old prefix that are no budget key")


# -- relevo handoffs -------------------------------------------------------------------


async def _handoffs(args: argparse.Namespace) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        items = await budgets.Handoffs(client, namespace=where.namespace).list(args.count)
    if args.json:
        emit_json([{**asdict(h), "at": iso(h.at_ms)} for h in items])
        return 0
    if not items:
        print("No hand-offs.")
        return 0
    table = Table(title="Hand-offs, newest first", title_justify="left")
    for name in ("time", "tenant", "turn id", "reason"):
        table.add_column(name, no_wrap=True)
    for h in items:
        reason = h.reason if h.problem is None else f"unreadable: {h.problem.why}"
        table.add_row(utc(h.at_ms), h.tenant, h.turn_id, reason)
    console().print(table)
    return 0


# -- registration ----------------------------------------------------------------------


def register(commands: Commands) -> None:
    """Add `budgets` and `handoffs` to the `relevo` command."""
    group = add_command(
        commands,
        "budgets",
        "per-tenant spend limits and spend",
        exits=_EXITS,
        details="Amounts are dollars in text and integer micro-dollars in --json.",
    )
    add_redis_options(group)
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = add_command(actions, "list", "every tenant with limits or spend", exits=_EXITS)
    add_redis_options(listing)
    listing.set_defaults(func=operator_command(_list))
    show = add_command(actions, "show", "one tenant's limits, spend and reservations", exits=_EXITS)
    show.add_argument("tenant", metavar="TENANT")
    add_redis_options(show)
    show.set_defaults(func=operator_command(_show))
    by = add_command(
        actions,
        "report",
        "one tenant's spend by a turn metadata key ([budgets] attribute_by)",
        exits=_EXITS,
        details="This UTC day (--month: month). The rows sum to the tenant's spend: each "
        "value, the turns without the key, the values past [budgets] max_attributed_values "
        "(other), and spend from before the key was attributed.",
    )
    by.add_argument("tenant", metavar="TENANT")
    by.add_argument("--by", required=True, metavar="KEY", help="a metadata key, e.g. agent")
    by.add_argument("--month", action="store_true", help="this UTC month, not the day")
    add_redis_options(by)
    by.set_defaults(func=operator_command(_attribution))
    put = add_command(
        actions,
        "set",
        "replace a tenant's limits (dollars, e.g. 5.00)",
        exits=_EXITS,
        details="--daily may not exceed --monthly (exit 2). An --overdraft above --daily "
        "is accepted, with a warning on stderr.",
    )
    put.add_argument("tenant", metavar="TENANT")
    put.add_argument("--who", help="for the audit trail; defaults to $USER")
    put.add_argument("--daily", required=True, metavar="DOLLARS", help="per UTC day")
    put.add_argument("--monthly", required=True, metavar="DOLLARS", help="per UTC month")
    put.add_argument(
        "--fallback-cap", metavar="DOLLARS", help="fallback spend per UTC day (omitted: no cap)"
    )
    put.add_argument(
        "--overdraft",
        default="0",
        metavar="DOLLARS",
        help="how far worst cases may run past a limit (default 0: never)",
    )
    add_redis_options(put)
    put.set_defaults(func=operator_action(_set))

    move = add_command(
        actions,
        "migrate",
        "move budget keys of the released layout to the current one",
        exits=_EXITS,
        details="Workers do this as they start; safe to run again and beside them. A day's "
        "or month's spend already written under the current name is added to; other keys "
        "already there win.",
    )
    move.add_argument(
        "--dry-run", action="store_true", help="count what would move; change nothing"
    )
    add_redis_options(move)
    move.set_defaults(func=operator_command(_migrate))

    handoffs = add_command(
        commands, "handoffs", "turns handed to people, newest first", exits=_EXITS
    )
    handoffs.add_argument(
        "--count",
        type=positive_int,
        default=50,
        metavar="N",
        help="show the newest N hand-offs (default: 50)",
    )
    add_redis_options(handoffs)
    handoffs.set_defaults(func=operator_command(_handoffs))
