"""Re-sending turns the broker lost: the sent records no result or claim answers.

kombu's Redis transport pops a message (BRPOP) and records it as unacknowledged in
a second command: a worker killed between the two, or a failover at that moment,
loses the turn, and no key holds it. `send_turn` records every turn before it is
published (`TurnKeys.sent`, `TurnKeys.payloads`) and saving its result removes the
record. Each worker process sweeps every `worker.sweep_interval_s`: a record older than
the visibility timeout plus `worker.restore_interval_s` (by then kombu has put back
whatever it still holds) is dropped when the turn has a result, left alone while the
turn is claimed (running) or waits in the fair queue (`worker.fleet.fairqueue`: the
dispatch step restarts its record's clock; an index entry naming no queued turn does not
count), and otherwise re-sent with the same turn id.
A record this release cannot read is dropped when damaged, and left for the sweepers of
the newer release that wrote it (`worker.fleet.schema`).
A turn delivered twice runs once (the runner's claim and stored result), so re-sending
a slow one is safe. With RabbitMQ as the broker (`worker.fleet.rabbitmq`), a confirmed
publish is not lost by the broker; the records still bring back a turn taken from the
fair queue's outbox by a dispatcher that died before publishing it, and one whose
publish failed after its record was written. One process sweeps at a time (a lock for
one interval); records older than the result TTL are dropped, and each round refreshes
the records' keys' expiry (producers may not: deploy/redis/users.acl.in).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import structlog

from rediskit import text
from worker.errors import STORE_DOWN, InputError
from worker.fleet.errors import FleetUnavailable, Unreadable
from worker.fleet.fairqueue import FairKeys
from worker.fleet.schema import log_unreadable, read_turn
from worker.fleet.turnstore import TurnStore
from worker.types import Status, TurnRequest, TurnResult

__all__ = ["Sweeper"]

log = structlog.get_logger("relevo.sweeper")
_BATCH = 500
# Redis gone: the store's reads, or the re-send's publish.
_UNREACHABLE: tuple[type[BaseException], ...] = (*STORE_DOWN, FleetUnavailable)


class Sweeper:
    """Finds the turns that were sent and never delivered, and sends them again."""

    def __init__(
        self,
        store: TurnStore,
        send: Callable[[TurnRequest], object],
        *,
        holder: str,
        interval_s: float,
        older_than_s: float,
        on_resent: Callable[[int], None] | None = None,
        on_unreadable: Callable[[Unreadable], None] | None = None,
    ) -> None:
        """`send`: publish a turn (blocking; `send_turn` on the fleet's app); `on_resent`
        hears how many turns a round sent again, `on_unreadable` each record it could not
        read (the metrics)."""
        self.store = store
        self.send = send
        self.holder = holder
        self.interval_s = interval_s
        self.older_than_s = older_than_s
        self.on_resent = on_resent
        self.on_unreadable = on_unreadable
        self.fair_index = FairKeys(store.keys.namespace).index()
        self.fair_pending = FairKeys(store.keys.namespace).key("pending")
        # A newer release's records, already reported: its sweepers send them, and one
        # such record would otherwise be logged and counted again every round.
        self._newer_seen: set[str] = set()

    async def run_forever(self) -> None:
        """Sweep every interval (with jitter, so processes started together spread out)."""
        while True:
            await asyncio.sleep(self.interval_s * random.uniform(0.8, 1.2))
            try:
                await self.sweep_once()
            except _UNREACHABLE as exc:
                log.warning("sweep.store_unreachable", error=type(exc).__name__)
            except Exception:  # the sweeper must outlive any one bad round
                log.exception("sweep.failed")

    async def sweep_once(self) -> int:
        """One round, if no other process holds this one; returns the turns re-sent."""
        redis, keys = self.store.redis, self.store.keys
        lock_ms = max(1, int(self.interval_s * 1000))
        if not await redis.set(keys.sweep, self.holder, nx=True, px=lock_ms):
            return 0
        now_ms = time.time() * 1000
        expired_ms = now_ms - self.store.ttl_s * 1000
        # The records' expiry is kept here, not by producers: a producer allowed EXPIRE on
        # them could drop every service's records with one command.
        pipe = redis.pipeline(transaction=False)
        pipe.expire(keys.sent, self.store.ttl_s)
        pipe.expire(keys.payloads, self.store.ttl_s)
        pipe.zrangebyscore(keys.sent, "-inf", expired_ms, start=0, num=_BATCH)
        expired = (await pipe.execute())[-1]
        if expired:
            await self.store.forget(*(text(turn_id) for turn_id in expired))
        due = await redis.zrangebyscore(
            keys.sent, expired_ms, now_ms - self.older_than_s * 1000, start=0, num=_BATCH
        )
        turn_ids = [text(turn_id) for turn_id in due]
        if not turn_ids:
            return 0
        pipe = redis.pipeline(transaction=False)
        for turn_id in turn_ids:
            pipe.exists(keys.result(turn_id))
            pipe.exists(keys.claim(turn_id))
            pipe.hget(self.fair_index, turn_id)
            pipe.hget(keys.payloads, turn_id)
        replies = await pipe.execute()
        await self._queued_indeed(replies)
        answered: list[str] = []
        resent = 0
        for i, turn_id in enumerate(turn_ids):
            has_result, claimed, queued, payload = replies[4 * i : 4 * i + 4]
            if has_result:
                answered.append(turn_id)
            elif claimed or queued:
                continue  # running now, or waiting its turn in the fair queue
            elif payload is None:
                answered.append(turn_id)  # nothing to send
            elif isinstance(turn := self._read(turn_id, payload), TurnRequest):
                resent += await self._resend(turn)
            elif not turn.newer:
                answered.append(turn_id)  # damaged: nothing to send
            # else a newer release's record: its sweepers send it
        if answered:
            await self.store.forget(*answered)
        if resent and self.on_resent is not None:
            self.on_resent(resent)
        return resent

    async def _queued_indeed(self, replies: list[Any]) -> None:
        """Each index entry (every fourth reply from the third) made True when it names a
        turn still queued, False otherwise: a stale one (a hand edit, a release that left
        it) would keep its turn from being sent again for as long as its record lives."""
        members = replies[2::4]
        named = [m for m in members if m is not None]
        if not named:
            return
        pipe = self.store.redis.pipeline(transaction=False)
        for member in named:
            pipe.zscore(self.fair_pending, member)
        found = iter(await pipe.execute())
        for i in range(2, len(replies), 4):
            replies[i] = replies[i] is not None and next(found) is not None

    def _read(self, turn_id: str, payload: bytes | str) -> TurnRequest | Unreadable:
        try:
            return read_turn(payload, turn_id)
        except Unreadable as exc:
            if exc.newer:
                if turn_id in self._newer_seen:
                    return exc
                if len(self._newer_seen) >= _BATCH * 20:
                    self._newer_seen.clear()
                self._newer_seen.add(turn_id)
            log_unreadable(exc)
            if self.on_unreadable is not None:
                self.on_unreadable(exc)
            return exc

    async def _refused(self, turn: TurnRequest, exc: InputError) -> None:
        log.error("sweep.set_aside", turn_id=turn.turn_id, tenant_id=turn.tenant_id, why=str(exc))
        result = TurnResult(
            turn_id=turn.turn_id,
            tenant_id=turn.tenant_id,
            status=Status.FAILED,
            reason="undeliverable",
            error=f"the broker refuses it: {exc}",
            primary_model="",
        )
        await self.store.save(result)

    async def _resend(self, turn: TurnRequest) -> int:
        """Send the turn again (its record's score becomes now); 1 if it went."""
        try:
            # send_turn records the turn again: the score moves to now.
            await asyncio.to_thread(self.send, turn)
        except InputError as exc:
            # The broker refuses this turn (too large for it): answered, not sent again
            # each round ahead of the records behind it.
            await self._refused(turn, exc)
            return 0
        log.warning("turn.resent", turn_id=turn.turn_id)
        return 1
