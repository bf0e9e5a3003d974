"""Tenants declared in a file: limits, share and route of many tenants, read, compared, written.

One table per tenant, its id quoted (ids hold `:` `/` `@` `+` `.`), the keys those of
`relevo budgets set`, `relevo tenants set` and `relevo tenants chains`:

    [tenants."org:1234"]
    daily = "$5.00"                 # with monthly: the tenant's limits
    monthly = "$100.00"
    fallback_cap = "$1.50"          # optional; none without it
    overdraft = "$0.00"             # optional; 0 without it
    max_in_flight = 5               # any of these four: a share of its own
    turns_per_minute = 60
    input_tokens_per_minute = 200000
    weight = 2                      # 1 when another share key is given
    default_chain = "triage"        # either or both: a route of its own
    allowed_chains = ["default", "triage"]

A table is the whole truth for its tenant: a part it leaves out (no daily and monthly, no
share key, no chain key) is cleared. Reading (`parse_tenants`) checks everything before
anything is written and names the tenant and the key of each problem; `read_state` reads
what Redis holds, `plan` compares the two, `write_plan` sends the difference in a few
pipelines. Knows nothing of the fleet: the dispatcher's own step after a share changes is
the caller's.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

from budgets.errors import BudgetError, InvalidAmountError, InvalidNameError
from budgets.keys import BudgetKeys, check_tenant
from budgets.ledger import queue_limits
from budgets.money import format_micros, parse_dollars
from budgets.routes import Route, Routes
from budgets.shares import Share, Shares
from budgets.types import Limits
from rediskit import text

__all__ = [
    "TenantChange",
    "TenantPlan",
    "TenantSettings",
    "TenantsFileError",
    "dump_tenants",
    "parse_tenants",
    "plan",
    "read_state",
    "write_plan",
]

_LIMIT_KEYS = ("daily", "monthly", "fallback_cap", "overdraft")
_SHARE_KEYS = ("max_in_flight", "turns_per_minute", "input_tokens_per_minute", "weight")
_ROUTE_KEYS = ("default_chain", "allowed_chains")
KEYS = (*_LIMIT_KEYS, *_SHARE_KEYS, *_ROUTE_KEYS)
# Tenants per pipeline: a few thousand commands, well under Redis's output buffers.
_BATCH = 500


class TenantsFileError(BudgetError, ValueError):
    """A tenants file that cannot be applied; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class TenantSettings:
    """What a tenant has of its own; None for a part it has not. `unreadable` names the
    parts Redis holds in a form this release cannot read (rewritten or cleared on apply)."""

    limits: Limits | None = None
    share: Share | None = None
    route: Route | None = None
    unreadable: frozenset[str] = field(default=frozenset())

    def fields(self) -> dict[str, Any]:
        """The file's keys and values for this tenant, in the file's order."""
        out: dict[str, Any] = {}
        if self.limits is not None:
            out["daily"] = format_micros(self.limits.daily_micros)
            out["monthly"] = format_micros(self.limits.monthly_micros)
            if self.limits.fallback_cap_micros is not None:
                out["fallback_cap"] = format_micros(self.limits.fallback_cap_micros)
            out["overdraft"] = format_micros(self.limits.overdraft_micros)
        if self.share is not None:
            for name in _SHARE_KEYS:
                value = getattr(self.share, name)
                if value is not None:
                    out[name] = value
        if self.route is not None:
            if self.route.default is not None:
                out["default_chain"] = self.route.default
            if self.route.allowed is not None:
                out["allowed_chains"] = list(self.route.allowed)
        return out

    @property
    def empty(self) -> bool:
        return self == TenantSettings()


# -- reading the file -------------------------------------------------------------------


def parse_tenants(
    source: str, *, chains: Collection[str] | None = None
) -> dict[str, TenantSettings]:
    """The tenants `source` (a TOML text) declares; `TenantsFileError` naming every problem.

    `chains`: the chain names there are, to check each named chain against (None: unchecked).
    """
    try:
        raw = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError([f"not TOML: {exc}"]) from None
    problems = [
        f'{key}: unknown table or key (only [tenants."ID"])' for key in raw if key != "tenants"
    ]
    tables = raw.get("tenants", {})
    if not isinstance(tables, dict):
        raise TenantsFileError([*problems, 'tenants: must be tables, [tenants."ID"]'])
    out = {}
    for tenant, table in tables.items():
        where = f"[tenants.{json.dumps(tenant)}]"
        try:
            check_tenant(tenant)
        except InvalidNameError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if not isinstance(table, dict):
            problems.append(f"{where}: must be a table of keys ({', '.join(KEYS)})")
            continue
        said: list[str] = []
        settings = _tenant(table, said, chains)
        problems += [f"{where} {line}" for line in said]
        if not said:
            out[tenant] = settings
    if problems:
        raise TenantsFileError(problems)
    return out


def _tenant(
    table: dict[str, Any], said: list[str], chains: Collection[str] | None
) -> TenantSettings:
    said += [f"{key}: unknown key (keys: {', '.join(KEYS)})" for key in table if key not in KEYS]
    return TenantSettings(_limits(table, said), _share(table, said), _route(table, said, chains))


def _dollars(table: dict[str, Any], key: str, said: list[str]) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        said.append(f'{key}: dollars, as text ("5.00") or a number')
        return None
    try:
        return parse_dollars(value if isinstance(value, str) else repr(value))
    except InvalidAmountError as exc:
        said.append(f"{key}: {exc}")
        return None


def _limits(table: dict[str, Any], said: list[str]) -> Limits | None:
    amounts = {key: _dollars(table, key, said) for key in _LIMIT_KEYS}
    given = [key for key in _LIMIT_KEYS if key in table]
    if not given:
        return None
    said += [
        f"{key}: required beside {', '.join(k for k in given if k != key)}"
        for key in ("daily", "monthly")
        if key not in table
    ]
    daily, monthly = amounts["daily"], amounts["monthly"]
    if daily is None or monthly is None or len(said) > 0:
        return None
    if daily > monthly:
        said.append(f"daily: {format_micros(daily)} is more than monthly {format_micros(monthly)}")
        return None
    return Limits(daily, monthly, amounts["fallback_cap"], amounts["overdraft"] or 0)


def _share(table: dict[str, Any], said: list[str]) -> Share | None:
    values = {key: table[key] for key in _SHARE_KEYS if key in table}
    if not values:
        return None
    bad = len(said)
    for key, value in values.items():
        try:
            Share(**{key: value})
        except InvalidAmountError as exc:
            said.append(str(exc))
        except TypeError:
            said.append(f"{key}: a whole number")
    return Share(**values) if len(said) == bad else None


def _route(table: dict[str, Any], said: list[str], chains: Collection[str] | None) -> Route | None:
    default, allowed = table.get("default_chain"), table.get("allowed_chains")
    if default is None and allowed is None:
        return None
    bad = len(said)
    if default is not None and not isinstance(default, str):
        said.append("default_chain: a chain's name, as text")
    if allowed is not None and not (
        isinstance(allowed, list) and all(isinstance(n, str) for n in allowed)
    ):
        said.append("allowed_chains: a list of chains' names, as text")
    if len(said) > bad:
        return None
    for key, names in (("default_chain", [default]), ("allowed_chains", allowed)):
        for name in names or ():
            if name is None:
                continue
            try:
                Route(name)
            except InvalidNameError as exc:
                said.append(f"{key}: {exc}")
            else:
                if chains is not None and name not in chains:
                    said.append(f"{key}: no chain named {name!r} (chains: {', '.join(chains)})")
    if len(said) > bad:
        return None
    try:
        return Route(default, None if allowed is None else tuple(allowed))
    except InvalidNameError as exc:
        key = "default_chain" if "default chain" in str(exc) else "allowed_chains"
        said.append(f"{key}: {exc}")
        return None


def dump_tenants(state: Mapping[str, TenantSettings]) -> str:
    """The file `parse_tenants` reads back to `state` (tenants with nothing left out)."""
    lines = ["# relevo tenants: `relevo tenants apply FILE` (docs/routing.md)"]
    for tenant in sorted(state):
        fields = state[tenant].fields()
        if not fields:
            continue
        lines += ["", f"[tenants.{json.dumps(tenant)}]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
    return "\n".join(lines) + "\n"


# -- what Redis holds -------------------------------------------------------------------


async def read_state(store: Redis, broker: Redis, namespace: str) -> dict[str, TenantSettings]:
    """Every tenant with limits, a route (both on the store) or a share (on the broker's
    Redis, beside the dispatch queue): a few round trips, however many tenants."""
    keys = BudgetKeys(namespace)
    members = [text(m) for m in await store.smembers(keys.tenants())]
    tenants = []
    for member in members:
        try:
            tenants.append(check_tenant(member))
        except InvalidNameError:
            continue  # Ledger.tenants logs these; they cannot be in a file
    limits: dict[str, Limits | None] = {}
    for start in range(0, len(tenants), _BATCH):
        batch = tenants[start : start + _BATCH]
        async with store.pipeline(transaction=False) as pipe:
            for tenant in batch:
                pipe.hgetall(keys.limits(tenant))
            replies = await pipe.execute()
        for tenant, reply in zip(batch, replies, strict=True):
            if reply:
                limits[tenant] = _read_limits({text(k): text(v) for k, v in reply.items()})
    shares = await _read_hash(broker, Shares(broker, namespace=namespace).key, Share.unpacked)
    routes = await _read_hash(store, Routes(store, namespace=namespace).key, Route.unpacked)
    state = {}
    for tenant in sorted({*limits, *shares, *routes}):
        lim, share, route = limits.get(tenant), shares.get(tenant), routes.get(tenant)
        unreadable = {
            part
            for part, there, value in (
                ("limits", tenant in limits, lim),
                ("share", tenant in shares, share),
                ("route", tenant in routes, route),
            )
            if there and value is None
        }
        state[tenant] = TenantSettings(lim, share, route, frozenset(unreadable))
    return state


def _read_limits(fields: dict[str, str]) -> Limits | None:
    try:
        cap = fields.get("fallback_cap")
        return Limits(
            int(fields["daily"]),
            int(fields["monthly"]),
            None if cap is None else int(cap),
            int(fields.get("overdraft") or 0),
        )
    except (KeyError, ValueError):
        return None


async def _read_hash(client: Redis, key: str, read: Any) -> dict[str, Any]:
    """tenant -> what `read` made of its entry; None for an entry it could not read."""
    out: dict[str, Any] = {}
    for tenant, raw in (await client.hgetall(key)).items():
        try:
            name = check_tenant(text(tenant))
        except (InvalidNameError, UnicodeDecodeError):
            continue
        try:
            out[name] = read(text(raw))
        except (BudgetError, UnicodeDecodeError):
            out[name] = None
    return out


# -- the difference, and writing it -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantChange:
    """One tenant's change: `before` is what Redis held, `after` what it will hold."""

    tenant: str
    kind: Literal["added", "changed", "pruned"]
    before: TenantSettings
    after: TenantSettings

    def fields(self) -> list[tuple[str, Any, Any]]:
        """(key, before, after) of each key that changes; None where a key is absent."""
        old, new = self.before.fields(), self.after.fields()
        out = [(k, old.get(k), new.get(k)) for k in KEYS if old.get(k) != new.get(k)]
        for part in sorted(self.before.unreadable):
            kept = getattr(self.after, part) is not None
            out.append((part, "unreadable", "rewritten" if kept else "cleared"))
        return out


@dataclass(frozen=True, slots=True)
class TenantPlan:
    """What applying a file changes, tenant by tenant, and how many tenants it leaves."""

    changes: tuple[TenantChange, ...]
    unchanged: int

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)


def plan(
    desired: Mapping[str, TenantSettings],
    current: Mapping[str, TenantSettings],
    *,
    prune: bool = False,
) -> TenantPlan:
    """The changes that make `current` what `desired` says; with `prune`, tenants not in
    `desired` lose their limits, share and route."""
    changes = []
    unchanged = 0
    nothing = TenantSettings()
    for tenant in sorted(desired):
        after, before = desired[tenant], current.get(tenant, nothing)
        if after == before:
            unchanged += 1
        else:
            kind: Literal["added", "changed"] = "added" if before.empty else "changed"
            changes.append(TenantChange(tenant, kind, before, after))
    if prune:
        gone = sorted(set(current) - set(desired))
        changes += [TenantChange(t, "pruned", current[t], nothing) for t in gone]
    return TenantPlan(tuple(changes), unchanged)


async def write_plan(
    changes: Iterable[TenantChange], store: Redis, broker: Redis, namespace: str
) -> list[str]:
    """Write `changes` in pipelines of `_BATCH` tenants; the tenants whose share changed
    (the dispatcher should look at them again)."""
    keys = BudgetKeys(namespace)
    shares_key = Shares(broker, namespace=namespace).key
    routes_key = Routes(store, namespace=namespace).key
    todo = list(changes)
    reshared = []
    for start in range(0, len(todo), _BATCH):
        batch = todo[start : start + _BATCH]
        # Queued inside the blocks: a cluster pipeline starts empty when entered.
        async with (
            store.pipeline(transaction=False) as on_store,
            broker.pipeline(transaction=False) as on_broker,
        ):
            for change in batch:
                reshared += _queue_change(
                    change,
                    on_store,
                    on_broker,
                    keys=keys,
                    routes_key=routes_key,
                    shares_key=shares_key,
                )
            await on_store.execute()
            await on_broker.execute()
    return reshared


def _queue_change(
    change: TenantChange,
    on_store: Any,
    on_broker: Any,
    *,
    keys: BudgetKeys,
    routes_key: str,
    shares_key: str,
) -> list[str]:
    """Queue one tenant's writes; [its id] if its share changed, else []."""
    t, old, new = change.tenant, change.before, change.after
    if new.limits != old.limits or "limits" in old.unreadable:
        _queue_limits(on_store, keys, t, new.limits)
    if new.route != old.route or "route" in old.unreadable:
        if new.route is None:
            on_store.hdel(routes_key, t)
        else:
            on_store.hset(routes_key, t, new.route.packed())
    if new.share == old.share and "share" not in old.unreadable:
        return []
    if new.share is None:
        on_broker.hdel(shares_key, t)
    else:
        on_broker.hset(shares_key, t, new.share.packed())
    return [t]


def _queue_limits(pipe: Any, keys: BudgetKeys, tenant: str, limits: Limits | None) -> None:
    if limits is None:
        # Its spend stays, and so does its place in the tenants set (listings show it).
        pipe.delete(keys.limits(tenant))
        return
    pipe.sadd(keys.tenants(), tenant)
    queue_limits(pipe, keys, tenant, limits)
