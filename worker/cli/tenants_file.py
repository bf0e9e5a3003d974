"""`relevo tenants apply` and `relevo tenants export`: many tenants' settings in one file.

relevo tenants apply FILE [--dry-run] [--prune] [--who NAME]
                                           limits, shares and routes as FILE declares them
relevo tenants export                      the same format, from what Redis holds

The format, the checks and the difference are `budgets.tenantfile`'s; this module reads the
file, prints what changes and records it in the audit trail: one action per apply naming
how many tenants changed (the console's audit page shows the newest few entries; one per
tenant would push every other action off it).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from budgets import format_micros as usd
from budgets.tenantfile import (
    TenantChange,
    TenantPlan,
    TenantSettings,
    TenantsFileError,
    dump_tenants,
    parse_tenants,
    plan,
    read_state,
    write_plan,
)
from worker.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OperatorError,
    emit_json,
    note,
    operator_action,
    operator_command,
    operator_redis,
    operator_who,
    warn,
    write_out,
)
from worker.cli.parsing import Commands, add_command, add_redis_options
from worker.fleet.audit import AuditTrail, cli_actor
from worker.fleet.fairqueue import FairQueue
from worker.fleet.operator_config import operator_config

__all__ = ["register"]

_EXITS = (EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE)
_NAMED_IN_AUDIT = 10
_SIGNS = {"added": "+", "changed": "~", "pruned": "-"}


def _desired(path: str, config: str | None) -> dict[str, TenantSettings]:
    """The file's tenants, every problem on a line of its own; nothing is written if any."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OperatorError(f"tenants apply: cannot read {path}: {exc}") from None
    settings = operator_config(config).chain_settings()
    chains = None if settings is None else settings.chain_names
    try:
        return parse_tenants(source, chains=chains)
    except TenantsFileError as exc:
        for line in exc.problems:
            note(f"{path}: {line}")
        count = len(exc.problems)
        raise OperatorError(
            f"tenants apply: {count} problem(s) in {path}; nothing written"
        ) from None


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return ",".join(value) if isinstance(value, list) else str(value)


def _line(change: TenantChange) -> str:
    fields = change.fields()
    if change.kind == "changed":
        parts = [f"{k} {_shown(old)} -> {_shown(new)}" for k, old, new in fields]
    else:
        side = 1 if change.kind == "pruned" else 2
        parts = [f"{f[0]} {_shown(f[side])}" for f in fields]
    return f"  {_SIGNS[change.kind]} {change.tenant}: {'; '.join(parts) or 'nothing'}"


def _summary(p: TenantPlan) -> str:
    counts = [f"{p.count(kind)} {kind}" for kind in ("added", "changed")]
    return ", ".join([*counts, f"{p.unchanged} unchanged", f"{p.count('pruned')} pruned"])


def _audit_text(p: TenantPlan) -> str:
    names = [c.tenant for c in p.changes[:_NAMED_IN_AUDIT]]
    more = len(p.changes) - len(names)
    return f"{_summary(p)}: {', '.join(names)}" + (f" (+{more} more)" if more else "")


def _json(p: TenantPlan, dry_run: bool) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        **{kind: p.count(kind) for kind in ("added", "changed", "pruned")},
        "unchanged": p.unchanged,
        "tenants": [
            {
                "tenant": c.tenant,
                "change": c.kind,
                "fields": {k: {"before": old, "after": new} for k, old, new in c.fields()},
            }
            for c in p.changes
        ],
    }


def _warn_overdrafts(desired: dict[str, TenantSettings]) -> None:
    for tenant, settings in desired.items():
        limits = settings.limits
        if limits is not None and limits.overdraft_micros > limits.daily_micros:
            # Allowed, as `budgets set` allows it, but rarely meant.
            warn(
                f"{tenant}: overdraft {usd(limits.overdraft_micros)} is more than daily "
                f"{usd(limits.daily_micros)}"
            )


async def _apply(args: argparse.Namespace) -> int:
    desired = _desired(args.file, args.config)
    _warn_overdrafts(desired)
    where = operator_config(args.config).redis
    async with (
        operator_redis(where, shared=True) as store,
        operator_redis(where) as broker,
    ):
        the_plan = plan(desired, await read_state(store, broker, where.namespace), prune=args.prune)
        if the_plan.changes and not args.dry_run:
            trail = AuditTrail(store, namespace=where.namespace)
            who = cli_actor(operator_who(args.who))
            async with trail.acting(who, "tenants.apply", Path(args.file).name, "") as done:
                reshared = await write_plan(the_plan.changes, store, broker, where.namespace)
                await FairQueue(broker, namespace=where.namespace).look_again(reshared)
                done.text = _audit_text(the_plan)
    if args.json:
        emit_json(_json(the_plan, args.dry_run))
        return 0
    verb = "Would apply" if args.dry_run else "Applied"
    print(f"{verb} {args.file}: {_summary(the_plan)}")
    for change in the_plan.changes:
        print(_line(change))
    return 0


async def _export(args: argparse.Namespace) -> int:
    where = operator_config(args.config).redis
    async with (
        operator_redis(where, shared=True) as store,
        operator_redis(where) as broker,
    ):
        state = await read_state(store, broker, where.namespace)
    for tenant, settings in state.items():
        for part in sorted(settings.unreadable):
            warn(f"{tenant}: its {part} cannot be read; left out")
    write_out(dump_tenants(state))
    return 0


def register(actions: Commands) -> None:
    """Add `apply` and `export` to `relevo tenants`."""
    apply = add_command(
        actions,
        "apply",
        "set many tenants' limits, shares and routes as a file declares them",
        exits=_EXITS,
        details='Each [tenants."ID"] table is the tenant\'s whole setting: a part it leaves '
        "out is cleared. The file is checked whole first (exit 2, a line per problem, "
        "nothing written); with --config naming the chains, chain names are checked "
        "against them. Tenants not in the file are left alone unless --prune.",
    )
    apply.add_argument("file", metavar="FILE", help="the tenants file (TOML, docs/routing.md)")
    apply.add_argument("--dry-run", action="store_true", help="print the change; write nothing")
    apply.add_argument(
        "--prune",
        action="store_true",
        help="clear the limits, share and route of tenants the file does not name",
    )
    apply.add_argument("--who", help="for the audit trail; defaults to $USER")
    add_redis_options(apply)
    apply.set_defaults(func=operator_action(_apply))
    export = add_command(
        actions,
        "export",
        "every tenant's limits, share and route, in the format `tenants apply` reads",
        exits=_EXITS,
    )
    add_redis_options(export, json=False)
    export.set_defaults(func=operator_command(_export))
