"""What an operator does to the fleet, for every surface (`relevo` commands, the console).

Each check raises an error of the project's tree (`InputError`, or the `breakers` and
`budgets` name errors) naming what was wrong, and returns a warning for what it lets
through; the surface decides how to show both.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from redis.asyncio import Redis

import breakers
import budgets
from budgets import format_micros as usd
from worker.errors import InputError
from worker.fleet.operator_config import OperatorConfig, operator_config
from worker.guard.stores import breaker_store
from worker.settings import BreakerSettings, BudgetSettings, RedisSettings, Settings

__all__ = [
    "BREAKER_ACTIONS",
    "OperatorFleet",
    "budget_reports",
    "check_limits",
    "check_scope",
    "check_text",
    "fleet_of",
    "operator_fleet",
    "switch_settle_s",
]

# The scopes the guard names (worker.guard.stores): a typo in any other shape is refused.
_SCOPE_SHAPE = re.compile(r"^(vendor:[^@]+|model:[^@]+@[^@]+)$")
_TENANTS_AT_ONCE = 16
# What each force leaves behind (each returns the state *before*).
BREAKER_ACTIONS: dict[str, breakers.BreakerState] = {
    "open": breakers.BreakerState.OPEN,
    "close": breakers.BreakerState.CLOSED,
    "reset": breakers.BreakerState.CLOSED,
}


@dataclass(frozen=True)
class OperatorFleet:
    """Where the breakers and budgets live and how they are configured."""

    config: OperatorConfig
    settings: Settings | None  # the whole configuration, when the file describes a chain

    def store(self, client: Redis, *also_known: str) -> breakers.FleetBreakers:
        """The breakers as workers see them; `also_known` lets an operator name a scope
        no worker has used yet (a file without a chain has no scopes to check it against)."""
        if self.settings is not None:
            return breaker_store(self.settings, client, know_scopes=True)
        policy = self.config.section("breakers", BreakerSettings)
        return breakers.FleetBreakers(
            client,
            namespace=self.config.redis.namespace,
            policy=policy.policy(),
            cooldowns=policy.cooldowns(),
            scopes=also_known,
        )

    def default_limits(self) -> budgets.Limits | None:
        """The limits of tenants never given their own (none without a configuration)."""
        if self.config.path is None:
            return None
        return self.config.section("budgets", BudgetSettings).default_limits()

    def ledger(self, client: Redis) -> budgets.Ledger:
        """The tenants' budgets, with the configured default limits."""
        namespace = self.config.redis.namespace
        return budgets.Ledger(client, namespace=namespace, default_limits=self.default_limits())

    async def force(
        self, client: Redis, action: str, scope: str, seconds: float | None = None
    ) -> tuple[breakers.BreakerState, str | None]:
        """Open, close or reset `scope`: the state before, and a warning if any."""
        if action not in BREAKER_ACTIONS:
            raise InputError(f"breaker action {action!r}: one of {', '.join(BREAKER_ACTIONS)}")
        breakers.validate_name(scope, "scope")
        ops = breakers.Operators(self.store(client))
        known = await ops.scopes()
        warning = None
        if scope not in known:
            warning = self.accept_unknown(scope, known)
            ops = breakers.Operators(self.store(client, scope))
        if action == "open":
            return await ops.force_open(scope, seconds), warning
        if action == "close":
            return await ops.force_close(scope), warning
        return await ops.reset(scope), warning

    async def clear_gone(
        self, client: Redis, account: str, model: str, who: str
    ) -> breakers.CooldownReport | None:
        """End the gone mark of (`account`, `model`): the mark cleared, None if the pair had
        none. A rate limit's cooldown is refused: the provider said when to come back."""
        ops = breakers.Operators(self.store(client))
        found = await ops.clear_gone(account, model, who=who)
        if found is not None and not found.gone:
            raise InputError(
                f"{account}|{model} is cooling down after a rate limit "
                f"({found.remaining_s:.0f} s left), not marked gone: a cooldown ends by itself"
            )
        return found

    def accept_unknown(self, scope: str, known: list[str]) -> str:
        """Refuse a scope the configured chain does not have, or one of no scope's shape;
        warn about any other the fleet has not used yet (a breaker set ahead of the first call)."""
        listed = ", ".join(known[:20]) or "none"
        if not _SCOPE_SHAPE.match(scope):
            raise InputError(f"{_not_a_scope(scope)}; known scopes: {listed}")
        if self.settings is not None:
            raise InputError(
                f"unknown breaker scope {scope!r}: the chain in {self.config.path} does not "
                f"use it and the fleet has not used it; known scopes: {listed}"
            )
        return (
            f"the fleet has not used scope {scope!r} yet; setting it anyway (check the "
            "spelling, or pass --config FILE to check it against the chain)"
        )


def operator_fleet(path: str | None) -> OperatorFleet:
    """The fleet as `--config FILE` (or, without one, the environment) describes it."""
    config = operator_config(path)
    return OperatorFleet(config, config.chain_settings())


async def budget_reports(ledger: budgets.Ledger) -> list[budgets.BudgetReport]:
    """Every tenant's report, a few at a time; tenants with nothing to show are left out
    (their spend expired and their limits were never set)."""
    gate = asyncio.Semaphore(_TENANTS_AT_ONCE)

    async def one(tenant: str) -> budgets.BudgetReport | None:
        async with gate:
            try:
                return await ledger.report(tenant)
            except budgets.UnknownTenantError:
                return None

    found = await asyncio.gather(*(one(t) for t in await ledger.tenants()))
    return [r for r in found if r is not None]


def fleet_of(settings: Settings) -> OperatorFleet:
    """The fleet a whole configuration describes (one already loaded, as the demo's)."""
    return OperatorFleet(OperatorConfig(None, {}, settings.redis), settings)


def check_scope(scope: str) -> str:
    """A breaker scope's name and shape, checked before Redis is asked."""
    breakers.validate_name(scope, "scope")
    if not _SCOPE_SHAPE.match(scope):
        raise InputError(_not_a_scope(scope))
    return scope


def _not_a_scope(scope: str) -> str:
    return (
        f"scope {scope!r} is not a breaker scope: scopes are vendor:<vendor> or "
        "model:<model>@<provider>"
    )


def check_text(value: str, what: str) -> str:
    """The kill switch's own limits on who and why, checked before Redis is asked."""
    if not value.strip() or len(value) > 1000:
        raise InputError(f"{what} must be 1-1000 characters, not blank")
    return value


def switch_settle_s(redis: RedisSettings) -> float:
    """How long after a person turns the kill switch off every worker has seen it: one
    look period and the store's timeout (`breakers.KillSwitch.confirm_off`)."""
    return redis.rejoin_check_s + redis.timeout_s


def check_limits(daily: int, monthly: int, overdraft: int) -> str | None:
    """Refuse limits that contradict each other; a warning for an overdraft past the limit."""
    if daily > monthly:
        raise InputError(
            f"--daily {usd(daily)} is more than --monthly {usd(monthly)}: "
            "a day's limit cannot exceed the month's"
        )
    if overdraft > daily:
        # Allowed (a tenant may need room for one large worst case), but rarely meant.
        return (
            f"--overdraft {usd(overdraft)} is more than --daily {usd(daily)}: worst cases "
            f"in flight may take a day's spend to {usd(daily + overdraft)}"
        )
    return None
