"""A streaming turn's text in Redis, and the one way it is read.

Each run of a streaming turn writes to the turn's stream (`TurnKeys.chunks`):

    run   <holder>  text ""   a run begins; the entries before it, of an earlier run whose
          schema_version <n>  worker died, are trimmed away with it (one script)
    text  <piece>             the next piece of text
    end   1                   the run ended; written in the round trip that saves the result

A turn runs again when its worker dies mid-run (redelivery), and the rerun's text is
the result's. `StreamReader` follows the entries by id and hands out `StreamEvent`s:
the text, and a restart when a run begins after text was handed out (the reader drops
what it showed). A reader starting after the rerun began sees only the rerun's text.
A held turn replayed (`relevo replay-held`) runs after its "rejected" result was
stored: its run marker without an end yet (`StreamReader.running`) tells a reader
that the stored result is about to be replaced.
Entry ids survive a reconnect and a rerun: a reader resuming after an id of an earlier
run meets the new run's marker (a restart) first, since ids only grow. The marker's
empty `text` keeps a reader that does not know it (an older release) reading on.

The marker says the run's schema version (`worker.fleet.schema`; none: version 1). A
reader hands out no text of a run written in a version above its own (one event with a
`problem` stands for the run), and marks a piece of text that is not UTF-8 with one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from breakers.schema import SCHEMA_FIELD, ReadProblem, version_problem
from rediskit import text
from worker.fleet.errors import Unreadable
from worker.fleet.schema import STREAM_SCHEMA

__all__ = ["StreamEvent", "StreamReader"]

_BATCH = 100
_VERSION = SCHEMA_FIELD.encode()
_NOT_UTF8 = ReadProblem("a piece of its text is not UTF-8")


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A piece of the turn's text, or (`restart`) the news that the text starts over.

    `id` is the entry's: a reader resumes after it (Server-Sent Events' Last-Event-ID).
    `problem`: the entry could not be read as written (a handle's reader gets `Unreadable`
    instead); `text` is then what a person may still look at, bad bytes as U+FFFD.
    """

    id: str
    text: str = ""
    restart: bool = False
    problem: ReadProblem | None = None

    def readable(self, turn_id: str) -> StreamEvent:
        """This event, or `Unreadable` (naming the turn) if it stands for an unread entry."""
        if self.problem is not None:
            raise Unreadable("stream", self.problem, turn_id=turn_id)
        return self


class StreamReader:
    """One reader's place in a turn's stream; `after` resumes after that entry id."""

    def __init__(self, redis: Redis, key: str, *, after: str | None = None) -> None:
        self.redis = redis
        self.key = key
        self.last = after or "0-0"
        self.ended = False
        # A run's marker was read and its end not yet: a result stored now is not its own.
        self.running = False
        # Whether text went out since the run now read began: a resumed reader may have
        # shown some of an earlier run, so a new run's marker tells it to start over.
        self._shown = after is not None
        # A run this release cannot read: its text is passed over.
        self._foreign = False

    async def read(self, block_ms: int | None = None) -> list[StreamEvent]:
        """What came after the last entry read, waiting up to `block_ms` for something
        (None: no wait); empty at the end marker (`ended`)."""
        if self.ended:
            return []
        batches: Any = await self.redis.xread({self.key: self.last}, block=block_ms, count=_BATCH)
        return self.take([entry for _, entries in batches or () for entry in entries])

    def take(self, entries: list[tuple[Any, dict[bytes, Any]]]) -> list[StreamEvent]:
        """The events of `entries` (the next ones, as XREAD or XRANGE return them), up to
        the end marker."""
        events: list[StreamEvent] = []
        for entry_id, fields in entries:
            self.last = text(entry_id)
            if b"end" in fields:
                self.ended, self.running = True, False
                break
            if b"run" in fields:
                if self._shown:
                    events.append(StreamEvent(self.last, restart=True))
                self._shown, self.running = False, True
                problem = version_problem(fields.get(_VERSION), STREAM_SCHEMA)
                self._foreign = problem is not None
                if problem is not None:
                    events.append(StreamEvent(self.last, problem=problem))
            elif b"text" in fields and not self._foreign:
                events.append(_text_event(self.last, fields[b"text"]))
                self._shown = True
        return events

    async def drain(self) -> list[StreamEvent]:
        """Everything written so far (up to the end marker), without waiting."""
        events: list[StreamEvent] = []
        while not self.ended:
            before = self.last
            events += await self.read()
            if self.last == before:
                break
        return events


def _text_event(entry_id: str, raw: bytes) -> StreamEvent:
    try:
        return StreamEvent(entry_id, bytes(raw).decode())
    except UnicodeDecodeError:
        return StreamEvent(entry_id, bytes(raw).decode(errors="replace"), problem=_NOT_UTF8)
