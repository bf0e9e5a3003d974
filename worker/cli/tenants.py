"""`relevo tenants`: each tenant's share of the fleet, and its turns queued and running.

relevo tenants [list]                      queued, in flight, and each tenant's share
relevo tenants set TENANT [--max-in-flight N] [--turns-per-minute N]
                          [--input-tokens-per-minute N] [--weight N]
relevo tenants clear TENANT                back to the [fairness] defaults
relevo tenants chains TENANT [--default NAME] [--allow NAME,NAME] [--clear]
                                           its default chain and the chains it may use
relevo tenants apply FILE / export         many tenants at once (`worker.cli.tenants_file`)
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from typing import Any

from rich.table import Table

import budgets
from worker.cli import tenants_file
from worker.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    OperatorError,
    console,
    emit_json,
    operator_command,
    operator_redis,
    utc,
)
from worker.cli.parsing import Commands, add_command, add_redis_options, positive_int
from worker.fleet.fairqueue import FairQueue, TenantLoad
from worker.fleet.operator_config import operator_config
from worker.settings import FairnessSettings, WorkerSettings

__all__ = ["register"]

_EXITS = (EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE)


def _row(load: TenantLoad) -> dict[str, Any]:
    return {
        "tenant": load.tenant,
        "queued": load.queued,
        "in_flight": load.in_flight,
        "share": "unreadable" if load.unreadable else "own" if load.own else "default",
        **asdict(load.share),
        "unreadable": load.unreadable,
        "parked_until_ms": load.parked_until_ms,
    }


def _fair(path: str | None, client: Any) -> FairQueue:
    config = operator_config(path)
    fairness = config.section("fairness", FairnessSettings)
    queue = config.section("worker", WorkerSettings).queue
    return FairQueue(
        client, namespace=config.redis.namespace, queue=queue, default=fairness.default_share()
    )


def _parked(until_ms: int | None) -> str:
    """When a parked tenant is looked at again; a time past is the next round."""
    if until_ms is None:
        return "-"
    left_s = until_ms / 1000 - time.time()
    return "next round" if left_s <= 0 else f"{utc(until_ms)} (in {left_s:.0f} s)"


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


async def _list(args: argparse.Namespace) -> int:
    where = operator_config(args.config).redis
    async with operator_redis(where) as client:
        rows = [_row(load) for load in await _fair(args.config, client).load()]
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("No tenant has turns queued or running, or a share of its own.")
        return 0
    table = Table(title="Tenants", title_justify="left")
    for name in ("tenant", "queued", "in flight", "share", "max in flight"):
        table.add_column(name, no_wrap=True)
    for name in ("turns/min", "input tokens/min", "weight", "parked until"):
        table.add_column(name, no_wrap=True)
    for r in rows:
        table.add_row(
            r["tenant"],
            str(r["queued"]),
            str(r["in_flight"]),
            r["share"] if not r["unreadable"] else f"unreadable ({r['unreadable']}), default used",
            _limit(r["max_in_flight"]),
            _limit(r["turns_per_minute"]),
            _limit(r["input_tokens_per_minute"]),
            str(r["weight"]),
            _parked(r["parked_until_ms"]),
        )
    console().print(table)
    return 0


async def _set(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    try:
        share = budgets.Share(
            args.max_in_flight, args.turns_per_minute, args.input_tokens_per_minute, args.weight
        )
    except budgets.InvalidAmountError as exc:
        raise OperatorError(f"--{str(exc).replace('_', '-')}") from None
    where = operator_config(args.config).redis
    async with operator_redis(where) as client:
        await _fair(args.config, client).set_share(tenant, share)
    if args.json:
        emit_json({"tenant": tenant, **asdict(share)})
    else:
        print(
            f"{tenant}: max in flight {_limit(share.max_in_flight)}, turns per minute "
            f"{_limit(share.turns_per_minute)}, input tokens per minute "
            f"{_limit(share.input_tokens_per_minute)}, weight {share.weight}"
        )
    return 0


async def _clear(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    where = operator_config(args.config).redis
    async with operator_redis(where) as client:
        had = await _fair(args.config, client).clear_share(tenant)
    if args.json:
        emit_json({"tenant": tenant, "cleared": had})
    else:
        print(f"{tenant}: {'back to the defaults' if had else 'had no share of its own'}")
    return 0


def _route_line(tenant: str, route: budgets.Route | None) -> str:
    if route is None:
        return f"{tenant}: no route of its own (turns run on the chain they name, or default)"
    default = route.default or "default"
    allowed = "any chain" if route.allowed is None else ", ".join(route.allowed)
    return f"{tenant}: default chain {default}; may use {allowed}"


def _checked_route(args: argparse.Namespace) -> budgets.Route:
    allowed = None if args.allow is None else tuple(n for n in args.allow.split(",") if n)
    try:
        route = budgets.Route(args.default, allowed)
    except budgets.InvalidNameError as exc:
        raise OperatorError(f"tenants chains: {exc}") from None
    settings = operator_config(args.config).chain_settings()
    if settings is None:  # no --config naming the chains: nothing to check them against
        return route
    named = [route.default] if route.default else []
    unknown = [n for n in (*named, *(route.allowed or ())) if n not in settings.chain_names]
    if unknown:
        known = ", ".join(settings.chain_names)
        raise OperatorError(f"tenants chains: no chain named {unknown[0]!r} (chains: {known})")
    return route


async def _chains(args: argparse.Namespace) -> int:
    tenant = budgets.check_tenant(args.tenant)
    changing = args.default is not None or args.allow is not None
    if args.clear and changing:
        raise OperatorError("tenants chains: --clear takes no --default or --allow")
    route = _checked_route(args) if changing else None
    where = operator_config(args.config).redis
    async with operator_redis(where, shared=True) as client:
        routes = budgets.Routes(client, namespace=where.namespace)
        if args.clear:
            await routes.clear(tenant)
        elif route is not None:
            await routes.set(tenant, route)
        else:
            try:
                route = await routes.get(tenant)
            except budgets.InvalidNameError as exc:
                raise OperatorError(
                    f"tenants chains: {tenant}'s route cannot be read ({exc}); its turns may "
                    "use the chain named default only until it is set again"
                ) from None
    if args.json:
        fields = None if route is None else {"default": route.default, "allowed": route.allowed}
        emit_json({"tenant": tenant, "route": fields})
    else:
        print(_route_line(tenant, route))
    return 0


def register(commands: Commands) -> None:
    """Add `tenants` to the `relevo` command."""
    group = add_command(
        commands,
        "tenants",
        "each tenant's share of the fleet: limits, weight, turns queued and running",
        exits=_EXITS,
        details="A limit shown as - is none. Defaults come from [fairness] in --config.",
    )
    add_redis_options(group)
    group.set_defaults(func=operator_command(_list))
    actions = group.add_subparsers(dest="action", metavar="ACTION")
    listing = add_command(actions, "list", "every tenant with turns or a share", exits=_EXITS)
    add_redis_options(listing)
    listing.set_defaults(func=operator_command(_list))
    put = add_command(
        actions,
        "set",
        "replace a tenant's share (an option left out is no limit; weight 1)",
        exits=_EXITS,
    )
    put.add_argument("tenant", metavar="TENANT")
    put.add_argument("--max-in-flight", type=positive_int, metavar="N", help="turns running")
    put.add_argument(
        "--turns-per-minute", type=positive_int, metavar="N", help="turns started per minute"
    )
    put.add_argument(
        "--input-tokens-per-minute",
        type=positive_int,
        metavar="N",
        help="estimated input tokens per minute",
    )
    put.add_argument(
        "--weight",
        type=positive_int,
        default=1,
        metavar="N",
        help=f"share when the fleet is saturated, 1 to {budgets.MAX_WEIGHT} (default 1)",
    )
    add_redis_options(put)
    put.set_defaults(func=operator_command(_set))
    clear = add_command(actions, "clear", "back to the [fairness] defaults", exits=_EXITS)
    clear.add_argument("tenant", metavar="TENANT")
    add_redis_options(clear)
    clear.set_defaults(func=operator_command(_clear))
    chains = add_command(
        actions,
        "chains",
        "a tenant's default chain and the chains it may use (shown without options)",
        exits=_EXITS,
        details="--default and --allow replace the tenant's route; workers read it within "
        "5 s. With --config naming the chains, each name is checked against them.",
    )
    chains.add_argument("tenant", metavar="TENANT")
    chains.add_argument(
        "--default", metavar="NAME", help="the chain its turns run on when they name none"
    )
    chains.add_argument(
        "--allow",
        metavar="NAME,NAME",
        help="the only chains its turns may run on (a turn naming another fails)",
    )
    chains.add_argument("--clear", action="store_true", help="no route of its own")
    add_redis_options(chains)
    chains.set_defaults(func=operator_command(_chains))
    tenants_file.register(actions)
