"""The fleet's stored turns as the console reads them: one bad item never costs a page.

A result a newer worker wrote (a field this release does not know), a corrupt value or
a stream chunk that is not UTF-8 is shown as unreadable, and the page around it still
renders. The workers keep their strict reads (`TurnStore`); only the console forgives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from redis.asyncio import Redis

from breakers.rediskit import text
from worker.fleet.turnstore import RECENT_TURNS, TurnKeys
from worker.types import TurnResult

__all__ = ["Recent", "Stored", "read_chunks", "read_recent", "read_result"]

log = structlog.get_logger("relevo.console")


@dataclass(frozen=True)
class Stored:
    """One stored result: parsed, or None with `unreadable` set."""

    turn_id: str
    result: TurnResult | None
    unreadable: bool = False


@dataclass(frozen=True)
class Recent:
    """The window's readable results, newest first, and the ids of those that were not."""

    results: list[TurnResult]
    unreadable: list[str]


def _parse(turn_id: str, raw: Any) -> Stored:
    try:
        return Stored(turn_id, TurnResult.model_validate_json(raw))
    except (ValidationError, ValueError) as exc:
        log.warning("console.unreadable_result", turn_id=turn_id, error=type(exc).__name__)
        return Stored(turn_id, None, unreadable=True)


async def read_result(client: Redis, keys: TurnKeys, turn_id: str) -> Stored:
    """The turn's result (None while it has none), or unreadable."""
    raw = await client.get(keys.result(turn_id))
    return Stored(turn_id, None) if raw is None else _parse(turn_id, raw)


async def read_recent(
    client: Redis, keys: TurnKeys, window_s: float, count: int = RECENT_TURNS
) -> Recent:
    """The results saved in the last `window_s` seconds; expired ones are left out."""
    since_ms = int((time.time() - window_s) * 1000)
    ids = await client.zrange(
        keys.recent, "+inf", since_ms, desc=True, byscore=True, offset=0, num=count
    )
    if not ids:
        return Recent([], [])
    names = [text(i) for i in ids]
    raws = await client.mget([keys.result(n) for n in names])
    stored = [_parse(n, raw) for n, raw in zip(names, raws, strict=True) if raw is not None]
    return Recent(
        [s.result for s in stored if s.result is not None],
        [s.turn_id for s in stored if s.unreadable],
    )


def read_chunks(entries: list[tuple[Any, dict[bytes, Any]]]) -> str:
    """A stream's text; bytes that are not UTF-8 show as U+FFFD rather than failing."""
    return "".join(bytes(f[b"text"]).decode(errors="replace") for _, f in entries if b"text" in f)
