"""Keep serving when Redis is slow or gone: fall back to this process's own breakers.

`ResilientBreakers` wraps the fleet store. When Redis errors or takes longer than
`timeout_s`, it answers from a local store running the same Lua scripts on a private
in-process fakeredis (same semantics by construction) and logs once that the fleet view
is lost. Turns then stay local, costing Redis nothing, while a timer asks Redis every
`rejoin_check_s` whether it answers again: a worker rejoins on time, not on its next
turn, and logs once when it does. While the fleet view is lost the kill switch reads
as the fleet last showed it: a turn never fails because the breaker store is down, and
a switch a person turned on stays on.

A Redis that comes back empty (restarted without persistence, failed over to a replica
that had not caught up) is noticed by its epoch, a random id the store keeps: when it
is gone or new, this process logs `breakers.store_reset` as an error, and if it last saw
the kill switch on and no person turned the switch off since, it turns it back on for
the fleet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import structlog
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError

from breakers.connection import DEFAULT_TIMEOUT_S, in_memory
from breakers.errors import StoreUnavailableError
from breakers.killswitch import KillSwitch
from breakers.outcomes import Entry, Pair
from breakers.rediskit import FORBIDDEN_ERRORS, STORE_ERRORS, Parse, raise_if_forbidden
from breakers.state import FleetState, KillSwitchState, Transition
from breakers.store import FleetBreakers

__all__ = ["ResilientBreakers"]

T = TypeVar("T")
# What reading or making the epoch, or restoring the switch, may meet: Redis gone again.
_EPOCH_UNREAD: tuple[type[BaseException], ...] = (*STORE_ERRORS, StoreUnavailableError)
log = structlog.get_logger("relevo.breakers")


class ResilientBreakers:
    """The fleet store, or this process's local breakers while Redis cannot be reached.

    Same operations as `FleetBreakers`. The ``*_on`` forms always queue their command
    (the caller's pipeline goes to Redis anyway); give their parser the reply, or the
    exception raised by ``pipe.execute`` if it failed, and it answers locally on error.
    """

    def __init__(
        self,
        fleet: FleetBreakers,
        *,
        local: FleetBreakers | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        rejoin_check_s: float = 1.0,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        """`on_reset` is called each time the store is found to have lost its data."""
        self.fleet = fleet
        self.local = local or fleet.with_redis(in_memory())
        self.timeout_s = timeout_s
        self.rejoin_check_s = rejoin_check_s
        self._lost = False
        self._lost_at = 0.0
        self._rejoining: asyncio.Task[None] | None = None
        self._last_kill: KillSwitchState | None = None
        self._epoch: str | None = None
        self._restore: asyncio.Future[KillSwitchState | None] | None = None
        self.resets = 0
        """How often this process found the store had lost its data."""
        self.on_reset = on_reset

    @property
    def fleet_view(self) -> bool:
        """False while answering from local breakers."""
        return not self._lost

    async def check(
        self,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[str | Pair] = (),
    ) -> FleetState:
        """`FleetBreakers.check`, from local breakers while the fleet is lost."""
        scopes, pairs, accounts = list(scopes), list(pairs), list(accounts)
        op = self._checking(lambda store: store.check(scopes, pairs, accounts))
        return await self._run(op, self._local_view)

    def check_on(
        self,
        pipe: Pipeline,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[str | Pair] = (),
    ) -> Parse[FleetState]:
        """`FleetBreakers.check_on`; its parser answers locally when given an error."""
        scopes, pairs, accounts = list(scopes), list(pairs), list(accounts)
        parse = self.fleet.check_on(pipe, scopes, pairs, accounts)
        op = self._checking(lambda store: store.check(scopes, pairs, accounts))
        return self._resolver(self._remembered(parse), op, self._local_view)

    async def acquire_probe(self, scope: str, holder: str) -> bool:
        """`FleetBreakers.acquire_probe`, locally while the fleet is lost."""
        return await self._run(lambda store: store.acquire_probe(scope, holder), _same)

    def acquire_probe_on(self, pipe: Pipeline, scope: str, holder: str) -> Parse[bool]:
        """`FleetBreakers.acquire_probe_on`; its parser answers locally when given an error."""
        parse = self.fleet.acquire_probe_on(pipe, scope, holder)
        return self._resolver(parse, lambda store: store.acquire_probe(scope, holder), _same)

    async def record(self, entries: Sequence[Entry]) -> list[Transition]:
        """`FleetBreakers.record`, locally while the fleet is lost."""
        return await self._run(lambda store: store.record(entries), _same)

    def record_on(self, pipe: Pipeline, entries: Sequence[Entry]) -> Parse[list[Transition]]:
        """`FleetBreakers.record_on`; its parser records locally when given an error."""
        parse = self.fleet.record_on(pipe, entries)
        return self._resolver(parse, lambda store: store.record(entries), _same)

    def _checking(
        self, op: Callable[[FleetBreakers], Awaitable[FleetState]]
    ) -> Callable[[FleetBreakers], Awaitable[FleetState]]:
        async def check(store: FleetBreakers) -> FleetState:
            state = await op(store)
            return await self._mind_epoch(state) if store is self.fleet else state

        return check

    def _remembered(self, parse: Parse[FleetState]) -> Parse[FleetState]:
        async def remember(reply: object) -> FleetState:
            return await self._mind_epoch(await parse(reply))

        return remember

    async def _mind_epoch(self, state: FleetState) -> FleetState:
        """Remember what the fleet showed; notice a store that lost its data since.

        A check read before the restore landed (the same batch as the one that noticed
        the reset, or the round trip after) shows the new epoch, or none, with the switch
        off and nobody having turned it off: it gets the restored switch, so no turn runs
        in between. Once a person turns the switch off, the epoch says so.
        """
        epoch = state.epoch
        try:
            if not epoch:
                epoch = await self.fleet.start_epoch()
            if self._epoch is not None and epoch != self._epoch:
                self._epoch = epoch  # before any await: one process notices a reset once
                self._restore = asyncio.ensure_future(self._store_was_reset(state))
            unrestored = state.kill_switch is None and not state.epoch_off_by
            if self._restore is not None and unrestored and state.epoch in ("", self._epoch):
                restored = await asyncio.shield(self._restore)
                if restored is not None:
                    state = dataclasses.replace(state, kill_switch=restored)
        except _EPOCH_UNREAD as exc:
            raise_if_forbidden(exc)
            return state  # the next check tries again
        self._epoch = epoch
        self._last_kill = state.kill_switch
        return state

    async def _store_was_reset(self, state: FleetState) -> KillSwitchState | None:
        """Count and log the reset; the kill switch turned back on, if it was."""
        self.resets += 1
        if self.on_reset is not None:
            self.on_reset()
        last = self._last_kill
        restore = last is not None and state.kill_switch is None and not state.epoch_off_by
        log.error(
            "breakers.store_reset",
            detail="the store lost its data (breakers, cooldowns, budgets, held turns)",
            kill_switch_restored=restore,
        )
        if not restore or last is None:
            return None
        reason = f"{last.reason} [restored: the store lost its data]"
        switch = KillSwitch(self.fleet.redis, namespace=self.fleet.keys.namespace)
        return await switch.on(last.who, reason)

    def _local_view(self, state: FleetState) -> FleetState:
        return dataclasses.replace(state, fleet_view=False, kill_switch=self._last_kill)

    async def _run(
        self, op: Callable[[FleetBreakers], Awaitable[T]], as_local: Callable[[T], T]
    ) -> T:
        if self._lost:
            return as_local(await op(self.local))
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await op(self.fleet)
        except STORE_ERRORS as exc:
            self._lose(exc)
            return as_local(await op(self.local))
        self._rejoin()
        return result

    def _resolver(
        self,
        parse: Parse[T],
        op: Callable[[FleetBreakers], Awaitable[T]],
        as_local: Callable[[T], T],
    ) -> Parse[T]:
        async def resolve(reply: object) -> T:
            if isinstance(reply, NoScriptError):
                # Redis answered but forgot the scripts (a restart, SCRIPT FLUSH):
                # load them and ask again, without leaving the fleet view.
                await self._reload_scripts()
                return await self._run(op, as_local)
            if self._lost:  # lost since this reply's pipeline went out: stay consistent
                return as_local(await op(self.local))
            if isinstance(reply, STORE_ERRORS):
                self._lose(reply)
                return as_local(await op(self.local))
            result = await parse(reply)
            self._rejoin()
            return result

        return resolve

    async def _reload_scripts(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.fleet.load_scripts()
        except STORE_ERRORS:
            pass  # the call that follows fails, and the rejoin timer takes over

    def _lose(self, exc: BaseException) -> None:
        raise_if_forbidden(exc)
        if self._lost:
            return
        self._lost = True
        self._lost_at = time.monotonic()
        log.warning(
            "breakers.fleet_view_lost", error=type(exc).__name__, rejoin_check_s=self.rejoin_check_s
        )
        if self._rejoining is None or self._rejoining.done():
            self._rejoining = asyncio.get_running_loop().create_task(self._rejoin_when_back())

    async def _rejoin_when_back(self) -> None:
        while self._lost:
            await asyncio.sleep(self.rejoin_check_s)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self.fleet.redis.ping()
            except FORBIDDEN_ERRORS:
                pass  # it answers, and refuses us: the next turn's call fails closed
            except STORE_ERRORS:
                continue
            self._rejoin()

    def _rejoin(self) -> None:
        if self._lost:
            self._lost = False
            lost_s = round(time.monotonic() - self._lost_at, 3)
            log.warning("breakers.fleet_view_rejoined", lost_s=lost_s)

    def close(self) -> None:
        """Stop the rejoin timer, if one runs (before the fleet's client is closed)."""
        if self._rejoining is not None:
            self._rejoining.cancel()


def _same(value: T) -> T:
    return value
