"""Keep serving when Redis is slow or gone: fall back to this process's own breakers.

`ResilientBreakers` wraps the fleet store. When Redis errors or takes longer than
`timeout_s`, it answers from a local store running the same Lua scripts on a private
in-process fakeredis (same semantics by construction) and logs once that the fleet view
is lost. Turns then stay local, costing Redis nothing. A timer looks at the store every
`rejoin_check_s`, busy or idle (a turn's check counts as a look): it rejoins the fleet on
time, not on the next turn, logging once when it does, and keeps this process's memory of
the kill switch current (`breakers.memory`). While the fleet view is lost the kill switch
reads as it was at the last look: a turn never fails because the breaker store is down,
and a switch a person turned on stays on. Local breakers start empty at each outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import structlog
from redis.asyncio.client import Pipeline

from breakers.connection import DEFAULT_TIMEOUT_S, in_memory
from breakers.memory import FleetMemory
from breakers.outcomes import Entry, Pair
from breakers.state import FleetState, Transition
from breakers.store import FleetBreakers
from rediskit import REFUSED, STORE_ERRORS, LuaScripts, Parse, raise_if_forbidden

__all__ = ["ResilientBreakers"]

T = TypeVar("T")
log = structlog.get_logger("relevo.breakers")


class ResilientBreakers:
    """The fleet store, or this process's local breakers while Redis cannot be reached.

    Same operations as `FleetBreakers`. The ``*_on`` forms always queue their command
    (the caller's pipeline goes to Redis anyway); give their parser the reply, or the
    exception raised by ``pipe.execute`` if it failed, and it answers locally on error.
    The timer starts with the first operation, or with `watch`; `close` stops it.
    """

    def __init__(
        self,
        fleet: FleetBreakers,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        rejoin_check_s: float = 1.0,
        on_reset: Callable[[], None] | None = None,
    ) -> None:
        """`on_reset` is called each time the store is found to have lost its data."""
        self.fleet = fleet
        self.local = fleet.with_redis(in_memory())
        self.timeout_s = timeout_s
        self.rejoin_check_s = rejoin_check_s
        self.memory = FleetMemory(
            fleet, fresh_s=rejoin_check_s + timeout_s, on_reset=self._store_was_reset
        )
        self._lost = False
        self._lost_at = 0.0
        self._looked_at = -math.inf
        self._watching: asyncio.Task[None] | None = None
        self._closed = False
        self.resets = 0
        """How often this process found the store had lost its data."""
        self.on_reset = on_reset

    @property
    def fleet_view(self) -> bool:
        """False while answering from local breakers."""
        return not self._lost

    def watch(self) -> None:
        """Look at the store every `rejoin_check_s` from now on (on the running loop);
        never again once closed."""
        if self._closed:
            return
        if self._watching is None or self._watching.done():
            self._watching = asyncio.get_running_loop().create_task(self._watch())

    def _keep_watching(self) -> None:
        with contextlib.suppress(RuntimeError):  # no loop runs: a parser queued ahead of one
            self.watch()

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
            asked = time.monotonic()
            state = await op(store)
            return await self.memory.mind(state, asked) if store is self.fleet else state

        return check

    def _remembered(self, parse: Parse[FleetState]) -> Parse[FleetState]:
        asked = time.monotonic()

        async def remember(reply: object) -> FleetState:
            return await self.memory.mind(await parse(reply), asked)

        return remember

    def _local_view(self, state: FleetState) -> FleetState:
        return dataclasses.replace(state, fleet_view=False, kill_switch=self.memory.kill)

    async def _run(
        self, op: Callable[[FleetBreakers], Awaitable[T]], as_local: Callable[[T], T]
    ) -> T:
        self._keep_watching()
        if not self._lost:
            asked = time.monotonic()
            try:
                async with asyncio.timeout(self.timeout_s):
                    result = await op(self.fleet)
            except STORE_ERRORS as exc:
                self._lose(exc, asked)
            else:
                self._rejoin(asked)
                return result
        return as_local(await op(self.local))

    def _resolver(
        self,
        parse: Parse[T],
        op: Callable[[FleetBreakers], Awaitable[T]],
        as_local: Callable[[T], T],
    ) -> Parse[T]:
        self._keep_watching()
        asked = time.monotonic()

        async def resolve(reply: object) -> T:
            if LuaScripts.lost([reply]):
                # Redis answered but forgot the scripts (a restart, SCRIPT FLUSH):
                # load them and ask again, without leaving the fleet view.
                await self._reload_scripts()
                return await self._run(op, as_local)
            if self._lost:  # lost since this reply's pipeline went out: stay consistent
                return as_local(await op(self.local))
            if isinstance(reply, STORE_ERRORS):
                self._lose(reply, asked)
                return as_local(await op(self.local))
            result = await parse(reply)
            self._rejoin(asked)
            return result

        return resolve

    async def _reload_scripts(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.fleet.load_scripts()
        except STORE_ERRORS:
            pass  # the call that follows fails, and the timer takes over

    def _lose(self, exc: BaseException, asked: float) -> None:
        raise_if_forbidden(exc)
        self.memory.lost(asked)
        if self._lost:
            return
        self._lost = True
        self._lost_at = time.monotonic()
        log.warning(
            "breakers.fleet_view_lost", error=type(exc).__name__, rejoin_check_s=self.rejoin_check_s
        )

    async def _watch(self) -> None:
        # Closed ends it too: Python 3.11's asyncio.timeout can swallow a cancel that
        # lands as the look's own timeout fires.
        while not self._closed:
            # One look per period since the last look or the last turn's check.
            wait = max(self.memory.seen_at, self._looked_at) + self.rejoin_check_s
            wait -= time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self._look()
            except Exception:  # a timer that dies quietly would stop rejoining: say so, go on
                log.exception("breakers.look_failed")

    async def _look(self) -> None:
        """Read the switch and the epoch from the store; rejoin if it answers."""
        self._looked_at = asked = time.monotonic()
        op = self._checking(lambda store: store.check(()))
        try:
            async with asyncio.timeout(self.timeout_s):
                await op(self.fleet)
        except REFUSED:
            pass  # it answers, and refuses us: the next turn's call fails closed
        except STORE_ERRORS as exc:
            self._lose(exc, asked)
            return
        self._rejoin(asked)

    def _rejoin(self, asked: float) -> None:
        # An answer to a question asked before the loss (in flight with the one that
        # failed) does not rejoin: the next look decides.
        if self._lost and asked > self._lost_at:
            self._lost = False
            # What the local breakers learned in this outage is older than anything the
            # fleet knows now: the next outage starts them empty.
            self.local = self.fleet.with_redis(in_memory())
            lost_s = round(time.monotonic() - self._lost_at, 3)
            log.warning("breakers.fleet_view_rejoined", lost_s=lost_s)

    def _store_was_reset(self) -> None:
        self.resets += 1
        if self.on_reset is not None:
            self.on_reset()

    async def aclose(self) -> None:
        """`close`, then wait for the timer's last look at the store to end, so that no
        connection is opened after the caller closes the fleet's client."""
        self.close()
        if self._watching is not None:
            await asyncio.wait({self._watching}, timeout=self.timeout_s + self.rejoin_check_s)

    def close(self) -> None:
        """Stop the timer, if it runs, for good (before the fleet's client is closed: a
        check after this must not start it again and open a connection no one closes)."""
        self._closed = True
        if self._watching is not None:
            self._watching.cancel()
        self.memory.close()


def _same(value: T) -> T:
    return value
