"""The fleet's shared state on Redis: `breakers` and `budgets` behind the chain's `Guard`.

A healthy turn costs two round trips: `admit` pipelines the breaker check
(kill switch, breakers, cooldowns, exhausted accounts) with the first
attempt's reservation, and `conclude` pipelines the breaker record with the
settlement. Turns that reach the guard in the same loop iteration share those
round trips (`worker.guard.autopipeline`); every budget script goes out that one way.

The store's failures are translated at one boundary, `rediskit.store_errors`: Redis refusing the
worker (password, ACL) is `StoreForbidden`, and the turn fails closed (a held turn or a
hand-off it refuses to write is kept, below); Redis slow or gone is `StoreUnreachable`,
which each method answers locally. Breakers answer from this process's own
(`breakers.ResilientBreakers`); a tenant may start calls worth its offline allowance,
counted at their worst case while they run; and every write the store missed (a
settlement, a release, a held turn, a hand-off) waits in the backlog until it lands.
A turn never fails because the shared store is down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

import breakers
import budgets
from rediskit import LuaScripts, store_errors
from worker.errors import StoreForbidden, StoreUnreachable
from worker.guard.allowance import OfflineAllowance
from worker.guard.autopipeline import AutoPipeline
from worker.guard.backlog import Backlog
from worker.guard.protocol import (
    Admission,
    Charge,
    Conclusion,
    Refusal,
    Target,
)
from worker.guard.route_book import RouteBook
from worker.guard.sizing import OutputSizer
from worker.guard.stores import (
    breaker_store,
    budget_ledger,
    model_scope,
    output_evidence,
    vendor_scope,
)
from worker.guard.verdicts import entries as to_entries
from worker.guard.verdicts import log_transitions, scopes, view
from worker.settings import Settings

__all__ = ["RedisGuard", "open_guard"]

log = structlog.get_logger("relevo.guard")
Parser = Callable[[Any], object]
Queue = Callable[[Pipeline], Parser]


# Redis refusing the worker is `StoreForbidden`, never a quiet local view; slow or gone is
# `StoreUnreachable`, which each method answers locally.
_STORE_ERRORS = store_errors()


class RedisGuard:
    """Breakers, cooldowns, kill switch, held turns and budgets, batched per turn."""

    def __init__(
        self,
        redis: Redis,
        circuits: breakers.ResilientBreakers,
        ledger: budgets.Ledger,
        held: breakers.HeldTurns,
        handoffs: budgets.Handoffs,
        *,
        hold_ttl_s: float,
        pipes: AutoPipeline | None = None,
        backlog: Backlog | None = None,
        offline_allowance_micros: int = 0,
        sizer: OutputSizer | None = None,
        routes: RouteBook | None = None,
    ) -> None:
        """`pipes` carries the per-turn round trips (by default, on `redis`); `backlog`
        keeps the writes Redis missed until they land; while the budgets cannot be
        reached, a tenant may start calls worth `offline_allowance_micros` in this process
        (each counted at its worst case until it ends, then at its cost until Redis has
        it); `sizer` sizes reservations by the fleet's evidence (by default, every
        attempt reserves its `max_tokens`); `routes` reads the tenants' routes (by
        default, none)."""
        self.redis = redis
        self.circuits = circuits
        self.ledger = ledger
        self.held = held
        self.handoffs = handoffs
        self.hold_ttl_s = hold_ttl_s
        self.pipes = pipes or AutoPipeline(redis)
        self.backlog = backlog or Backlog()
        self.offline = OfflineAllowance(offline_allowance_micros, self.backlog)
        self.sizer = sizer
        self.routes = routes
        self.budgets_reachable = True
        """False from a budget script Redis missed until the next one it answers."""
        self.on_over_worst_case: Callable[[str, str], None] | None = None
        """Told the model and provider of each call charged more than its reserved worst
        case (a metric counts them)."""
        self._scripts_loaded = False
        self._scripts_loading = asyncio.Lock()

    async def _load_scripts(self) -> None:
        """Load the Lua scripts once, lazily: starting a worker never needs Redis."""
        # Concurrent first turns wait for the one load: an EVALSHA sent before it lands
        # gets NOSCRIPT, which would cost it a second round trip.
        async with self._scripts_loading:
            if self._scripts_loaded:
                return
            try:
                with _STORE_ERRORS:
                    await self.circuits.fleet.load_scripts()
                    await self.ledger.load_scripts()
            except StoreUnreachable as exc:
                log.warning("guard.scripts_not_loaded", error=str(exc))
            self._scripts_loaded = True

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        if not self._scripts_loaded:
            await self._load_scripts()
        names = scopes(targets)
        pairs = [breakers.Pair(t.provider, t.provider_model) for t in targets]
        accounts: list[str | breakers.Pair] = [*sorted({t.provider for t in targets}), *pairs]
        with _STORE_ERRORS:
            if not self.circuits.fleet_view:
                state = await self.circuits.check(names, pairs, accounts)
                if first is None:
                    return Admission(view(state, targets))
                if not state.fleet_view:
                    return Admission(view(state, targets), self.offline.admit(first))
                return Admission(view(state, targets), await self._reserve_alone(first))
            slot = self.pipes.open()
            parse_state = self.circuits.check_on(slot.pipe, names, pairs, accounts)
            parse_charge = self._queue_reserve(slot.pipe, first) if first is not None else None
            replies = await slot.send()
            state = await parse_state(replies[0])
        if first is None or parse_charge is None:
            return Admission(view(state, targets))
        refusal = await self._budget(
            replies[1],
            parse_charge,
            lambda pipe: self._queue_reserve(pipe, first),
            lost=lambda: self._reservation_missed(first),
        )
        return Admission(view(state, targets), refusal)

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> Refusal | None:
        with _STORE_ERRORS:
            if not self.circuits.fleet_view:
                state = await self.circuits.check(())
                if replacing is not None:
                    await self._settle_alone(replacing, None)
                if state.kill_switch is not None:
                    return Refusal.KILL_SWITCH
                if not state.fleet_view:
                    return self.offline.admit(charge)
                return await self._reserve_alone(charge)
            slot = self.pipes.open()
            parse_state = self.circuits.check_on(slot.pipe, ())
            release = self._queue_settle(slot.pipe, replacing, None) if replacing else None
            at = slot.queued
            parse_charge = self._queue_reserve(slot.pipe, charge)
            replies = await slot.send()
            killed = (await parse_state(replies[0])).kill_switch is not None
        if replacing is not None and release is not None:
            given_back = replacing
            await self._budget(
                replies[1],
                release,
                lambda pipe: self._queue_settle(pipe, given_back, None),
                lost=lambda: self._journal(given_back, None),
            )
        if killed:
            await self._settle_alone(charge, None)
            return Refusal.KILL_SWITCH
        return await self._budget(
            replies[at],
            parse_charge,
            lambda pipe: self._queue_reserve(pipe, charge),
            lost=lambda: self._reservation_missed(charge),
        )

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return max_tokens if self.sizer is None else self.sizer.tokens(model, max_tokens)

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        both = (model_scope(target), vendor_scope(target))
        with _STORE_ERRORS:
            granted = [await self.circuits.acquire_probe(scope, holder) for scope in both]
            if all(granted):
                return True
            # Give back a slot taken on one scope when the other refused.
            taken = [breakers.Outcome(s, breakers.Verdict.NEUTRAL, holder) for s in both]
            await self.circuits.record(taken)
        return False

    async def conclude(self, end: Conclusion) -> None:
        charge, cost = end.charge, end.cost_micros
        if cost is not None and cost > charge.worst:
            self._over_worst_case(end, cost)
        self.offline.ended(charge)
        entries = to_entries(end)
        with _STORE_ERRORS:
            if not self.circuits.fleet_view:
                if entries:
                    log_transitions(await self.circuits.record(entries))
                self._journal(charge, cost)
                return
            slot = self.pipes.open()
            parse_record = self.circuits.record_on(slot.pipe, entries) if entries else None
            if end.output_tokens is not None and self.sizer is not None:
                # Its replies sit between the record's and the settlement's: nobody reads them.
                self.sizer.evidence.record_on(slot.pipe, end.target.model, end.output_tokens)
            at = slot.queued
            settle = self._queue_settle(slot.pipe, charge, cost)
            replies = await slot.send()
            if parse_record is not None:
                log_transitions(await parse_record(replies[0]))
        await self._budget(
            replies[at],
            settle,
            lambda pipe: self._queue_settle(pipe, charge, cost),
            lost=lambda: self._journal(charge, cost),
        )

    def _over_worst_case(self, end: Conclusion, cost: int) -> None:
        """The provider billed more than the call's worst case: it is owed and charged all
        the same, but the bounds that rest on worst cases did not hold for it."""
        target, charge = end.target, end.charge
        log.warning(
            "budget.charge_over_worst_case",
            tenant=charge.tenant,
            charge_id=charge.charge_id,
            model=target.model,
            provider=target.provider,
            charged_micros=cost,
            worst_micros=charge.worst,
            output_tokens=end.output_tokens,
        )
        if self.on_over_worst_case is not None:
            self.on_over_worst_case(target.model, target.provider)

    async def hold(self, turn_id: str, payload: str) -> None:
        await self._write_or_keep(
            f"hold:{turn_id}", "hold", lambda: self.held.hold(turn_id, payload), turn_id=turn_id
        )

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        await self._write_or_keep(
            f"handoff:{turn_id}",
            "handoff",
            lambda: self.handoffs.push(tenant, turn_id, reason, payload),
            turn_id=turn_id,
        )

    async def kill_switch(self, fresh_s: float) -> breakers.KillSwitchState | None:
        """The kill switch as this process sees it, looked at again when the last look is
        older than `fresh_s`."""
        memory = self.circuits.memory
        if time.monotonic() - memory.seen_at < fresh_s:
            return memory.kill
        return (await self.circuits.check(())).kill_switch

    async def route(self, tenant: str) -> budgets.Route | None:
        return None if self.routes is None else await self.routes.get(tenant)

    async def aclose(self) -> None:
        """Write what the backlog holds if Redis answers, then close the guard's Redis
        clients (both, when `open_guard` made them)."""
        await self.circuits.aclose()
        if self.sizer is not None:
            await self.sizer.aclose()
        await self.backlog.aclose()
        if self.pipes.redis is not self.redis:
            await self.pipes.redis.aclose()
        await self.redis.aclose()

    # -- writes the store may miss ------------------------------------------------------

    async def _write_or_keep(
        self, key: str, kind: str, write: Callable[[], Any], *, turn_id: str
    ) -> None:
        """Write now, or (Redis away, or refusing the write) keep it in the backlog until
        it lands. A refusal is a person's to fix, and the turn has run nothing: its record,
        held for replay or handed to people, is kept meanwhile, never dropped."""
        if self.circuits.fleet_view:
            try:
                with _STORE_ERRORS:
                    await write()
                return
            except StoreUnreachable as exc:
                log.warning(f"guard.{kind}_kept", turn_id=turn_id, error=str(exc))
            except StoreForbidden as exc:
                log.error("guard.write_refused", kind=kind, turn_id=turn_id, error=str(exc))
        self.backlog.add(key, kind, write)

    def _journal(self, charge: Charge, cost: int | None) -> None:
        """Keep a settlement or a release Redis missed until it lands: money spent is
        never forgotten, and a call no provider billed is never charged when its hold
        expires. Both are idempotent per charge id: one that did land is harmless."""
        key = f"spend:{charge.tenant}:{charge.charge_id}"

        async def write() -> object:
            return await self._send(lambda pipe: self._queue_settle(pipe, charge, cost))

        if cost is None:
            self.backlog.add(key, "release", write)
        else:
            self.backlog.add(key, "spend", write, micros=cost, tenant=charge.tenant)

    # -- budgets: every script on the pipelined path -------------------------------------

    def _queue_reserve(self, pipe: Pipeline, charge: Charge) -> Parser:
        return self.ledger.reserve_on(
            pipe,
            charge.tenant,
            charge.charge_id,
            provider=charge.provider,
            micros=charge.micros,
            fallback=charge.fallback,
            ttl_s=self.hold_ttl_s,
            worst_micros=charge.worst,
            labels=charge.labels,
        )

    def _queue_settle(self, pipe: Pipeline, charge: Charge, cost: int | None) -> Parser:
        if cost is None:
            return self.ledger.release_on(pipe, charge.tenant, charge.charge_id)
        return self.ledger.settle_on(
            pipe,
            charge.tenant,
            charge.charge_id,
            cost,
            provider=charge.provider,
            fallback=charge.fallback,
            labels=charge.labels,
        )

    async def _send(self, queue: Queue) -> object:
        """One budget script in a round trip of its own (on the shared pipeline); sent
        again once when Redis had forgotten the scripts."""
        parses: list[Parser] = []

        async def send() -> list[Any]:
            slot = self.pipes.open()
            parses.append(queue(slot.pipe))
            return await slot.send()

        # The script's reply comes first; a settle may queue a second command after it.
        reply = (await LuaScripts.reloading(send, self.ledger.load_scripts))[0]
        if isinstance(reply, BaseException):
            raise reply
        return parses[-1](reply)

    async def _reserve_alone(self, charge: Charge) -> Refusal | None:
        try:
            with _STORE_ERRORS:
                outcome = await self._send(lambda pipe: self._queue_reserve(pipe, charge))
        except StoreUnreachable as exc:
            self._budgets_unreachable(exc)
            return self._reservation_missed(charge)
        return self._decided(outcome)

    async def _settle_alone(self, charge: Charge, cost: int | None) -> None:
        """Settle or release a charge alone (no breaker verdict); kept when Redis misses it."""
        try:
            with _STORE_ERRORS:
                await self._send(lambda pipe: self._queue_settle(pipe, charge, cost))
        except StoreUnreachable as exc:
            self._budgets_unreachable(exc)
            self._journal(charge, cost)

    async def _budget(
        self, reply: object, parse: Parser, queue: Queue, *, lost: Callable[[], Refusal | None]
    ) -> Refusal | None:
        """A budget script's pipelined reply; `lost()` answers when Redis missed it."""
        try:
            with _STORE_ERRORS:
                if LuaScripts.lost([reply]):
                    await self.ledger.load_scripts()
                    outcome = await self._send(queue)
                elif isinstance(reply, BaseException):
                    raise reply
                else:
                    outcome = parse(reply)
        except StoreUnreachable as exc:
            self._budgets_unreachable(exc)
            return lost()
        if not self.budgets_reachable:
            self.budgets_reachable = True
            log.warning("guard.budgets_rejoined")
        return self._decided(outcome)

    def _decided(self, outcome: object) -> Refusal | None:
        """A budget script's answer; a reservation's says the tenant's room, kept for
        while Redis does not answer."""
        if (
            isinstance(outcome, budgets.Reservation | budgets.Refusal)
            and outcome.room_micros is not None
        ):
            self.offline.heard(outcome.tenant, outcome.room_micros)
        return _refusal(outcome)

    def _budgets_unreachable(self, exc: StoreUnreachable) -> None:
        if self.budgets_reachable:
            self.budgets_reachable = False
            log.warning("guard.budgets_unreachable", error=str(exc))

    def _reservation_missed(self, charge: Charge) -> Refusal | None:
        """A reservation sent that Redis did not answer: decided offline. Refused, its
        release is kept, as the command may still run when Redis wakes (a hold nobody
        would settle, to be reclaimed and charged); admitted, its end is sent anyway."""
        refusal = self.offline.admit(charge)
        if refusal is not None:
            self._journal(charge, None)
        return refusal


def open_guard(settings: Settings, redis: Redis | None = None) -> RedisGuard:
    """A guard on the configured Redis (or `redis`); nothing is connected until first use.

    Close it with `aclose()`, which closes a `redis` given here too.
    """
    store = settings.redis
    pipes = None
    if redis is None:
        redis = store.connect_shared()
        # The per-turn round trips get a client of their own, timed per round trip.
        timed = store.connect_shared(timed_by_caller=True)
        pipes = AutoPipeline(timed, timeout_s=store.timeout_s)
    fleet = breaker_store(settings, redis)
    plan = settings.budgets
    sizer = OutputSizer(
        output_evidence(settings, redis),
        percentile=plan.reserve_percentile,
        min_samples=plan.evidence_min_samples,
        refresh_s=plan.evidence_refresh_s,
    )
    return RedisGuard(
        redis,
        breakers.ResilientBreakers(
            fleet, timeout_s=store.timeout_s, rejoin_check_s=store.rejoin_check_s
        ),
        budget_ledger(settings, redis),
        breakers.HeldTurns(redis, namespace=store.namespace),
        budgets.Handoffs(redis, namespace=store.namespace),
        hold_ttl_s=plan.hold_ttl_s,
        pipes=pipes,
        backlog=Backlog(retry_every_s=store.rejoin_check_s),
        offline_allowance_micros=plan.offline_allowance_micros(),
        sizer=sizer,
        routes=RouteBook(
            budgets.Routes(redis, namespace=store.namespace), timeout_s=store.timeout_s
        ),
    )


def _refusal(outcome: object) -> Refusal | None:
    if isinstance(outcome, budgets.Refusal):
        return Refusal(outcome.reason)
    return None
