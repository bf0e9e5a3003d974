"""Writes the shared store missed, kept in this process and retried until they land.

A worker that answered a turn, spent a tenant's money or refused a turn while Redis was
slow or gone must not forget it: the result is saved, the spend settled (or the hold of
a call nobody billed released), the held turn or the hand-off written when Redis answers
again. A write kept here is idempotent (a result saved under its turn id, a charge
settled or released under its charge id), or harmless twice (a turn held twice is
replayed once; a hand-off written twice is listed twice), so a write that did land
before its reply was lost may be sent again. A write Redis refuses (an ACL that denies
it) is kept too, and retried until a person fixes the grant.

The retries run on a timer of their own, not on the next turn: a worker that rejoins
the fleet while idle settles its backlog within `retry_every_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from worker.errors import STORE_DOWN, STORE_REFUSED

__all__ = ["Backlog"]

log = structlog.get_logger("relevo.backlog")

Write = Callable[[], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class _Item:
    kind: str  # "result", "spend", "release", "hold" or "handoff": for logs and metrics
    write: Write
    micros: int  # money this write carries (0 for a result)
    tenant: str | None


class Backlog:
    """Idempotent store writes waiting for Redis, oldest first, keyed so each is kept once."""

    def __init__(
        self, *, retry_every_s: float = 1.0, timeout_s: float = 2.0, max_items: int = 100_000
    ) -> None:
        self.retry_every_s = retry_every_s
        self.timeout_s = timeout_s
        self.max_items = max_items
        self._items: dict[str, _Item] = {}
        # Kept as writes come and go: asked on every turn while Redis is away.
        self._micros: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        """Writes refused because the backlog was full (each logged as an error)."""

    def __len__(self) -> int:
        return len(self._items)

    def add(
        self,
        key: str,
        kind: str,
        write: Write,
        *,
        micros: int = 0,
        tenant: str | None = None,
    ) -> None:
        """Keep `write` until it lands; a later write under the same `key` replaces it.

        Call from the event loop: the retry timer starts on it.
        """
        if key not in self._items and len(self._items) >= self.max_items:
            self.dropped += 1
            log.error("backlog.full", kind=kind, key=key, kept=len(self._items))
            return
        first = not self._items
        self._forget(self._items.get(key))
        self._items[key] = item = _Item(kind, write, micros, tenant)
        if tenant is not None:
            self._micros[tenant] = self._micros.get(tenant, 0) + item.micros
        if first:
            log.warning("backlog.started", kind=kind)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._retry())

    def pending_micros(self, tenant: str) -> int:
        """Money `tenant` spent in this process that the store has not been told of yet."""
        return self._micros.get(tenant, 0)

    def _forget(self, item: _Item | None) -> None:
        if item is not None and item.tenant is not None:
            left = self._micros[item.tenant] - item.micros
            if left:
                self._micros[item.tenant] = left
            else:
                del self._micros[item.tenant]

    async def flush(self) -> bool:
        """Send every kept write once, oldest first; stop at the first the store misses.
        A write the store refuses (ACL, password) stays, first in line, until a person
        fixes the grant; the writes after it go on.

        True when the backlog is empty.
        """
        refused: dict[str, _Item] = {}
        try:
            while self._items:
                key = next(iter(self._items))
                item = self._items[key]
                try:
                    async with asyncio.timeout(self.timeout_s):
                        await item.write()
                except STORE_REFUSED:  # before STORE_DOWN, which takes in every RedisError
                    refused[key] = self._items.pop(key)
                    continue
                except STORE_DOWN:
                    return False
                # A write added again under this key meanwhile is a newer one: keep it.
                if self._items.get(key) is item:
                    del self._items[key]
                    self._forget(item)
                log.info("backlog.written", kind=item.kind, key=key, micros=item.micros)
            return not refused
        finally:
            if refused:
                # One line a try, however many: the grant is what a person must fix.
                kinds = sorted({item.kind for item in refused.values()})
                log.error("backlog.refused", writes=len(refused), kinds=kinds)
                # A write added again under a refused key meanwhile is newer: it wins.
                self._items = {**refused, **self._items}

    async def _retry(self) -> None:
        while True:
            await asyncio.sleep(self.retry_every_s)
            if await self.flush():
                log.warning("backlog.cleared")
                return

    async def aclose(self) -> None:
        """Try once more, then stop the timer; what is left is logged, one error per write."""
        if self._task is not None:
            self._task.cancel()
        if not await self.flush():
            for key, item in self._items.items():
                log.error("backlog.lost", kind=item.kind, key=key, micros=item.micros)
