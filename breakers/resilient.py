"""Keep serving when Redis is slow or gone: fall back to this process's own breakers.

`ResilientBreakers` wraps the fleet store. When Redis errors or takes longer than
`timeout_s`, it answers from a local store running the same Lua scripts on a private
in-process fakeredis (same semantics by construction), logs once that the fleet view is
lost, and tries the fleet again after `rejoin_after_s`, logging once when it rejoins.
While the fleet view is lost the kill switch reads as off: a turn never fails because
the breaker store is down. Local state starts empty and is dropped on rejoin.
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
from breakers.outcomes import Entry, Pair
from breakers.rediskit import STORE_ERRORS, Parse, raise_if_forbidden
from breakers.state import FleetState, Transition
from breakers.store import FleetBreakers

__all__ = ["ResilientBreakers"]

T = TypeVar("T")
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
        rejoin_after_s: float = 5.0,
    ) -> None:
        self.fleet = fleet
        self.local = local or fleet.with_redis(in_memory())
        self.timeout_s = timeout_s
        self.rejoin_after_s = rejoin_after_s
        self._lost_at: float | None = None

    @property
    def fleet_view(self) -> bool:
        """False while answering from local breakers."""
        return self._lost_at is None

    async def check(
        self,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[str] = (),
    ) -> FleetState:
        """`FleetBreakers.check`, from local breakers while the fleet is lost."""
        scopes, pairs, accounts = list(scopes), list(pairs), list(accounts)
        return await self._run(lambda store: store.check(scopes, pairs, accounts), _local_view)

    def check_on(
        self,
        pipe: Pipeline,
        scopes: Iterable[str],
        pairs: Iterable[Pair | tuple[str, str]] = (),
        accounts: Iterable[str] = (),
    ) -> Parse[FleetState]:
        """`FleetBreakers.check_on`; its parser answers locally when given an error."""
        scopes, pairs, accounts = list(scopes), list(pairs), list(accounts)
        parse = self.fleet.check_on(pipe, scopes, pairs, accounts)
        return self._resolver(
            parse, lambda store: store.check(scopes, pairs, accounts), _local_view
        )

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

    async def _run(
        self, op: Callable[[FleetBreakers], Awaitable[T]], as_local: Callable[[T], T]
    ) -> T:
        lost_at = self._lost_at
        if lost_at is not None and time.monotonic() - lost_at < self.rejoin_after_s:
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
            pass  # the next attempt after rejoin_after_s tries again

    def _lose(self, exc: BaseException) -> None:
        raise_if_forbidden(exc)
        if self._lost_at is None:
            log.warning(
                "breakers.fleet_view_lost",
                error=type(exc).__name__,
                rejoin_after_s=self.rejoin_after_s,
            )
        self._lost_at = time.monotonic()

    def _rejoin(self) -> None:
        if self._lost_at is not None:
            log.warning("breakers.fleet_view_rejoined")
            self._lost_at = None


def _same(value: T) -> T:
    return value


def _local_view(state: FleetState) -> FleetState:
    return dataclasses.replace(state, fleet_view=False)
