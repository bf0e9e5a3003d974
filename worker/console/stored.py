"""The fleet's stored turns as the console reads them: one bad item never costs a page.

Results are read as every reader reads them (`worker.fleet.schema.read_result`): fields
this release does not know are ignored; a result a newer release wrote in a schema
version above this one's, or a corrupt one, is shown as unreadable, and the page around
it still renders. So is a piece of a stream that is not UTF-8 (its bytes replaced).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis

from rediskit import text
from worker.fleet.errors import Unreadable
from worker.fleet.schema import log_unreadable
from worker.fleet.schema import read_result as read_stored_result
from worker.fleet.streams import StreamReader
from worker.fleet.turnstore import RECENT_TURNS, TurnKeys
from worker.types import TurnResult

__all__ = ["Recent", "Stored", "Streamed", "read_chunks", "read_recent", "read_result"]


@dataclass(frozen=True)
class Stored:
    """One stored result: parsed, or None with `unreadable` saying why not."""

    turn_id: str
    result: TurnResult | None
    unreadable: str | None = None


@dataclass(frozen=True)
class Recent:
    """The window's readable results, newest first, and the ids of those that were not."""

    results: list[TurnResult]
    unreadable: list[str]
    saved_ms: dict[str, int] = field(default_factory=dict)  # turn id -> when it was saved

    def since(self, since_ms: int) -> Recent:
        """Those saved at `since_ms` or later."""
        kept = {t: ms for t, ms in self.saved_ms.items() if ms >= since_ms}
        return Recent(
            [r for r in self.results if r.turn_id in kept],
            [t for t in self.unreadable if t in kept],
            kept,
        )


def _parse(turn_id: str, raw: Any) -> Stored:
    try:
        return Stored(turn_id, read_stored_result(raw, turn_id))
    except Unreadable as exc:
        log_unreadable(exc)
        return Stored(turn_id, None, unreadable=exc.why)


async def read_result(client: Redis, keys: TurnKeys, turn_id: str) -> Stored:
    """The turn's result (None while it has none), or unreadable."""
    raw = await client.get(keys.result(turn_id))
    return Stored(turn_id, None) if raw is None else _parse(turn_id, raw)


async def read_recent(
    client: Redis, keys: TurnKeys, window_s: float, count: int = RECENT_TURNS
) -> Recent:
    """The results saved in the last `window_s` seconds; expired ones are left out."""
    since_ms = int((time.time() - window_s) * 1000)
    scored = cast(
        "list[tuple[Any, float]]",
        await client.zrange(
            keys.recent,
            "+inf",
            since_ms,
            desc=True,
            byscore=True,
            offset=0,
            num=count,
            withscores=True,
        ),
    )
    if not scored:
        return Recent([], [])
    # A member that is not text (a hand edit) is no turn id: shown among the unreadable.
    saved_ms = {_shown(i): int(score) for i, score in scored}
    bad = [_shown(i) for i, _ in scored if not isinstance(i, str) and not _is_text(i)]
    names = [n for n in saved_ms if n not in bad]
    raws = await client.mget([keys.result(n) for n in names]) if names else []
    stored = [_parse(n, raw) for n, raw in zip(names, raws, strict=True) if raw is not None]
    return Recent(
        [s.result for s in stored if s.result is not None],
        [*bad, *(s.turn_id for s in stored if s.unreadable)],
        saved_ms,
    )


def _shown(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _is_text(value: object) -> bool:
    try:
        text(value)
    except UnicodeDecodeError:
        return False
    return True


@dataclass(frozen=True)
class Streamed:
    """A stream's text as far as this release reads it, and how many of its entries it
    could not read."""

    text: str
    unreadable: int = 0


def read_chunks(reader: StreamReader, entries: list[tuple[Any, dict[bytes, Any]]]) -> Streamed:
    """A stream's text, read from its start: a piece that is not UTF-8 shows its bad bytes
    as U+FFFD; a run a newer release streams is left out. Each is counted."""
    pieces: list[str] = []
    unreadable = 0
    for event in reader.take(entries):
        if event.restart:
            pieces.clear()
        unreadable += event.problem is not None
        pieces.append(event.text)
    return Streamed("".join(pieces), unreadable)
