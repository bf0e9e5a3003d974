"""Where a turn's outcome lives between deliveries: its result, its claim, its stream.

A turn is reported once: the first result saved wins (SET NX GET: the write and
the read of the standing result are one command, Redis >= 7), and is published on a
channel named as its key, for readers that wait on it (`worker.fleet.results`, Celery's
result backend over this store). Later deliveries
of the same turn read it instead of calling models again. The one exception is a
turn the kill switch refused: `relevo replay-held` runs it later and replaces its
"rejected" result (one Lua script, which replaces nothing else). A claim (SET NX PX)
keeps two deliveries of one turn from running it at the same time; it expires
with the turn's deadline, so a dead worker's claim frees itself. Content of a
streaming turn goes to a Redis stream per turn: each run starts it over, and its end
marker goes with the result (`worker.fleet.streams`).

    {N}:turn:<id>:result   string  the TurnResult JSON    (TTL: result_ttl_s)
    {N}:turn:<id>:claim    string  the claiming worker    (TTL: deadline + margin)
    {N}:turn:<id>:chunks   stream  run / text / end       (TTL: result_ttl_s)
    {N}:turns:sent         zset    turn id -> ms sent     (TTL: result_ttl_s, refreshed)
    {N}:turns:payloads     hash    turn id -> payload     (TTL: result_ttl_s, refreshed)
    {N}:turns:sweep        string  the sweeping worker    (TTL: one sweep interval)
    {N}:turns:recent       zset    turn id -> ms saved    (the newest ~RECENT_TURNS; TTL refreshed)
    {N}:workers            zset    process -> ms last seen (`worker.fleet.heartbeat`)
    {N}:worker:<process>   string  its heartbeat JSON     (TTL: heartbeat.KEPT_S)
    {N}:offline_rooms      hash    tenant -> short room   (`heartbeat.share_rooms`; TTL refreshed)

A result and a sent payload are JSON that relevo 0.1.0 reads strictly: their schema version
is in no field (`worker.fleet.schema`), and they are read back with `read_result` and
`read_turn`, which ignore fields this release does not know and raise `Unreadable` for
what it cannot read. A stream's run marker says its version (`worker.fleet.streams`).

A producer records each turn in `sent` and `payloads` before it publishes it (`send_turn`);
saving the result removes the record. `worker.fleet.sweeper` re-sends what stays unanswered.
So a turn id is known while any of its record, claim, stream or result is there
(`ask_known`): readers answer an id nobody sent (or whose result expired) at once.
Saving also records the turn among the fleet's recent ones (`recent`): the fleet-wide
fallback rate and each tenant's degraded turns are read from them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import structlog
from redis.asyncio import Redis

from rediskit import LuaScripts, text
from worker.errors import STORE_DOWN
from worker.fleet.errors import StreamRestarted, Unreadable
from worker.fleet.schema import STREAM_SCHEMA, log_unreadable, read_result
from worker.fleet.streams import StreamReader
from worker.guard.autopipeline import AutoPipeline
from worker.types import TurnResult

__all__ = ["RECENT_TURNS", "TurnKeys", "TurnStore", "ask_known", "known_from"]

log = structlog.get_logger("relevo.runner")

_CHUNK_MAXLEN = 10_000
RECENT_TURNS = 1000
# Each process trims the record every this many saves: it holds at most RECENT_TURNS plus
# this many per process, for a command less on nearly every save.
_TRIM_EVERY = 100
# The scripts of a turn's result and stream, sent as written (their ARGV has no clock).
TURN_SCRIPTS = LuaScripts("worker.fleet", "lua/turns", library=False)


@dataclass(frozen=True, slots=True)
class TurnKeys:
    """Every key the worker side writes, under one namespace."""

    namespace: str = "relevo"

    def result(self, turn_id: str) -> str:
        return f"{{{self.namespace}}}:turn:{turn_id}:result"

    def claim(self, turn_id: str) -> str:
        return f"{{{self.namespace}}}:turn:{turn_id}:claim"

    def chunks(self, turn_id: str) -> str:
        return f"{{{self.namespace}}}:turn:{turn_id}:chunks"

    @property
    def sent(self) -> str:
        return f"{{{self.namespace}}}:turns:sent"

    @property
    def payloads(self) -> str:
        return f"{{{self.namespace}}}:turns:payloads"

    @property
    def recent(self) -> str:
        return f"{{{self.namespace}}}:turns:recent"

    @property
    def sweep(self) -> str:
        return f"{{{self.namespace}}}:turns:sweep"

    @property
    def workers(self) -> str:
        return f"{{{self.namespace}}}:workers"

    def worker(self, process: str) -> str:
        return f"{{{self.namespace}}}:worker:{process}"

    @property
    def offline_rooms(self) -> str:
        return f"{{{self.namespace}}}:offline_rooms"


def ask_known(pipe: Any, keys: TurnKeys, turn_id: str) -> None:
    """Queue on `pipe` (sync or async) the two commands `known_from` reads: the turn's sent
    record, then whether its result, claim or stream exists. In this order, no turn slips
    between them: a save writes the result before it drops the record."""
    pipe.zscore(keys.sent, turn_id)
    pipe.exists(keys.result(turn_id), keys.claim(turn_id), keys.chunks(turn_id))


def known_from(replies: list[Any]) -> bool:
    """Whether the replies to `ask_known` know the turn (queued, running or finished)."""
    recorded, found = replies
    return recorded is not None or int(found) > 0


class TurnStore:
    """Results, claims and content streams of turns, on Redis."""

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "relevo",
        ttl_s: int = 86_400,
        pipes: AutoPipeline | None = None,
    ) -> None:
        """`pipes`: share a process's `AutoPipeline` (on `redis`) so that the claims and
        saves of concurrent turns ride the guard's round trips."""
        self.redis = redis
        self.keys = TurnKeys(namespace)
        self.ttl_s = ttl_s
        self.pipes = pipes or AutoPipeline(redis)
        self._saves = 0

    async def result(self, turn_id: str) -> TurnResult | None:
        """The turn's saved result, if it finished; `Unreadable` if this release cannot
        read the one saved."""
        raw = await self.redis.get(self.keys.result(turn_id))
        return None if raw is None else read_result(raw, turn_id)

    async def known(self, turn_id: str) -> bool:
        """Whether the turn was sent and its traces are kept: recorded as sent (queued),
        claimed (running), streaming or finished (`ask_known`). One round trip."""
        slot = self.pipes.open()
        ask_known(slot.pipe, self.keys, turn_id)
        return known_from(_raised(await slot.send()))

    async def claim(self, turn_id: str, holder: str, ttl_s: float) -> bool | TurnResult:
        """Take the right to run the turn now (True), unless it already ran (its result;
        `Unreadable` if this release cannot read it) or another delivery is running it
        (False). One round trip."""
        claim = self.keys.claim(turn_id)
        slot = self.pipes.open()
        slot.pipe.get(self.keys.result(turn_id))
        # execute_command: redis-py 8's `set` checks its arguments for ~10 us a call.
        slot.pipe.execute_command("SET", claim, holder, "NX", "PX", max(1, int(ttl_s * 1000)))
        raw, claimed = _raised(await slot.send())
        if raw is None:
            return bool(claimed)
        if claimed:
            await self.redis.delete(claim)
        return read_result(cast(bytes, raw), turn_id)

    async def save(self, result: TurnResult, *, end_stream: bool = False) -> TurnResult:
        """Save the result unless one was saved first; return the one that stands
        (`Unreadable` if this release cannot read it).

        `end_stream`: end the turn's stream in the same round trip, before the result,
        so that no reader sees a run's text end without its result following.
        """
        slot = self.pipes.open()
        # The SET's reply is the first but for the end marker's.
        at = self._append_on(slot.pipe, result.turn_id, {"end": "1"}) if end_stream else 0
        # NX GET: the reply is the result saved first (it stands), or nil (ours does).
        key, saved = self.keys.result(result.turn_id), result.model_dump_json()
        slot.pipe.execute_command("SET", key, saved, "NX", "GET", "EX", self.ttl_s, get=True)
        # For those who wait on it (Celery's AsyncResult.get): a result's key is its channel.
        # A later delivery that lost publishes its own result too, but a waiter has it after
        # the first one's: it subscribes before it reads, and each save writes first.
        slot.pipe.execute_command("PUBLISH", key, saved)
        slot.pipe.delete(self.keys.claim(result.turn_id))
        # Answered: the sweeper has nothing to re-send (the record goes with the save).
        self._forget_on(slot.pipe, [result.turn_id])
        # Wall-clock ms, as the sent record: the hosts of a fleet share a clock (NTP).
        # execute_command: redis-py's helpers check their arguments for ~10 us a call.
        recent = self.keys.recent
        slot.pipe.execute_command("ZADD", recent, _now_ms(), result.turn_id)
        self._saves += 1
        if self._saves % _TRIM_EVERY == 1:  # the first save too: the key gets its TTL
            slot.pipe.execute_command("ZREMRANGEBYRANK", recent, 0, -RECENT_TURNS - 1)
            slot.pipe.execute_command("EXPIRE", recent, self.ttl_s)
        standing = _raised(await slot.send())[at]
        return result if standing is None else read_result(cast(bytes, standing), result.turn_id)

    async def recent(self, since_ms: int, count: int = RECENT_TURNS) -> list[TurnResult]:
        """The newest results saved since `since_ms` (ms since the epoch), newest first;
        turns whose result expired, or that this release cannot read, are left out."""
        ids = await self.redis.zrange(
            self.keys.recent, "+inf", since_ms, desc=True, byscore=True, offset=0, num=count
        )
        if not ids:
            return []
        names = [text(i) for i in ids]
        raws = await self.redis.mget([self.keys.result(n) for n in names])
        found = []
        for turn_id, raw in zip(names, raws, strict=True):
            if raw is None:
                continue  # expired since the list was read
            try:
                found.append(read_result(raw, turn_id))
            except Unreadable as exc:
                log_unreadable(exc)
        return found

    async def forget(self, *turn_ids: str) -> None:
        """Drop the turns' sent records: they will not be re-sent."""
        slot = self.pipes.open()
        self._forget_on(slot.pipe, list(turn_ids))
        _raised(await slot.send())

    def _forget_on(self, pipe: Any, turn_ids: list[str]) -> None:
        pipe.zrem(self.keys.sent, *turn_ids)
        pipe.hdel(self.keys.payloads, *turn_ids)

    async def replace(self, result: TurnResult, *, end_stream: bool = False) -> TurnResult:
        """Save the result over a "rejected" one (or none); return the one that stands.

        For replays of turns the kill switch refused: a result with any other status is
        an answer (an earlier replay's), and stands (`Unreadable` if this release cannot
        read it). `end_stream`: end the turn's stream first, in the same script (as `save`).
        """
        turn_id = result.turn_id
        keys = [self.keys.result(turn_id), *([self.keys.chunks(turn_id)] if end_stream else [])]
        args: list[str | int] = [result.model_dump_json(), self.ttl_s, _CHUNK_MAXLEN]
        standing = await TURN_SCRIPTS.call(self.redis, "replace", keys, args)
        return result if standing is None else read_result(standing, turn_id)

    async def wait_result(self, turn_id: str, timeout_s: float) -> TurnResult | None:
        """Wait for another delivery's result, or for its claim to lapse (None);
        `Unreadable` if this release cannot read the result."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        while loop.time() < until:
            slot = self.pipes.open()
            slot.pipe.get(self.keys.result(turn_id))
            slot.pipe.exists(self.keys.claim(turn_id))
            raw, claimed = _raised(await slot.send())
            if raw is not None:
                return read_result(cast(bytes, raw), turn_id)
            if not claimed:
                # Released just now: its result, if it saved one, was written first.
                return await self.result(turn_id)
            await asyncio.sleep(0.1)
        return None

    @asynccontextmanager
    async def streaming(self, turn_id: str, holder: str) -> AsyncIterator[Callable[[str], None]]:
        """A run's text, published in order as it comes: call what this yields with each
        piece (it never blocks the run). The run starts the stream over
        (`start_stream`); what is still queued is published before the block ends. Redis
        failing stops the publishing, not the run (logged); the end marker is the caller's
        (it goes with the result)."""
        chunks: asyncio.Queue[str | None] = asyncio.Queue()
        publisher = asyncio.create_task(self._publish_all(turn_id, holder, chunks))
        try:
            yield chunks.put_nowait
        finally:
            chunks.put_nowait(None)
            await publisher

    async def _publish_all(
        self, turn_id: str, holder: str, chunks: asyncio.Queue[str | None]
    ) -> None:
        # One publisher per run keeps the pieces in order without slowing the run.
        try:
            await self.start_stream(turn_id, holder)
            while (piece := await chunks.get()) is not None:
                await self.publish(turn_id, piece)
        except STORE_DOWN as exc:
            log.warning("turn.chunks_not_published", turn_id=turn_id, error=type(exc).__name__)

    async def start_stream(self, turn_id: str, holder: str) -> None:
        """Begin a run's text: what an earlier run of the turn streamed is dropped."""
        keys, args = [self.keys.chunks(turn_id)], [holder, self.ttl_s, STREAM_SCHEMA]
        await TURN_SCRIPTS.call(self.redis, "start", keys, args)

    async def publish(self, turn_id: str, text: str) -> None:
        slot = self.pipes.open()
        self._append_on(slot.pipe, turn_id, {"text": text})
        _raised(await slot.send())

    async def end_stream(self, turn_id: str) -> None:
        slot = self.pipes.open()
        self._append_on(slot.pipe, turn_id, {"end": "1"})
        _raised(await slot.send())

    def _append_on(self, pipe: Any, turn_id: str, entry: dict[Any, Any]) -> int:
        """Queue the entry on `pipe`; how many commands that took."""
        key = self.keys.chunks(turn_id)
        pipe.xadd(key, entry, maxlen=_CHUNK_MAXLEN, approximate=True)
        pipe.expire(key, self.ttl_s)
        return 2

    async def tail(self, turn_id: str, *, block_ms: int = 1000) -> AsyncIterator[str]:
        """The turn's content as it arrives, from the start, until its end marker;
        `StreamRestarted` if the turn runs again after some of it was read, `Unreadable`
        for a piece this release cannot read."""
        reader = StreamReader(self.redis, self.keys.chunks(turn_id))
        while not reader.ended:
            for event in await reader.read(block_ms):
                if event.readable(turn_id).restart:
                    raise StreamRestarted(turn_id)
                yield event.text


def _raised(replies: list[object]) -> list[object]:
    """The replies, raising the first that is an error (the runner falls back on it)."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    return replies


def _now_ms() -> int:
    return int(time.time() * 1000)
