"""The per-tenant ledger: reserve before an attempt, settle or release after it.

Every decision runs in one Lua script (one EVALSHA, one round trip) on the
Redis server's clock, so concurrent workers cannot race past a limit and the
UTC day and month do not depend on a pod's clock (the client passes the period
keys of both sides of its own clock, and the script picks those of its clock:
`BudgetKeys.periods`). Each operation is written once, as an `*_on(pipe, ...)` form
that queues the EVALSHA on a caller's pipeline and returns a parser for its raw
reply, so a worker can send a reservation and a breaker check together; its one-call
form (`reserve`, `settle`, `release`) sends that same queue on a pipeline of its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from budgets.errors import InvalidAmountError, InvalidNameError, UnknownTenantError
from budgets.keys import (
    CHARGE_TTL_S,
    DAY_TTL_S,
    HOLD_GRACE_S,
    MONTH_TTL_S,
    BudgetKeys,
    check_charge_id,
    check_provider,
    check_tenant,
)
from budgets.money import check_micros
from budgets.parsers import (
    parse_release,
    parse_report,
    parse_reservation,
    parse_settlement,
)
from budgets.scripts import SCRIPTS
from budgets.types import BudgetReport, Limits, Refusal, Release, Reservation, Settlement
from rediskit import Parse, read_clock, text

__all__ = ["Ledger", "queue_limits"]

log = structlog.get_logger("relevo.budgets")
T = TypeVar("T")
P = ParamSpec("P")
Parser = Callable[[Any], T]
MAX_HOLD_TTL_S = 86_400
# The tenants set lives on a slot of its own, out of the scripts' reach: a process adds a
# tenant beside a reservation or settlement at most this often (SADD changes nothing the
# second time), so a store that lost the set has it back within this long.
REGISTER_EVERY_S = 60.0
_MAX_REGISTERED = 10_000


def queue_limits(pipe: Pipeline, keys: BudgetKeys, tenant: str, limits: Limits) -> None:
    """Queue the writes of `tenant`'s limits on `pipe`: never a moment without a daily
    limit (fields are overwritten, not the hash dropped); a cap of None is removed."""
    key = keys.limits(tenant)
    pipe.hset(
        key,
        mapping={
            "daily": limits.daily_micros,
            "monthly": limits.monthly_micros,
            "overdraft": limits.overdraft_micros,
        },
    )
    if limits.fallback_cap_micros is None:
        pipe.hdel(key, "fallback_cap")
    else:
        pipe.hset(key, "fallback_cap", limits.fallback_cap_micros)


def _one_call(
    queue: Callable[Concatenate[Ledger, Pipeline, P], Parser[T]],
) -> Callable[Concatenate[Ledger, P], Coroutine[Any, Any, T]]:
    """The one-call form of a `*_on` operation: the same queue, on a pipeline of its own."""

    async def send(self: Ledger, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(lambda pipe: queue(self, pipe, *args, **kwargs))

    send.__doc__ = f"`{queue.__name__}`, sent in a round trip of its own."
    return send


class Ledger:
    """Per-tenant spend in Redis under `namespace`.

    `default_limits` applies to tenants without configured limits; None (the
    default) refuses them with `unknown_tenant`. `clock_ms` replaces the Redis
    server's clock, for tests only (see `budgets.testing.ManualClock`). Redis
    failures surface untranslated (`breakers.STORE_ERRORS`).
    """

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "relevo",
        default_limits: Limits | None = None,
        charge_ttl_s: int = CHARGE_TTL_S,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if charge_ttl_s < MAX_HOLD_TTL_S:
            raise ValueError(f"charge_ttl_s must be at least {MAX_HOLD_TTL_S} (the longest hold)")
        self._redis = redis
        self.keys = BudgetKeys(namespace)
        self.default_limits = default_limits
        self._charge_ttl_ms = charge_ttl_s * 1000
        self._clock_ms = clock_ms
        self._registered: dict[str, float] = {}

    async def load_scripts(self) -> None:
        """Load the Lua scripts into Redis in one round trip.

        The async methods do it when Redis answers NOSCRIPT; a worker using the
        `*_on` forms calls it at start-up, and again after a `NoScriptError` from
        its pipeline.
        """
        await SCRIPTS.load(self._redis)

    def _queue(
        self, pipe: Pipeline, script: str, tenant: str, keys: list[str], args: list[str | int]
    ) -> None:
        """Queue `script` with every script's leading KEYS and ARGV (lib.lua), then its own."""
        now = read_clock(self._clock_ms)
        around = time.time_ns() // 1_000_000 if now is None else now
        period_keys, periods = self.keys.periods(tenant, around)
        k = self.keys
        common_keys = [k.held(tenant), k.holds(tenant), k.reclaimed(tenant), *period_keys]
        common_args: list[str | int] = [
            *periods,
            DAY_TTL_S * 1000,
            MONTH_TTL_S * 1000,
            self._charge_ttl_ms,
        ]
        SCRIPTS.queue(pipe, script, common_keys + keys, common_args + args, now)

    def _register_on(self, pipe: Pipeline, tenant: str) -> None:
        """Queue SADD of `tenant` to the tenants set, unless done within REGISTER_EVERY_S."""
        now = time.monotonic()
        last = self._registered.get(tenant)
        if last is not None and now - last < REGISTER_EVERY_S:
            return
        if len(self._registered) >= _MAX_REGISTERED:
            self._registered.clear()
        self._registered[tenant] = now
        pipe.sadd(self.keys.tenants(), tenant)

    def _default_args(self) -> list[str | int]:
        limits = self.default_limits
        if limits is None:
            return ["", "", "", ""]
        cap = limits.fallback_cap_micros
        return [
            limits.daily_micros,
            limits.monthly_micros,
            "" if cap is None else cap,
            limits.overdraft_micros,
        ]

    async def _run(self, queue: Callable[[Pipeline], Parser[T]]) -> T:
        def queue_async(pipe: Pipeline) -> Parse[T]:
            parse = queue(pipe)

            async def run(reply: object) -> T:
                return parse(reply)

            return run

        return await SCRIPTS.run(self._redis, queue_async)

    def reserve_on(
        self,
        pipe: Pipeline,
        tenant: str,
        charge_id: str,
        *,
        provider: str,
        micros: int,
        fallback: bool,
        ttl_s: float,
        worst_micros: int | None = None,
        labels: str = "",
    ) -> Parser[Reservation | Refusal]:
        """Hold `micros` (the expected cost) for `charge_id` if the day, month and (for
        fallback) cap allow it, and allow `worst_micros` (default: `micros`) within the
        tenant's overdraft (see reserve.lua); queued on `pipe`, whose reply (the first of
        the commands queued here) the returned function parses.

        Idempotent by charge id: a live hold or a settled charge is returned as it
        is (`replayed=True`); a released one is held afresh. `labels`
        (`budgets.attribution.encode_labels`) travel with the hold: whatever charges
        it attributes its spend to them.
        """
        keys = self.keys
        check_provider(provider)
        check_micros("micros", micros)
        worst = micros if worst_micros is None else check_micros("worst_micros", worst_micros)
        if worst < micros:
            raise InvalidAmountError(
                f"worst_micros ({worst}) must not be less than micros ({micros})"
            )
        if not 0 < ttl_s <= MAX_HOLD_TTL_S:
            raise InvalidAmountError(
                f"ttl_s must be in (0, {MAX_HOLD_TTL_S}] seconds (got {ttl_s})"
            )
        own_keys = [keys.limits(tenant), keys.charge(tenant, charge_id)]
        args: list[str | int] = [
            tenant,
            charge_id,
            micros,
            worst,
            "1" if fallback else "0",
            provider,
            math.ceil(ttl_s * 1000),
            HOLD_GRACE_S * 1000,
            *self._default_args(),
            labels,
        ]
        self._queue(pipe, "reserve", tenant, own_keys, args)
        if self.default_limits is not None:
            # (Without defaults, a tenant that may reserve has limits, and set_limits added it.)
            self._register_on(pipe, tenant)
        return partial(parse_reservation, tenant, charge_id, micros)

    reserve = _one_call(reserve_on)

    def settle_on(
        self,
        pipe: Pipeline,
        tenant: str,
        charge_id: str,
        actual_micros: int,
        *,
        provider: str | None = None,
        fallback: bool | None = None,
        labels: str = "",
    ) -> Parser[Settlement]:
        """Charge `actual_micros` for `charge_id` once, whatever was reserved, and drop its
        hold; queued on `pipe`, whose reply (the first of the commands queued here) the
        returned function parses.

        A charge id already settled is never charged again (`replayed=True`,
        `charged_micros=0`), even when two settlements race. `provider`, `fallback` and
        `labels` are used only when no reservation record exists (never reserved, or
        reserved longer ago than the charge record's TTL).
        """
        check_micros("actual_micros", actual_micros)
        if provider is not None:
            check_provider(provider)
        if fallback and provider is None:
            raise ValueError("a fallback charge needs its provider")
        own_keys = [self.keys.charge(tenant, charge_id)]
        args: list[str | int] = [
            tenant,
            charge_id,
            actual_micros,
            "" if fallback is None else "1" if fallback else "0",
            provider or "",
            labels,
        ]
        self._queue(pipe, "settle", tenant, own_keys, args)
        self._register_on(pipe, tenant)
        return partial(parse_settlement, tenant, charge_id)

    settle = _one_call(settle_on)

    def release_on(self, pipe: Pipeline, tenant: str, charge_id: str) -> Parser[Release]:
        """Drop the hold of `charge_id` without charging it (the provider did not bill its
        call): a settled charge stays charged, a reclaimed one is refunded. Queued on
        `pipe`; the returned function parses its reply."""
        own_keys = [self.keys.charge(tenant, check_charge_id(charge_id))]
        self._queue(pipe, "release", tenant, own_keys, [charge_id])
        return partial(parse_release, tenant, charge_id)

    release = _one_call(release_on)

    async def set_limits(
        self,
        tenant: str,
        daily_micros: int,
        monthly_micros: int,
        fallback_cap_micros: int | None = None,
        overdraft_micros: int = 0,
    ) -> Limits:
        """Configure a tenant's limits (fallback cap per UTC day; None removes it)."""
        limits = Limits(daily_micros, monthly_micros, fallback_cap_micros, overdraft_micros)
        # The limits change together (one slot, one MULTI); the tenants set is elsewhere.
        await self._redis.sadd(self.keys.tenants(), tenant)
        pipe = self._redis.pipeline(transaction=True)
        queue_limits(pipe, self.keys, tenant, limits)
        await pipe.execute()
        return limits

    async def tenants(self) -> list[str]:
        """Tenants with configured limits or recorded spend, sorted."""
        members = await self._redis.smembers(self.keys.tenants())
        found = []
        for member in members:
            try:
                found.append(check_tenant(text(member)))
            except (UnicodeDecodeError, InvalidNameError):
                # A hand edit or another tool's: left out, so that one cannot stop a listing.
                shown = (
                    member.decode("utf-8", "backslashreplace")
                    if isinstance(member, bytes)
                    else member
                )
                log.warning(
                    "budgets.tenant_unreadable", member=str(shown)[:80], key="budget:tenants"
                )
        return sorted(found)

    async def report(self, tenant: str, *, attributed: bool = False) -> BudgetReport:
        """Limits, spend, holds and what remains in the current UTC day and month; with
        `attributed`, the periods' spend by label too (`PeriodReport.attribution`).

        Raises `UnknownTenantError` for a tenant with neither configured limits nor spend.
        """
        own_keys = [self.keys.limits(tenant)]
        known = bool(await self._redis.sismember(self.keys.tenants(), tenant))

        def queue(pipe: Pipeline) -> Parser[BudgetReport]:
            self._queue(pipe, "report", tenant, own_keys, [tenant, "1" if attributed else "0"])
            return partial(parse_report, tenant, self.default_limits, known)

        return await self._run(queue)

    async def reports(self, tenants: Sequence[str]) -> list[BudgetReport | Exception]:
        """`report` of each of `tenants` (members of `tenants()`) in one round trip, for
        readers of many tenants: in the order given, the report or the error Redis (or
        the parser) gave for that tenant alone. Scripts are loaded once if Redis lost them."""

        async def send() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for tenant in tenants:
                    self._queue(pipe, "report", tenant, [self.keys.limits(tenant)], [tenant])
                return await pipe.execute(raise_on_error=False)

        replies = await SCRIPTS.reloading(send, self.load_scripts)
        return [self._parsed(t, r) for t, r in zip(tenants, replies, strict=True)]

    def _parsed(self, tenant: str, raw: object) -> BudgetReport | Exception:
        if isinstance(raw, Exception):
            return raw
        try:
            return parse_report(tenant, self.default_limits, True, raw)
        except (ValueError, TypeError, UnknownTenantError) as exc:
            return exc
