"""Turns held while the kill switch is on, kept in a Redis stream for a later replay.

Taking is read-and-delete in one Lua script: each held turn is handed to exactly one
replayer. A replayer that dies between taking and resubmitting loses what it took, so
replay takes small batches and resubmits each turn to the durable task queue at once.

Each entry says its schema version (`breakers.schema`): an entry a newer release held,
or one that is damaged, comes with the `problem` that keeps this release from reading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from breakers.keys import Keys, validate_name
from breakers.schema import SCHEMA_FIELD, ReadProblem, read_entry
from breakers.scripts import SCRIPTS
from rediskit import Parse, raise_if_error, store_errors, text

__all__ = ["HELD_SCHEMA", "HeldTurn", "HeldTurns"]

# The entry (turn_id, payload) and its payload, a turn request as JSON.
HELD_SCHEMA = 1


@dataclass(frozen=True)
class HeldTurn:
    """One held turn: its stream id (which encodes when it was held), turn id and payload;
    the schema version it was held with, and why this release cannot read it, if so."""

    id: str
    turn_id: str
    payload: str
    version: int = HELD_SCHEMA
    problem: ReadProblem | None = None

    @property
    def held_at_ms(self) -> int:
        """Redis server time (ms) the turn was held."""
        return int(self.id.split("-", 1)[0])


def _turn(entry_id: object, flat: list[Any] | dict[Any, Any]) -> HeldTurn:
    entry = read_entry(flat, HELD_SCHEMA)
    fields, problem = entry.fields, entry.problem
    if problem is None and not {"turn_id", "payload"} <= fields.keys():
        problem = ReadProblem("it has no turn_id or no payload")
    turn_id, payload = fields.get("turn_id", ""), fields.get("payload", "")
    return HeldTurn(text(entry_id), turn_id, payload, entry.version, problem)


class HeldTurns:
    """The stream of held turns (no TTL: they wait for a person; capped at `max_len`)."""

    def __init__(self, redis: Redis, *, namespace: str = "relevo", max_len: int = 100_000) -> None:
        self._redis = redis
        self._keys = Keys(namespace)
        self._max_len = max_len

    async def hold(self, turn_id: str, payload: str, *, version: int = HELD_SCHEMA) -> str:
        """Keep a turn for replay; return its stream id. `version`: the schema version the
        payload was written with (a turn held again keeps its own)."""
        validate_name(turn_id, "turn_id")
        async with store_errors("hold turn"):
            entry_id = await self._redis.xadd(
                self._keys.held,
                {"turn_id": turn_id, "payload": payload, SCHEMA_FIELD: version},
                maxlen=self._max_len,
                approximate=True,
            )
        return text(entry_id)

    async def held(self, limit: int = 100) -> list[HeldTurn]:
        """The oldest held turns, without taking them."""
        async with store_errors("list held turns"):
            rows = await self._redis.xrange(self._keys.held, count=limit)
        return [_turn(entry_id, fields) for entry_id, fields in rows or [] if fields]

    async def count(self) -> int:
        """How many turns are held."""
        async with store_errors("count held turns"):
            return int(await self._redis.xlen(self._keys.held))

    async def take(self, limit: int = 10) -> list[HeldTurn]:
        """Remove and return up to `limit` of the oldest held turns; no one else gets them."""

        def queue(pipe: Pipeline) -> Parse[list[HeldTurn]]:
            SCRIPTS.queue(pipe, "take_held", [self._keys.held], [limit])

            async def parse(reply: object) -> list[HeldTurn]:
                row: list[Any] = raise_if_error(reply)
                return [_turn(row[i], row[i + 1]) for i in range(0, len(row), 2)]

            return parse

        async with store_errors("take held turns"):
            return await SCRIPTS.run(self._redis, queue)
