"""Degraded turns handed to people: a capped Redis stream, newest last.

Each entry says its schema version (`breakers.schema`): one a newer release wrote, or
one that is damaged, is listed with the `problem` that keeps this release from reading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from breakers.schema import SCHEMA_FIELD, ReadProblem, read_entry
from budgets.errors import InvalidNameError
from budgets.keys import BudgetKeys, check_plain, check_tenant
from rediskit import text

__all__ = ["HANDOFF_SCHEMA", "Handoff", "Handoffs"]

MAX_PAYLOAD_CHARS = 256_000
# The entry (tenant, turn_id, reason, payload) and its payload, a turn request as JSON.
HANDOFF_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class Handoff:
    """One turn waiting for a person; `at_ms` is when it was pushed (server time, from the
    id); `problem` is why this release cannot read it, if so."""

    id: str
    tenant: str
    turn_id: str
    reason: str
    payload: str
    at_ms: int
    problem: ReadProblem | None = None


class Handoffs:
    """The hand-off stream under `namespace`, trimmed to about `maxlen` entries."""

    def __init__(self, redis: Redis, *, namespace: str = "relevo", maxlen: int = 10_000) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self._redis = redis
        self._key = BudgetKeys(namespace).handoffs()
        self.maxlen = maxlen

    async def push(self, tenant: str, turn_id: str, reason: str, payload: str) -> str:
        """Append a turn for people to pick up; returns the stream entry id."""
        check_tenant(tenant)
        check_plain("reason", reason)
        if not isinstance(turn_id, str) or not turn_id or len(turn_id) > 128:
            raise InvalidNameError("turn id must be a non-empty string of at most 128 characters")
        if len(payload) > MAX_PAYLOAD_CHARS:
            raise ValueError(f"payload is {len(payload)} characters; at most {MAX_PAYLOAD_CHARS}")
        fields: dict[Any, Any] = {
            "tenant": tenant,
            "turn_id": turn_id,
            "reason": reason,
            "payload": payload,
            SCHEMA_FIELD: HANDOFF_SCHEMA,
        }
        entry = await self._redis.xadd(self._key, fields, maxlen=self.maxlen, approximate=True)
        return text(entry)

    async def list(self, count: int = 50) -> list[Handoff]:
        """The newest `count` hand-offs, newest first."""
        if count < 1:
            raise ValueError("count must be at least 1")
        entries = await self._redis.xrevrange(self._key, count=count)
        result = []
        for entry_id, raw in entries or ():
            entry = read_entry(raw or {}, HANDOFF_SCHEMA)
            fields, ident = entry.fields, text(entry_id)
            result.append(
                Handoff(
                    id=ident,
                    tenant=fields.get("tenant", ""),
                    turn_id=fields.get("turn_id", ""),
                    reason=fields.get("reason", ""),
                    payload=fields.get("payload", ""),
                    at_ms=int(ident.split("-", 1)[0]),
                    problem=entry.problem,
                )
            )
        return result

    async def length(self) -> int:
        """How many hand-offs the stream holds."""
        return int(await self._redis.xlen(self._key))
