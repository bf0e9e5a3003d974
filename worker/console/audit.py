"""The console's audit trail: who did what, when and why, in Redis and in the logs.

    {N}:console:audit   stream  who, role, action, target, reason, outcome   (the newest 10,000)

Each action is written before it is carried out ("requested") and again after
("done" or "refused: ..."), so an action whose outcome never came back still shows.
The stream is the trail's memory, capped rather than expiring: the logs keep the
rest. Redis times, so every console's entries sort on one clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio import Redis

from breakers.rediskit import text
from worker.console.auth import Principal

__all__ = ["AuditEntry", "AuditTrail"]

log = structlog.get_logger("relevo.console")
_MAXLEN = 10_000
_FIELDS = ("who", "role", "action", "target", "reason", "outcome")


@dataclass(frozen=True)
class AuditEntry:
    """One line of the trail."""

    at_ms: int
    who: str
    role: str
    action: str
    target: str
    reason: str
    outcome: str


class AuditTrail:
    """Append to and read the trail under one namespace."""

    def __init__(self, redis: Redis, *, namespace: str) -> None:
        self._redis = redis
        self.key = f"{{{namespace}}}:console:audit"

    async def record(
        self, who: Principal, action: str, target: str, reason: str, outcome: str
    ) -> None:
        """Write one entry to Redis and to the log (the log first: it needs no server)."""
        fields: dict[Any, Any] = {
            "who": who.name,
            "role": who.role.value,
            "action": action,
            "target": target,
            "reason": reason,
            "outcome": outcome,
        }
        log.warning("console.action", **fields)
        await self._redis.xadd(self.key, fields, maxlen=_MAXLEN, approximate=True)

    async def latest(self, count: int = 20) -> list[AuditEntry]:
        """The newest entries, newest first."""
        rows: Any = await self._redis.xrevrange(self.key, count=count)
        entries = []
        for entry_id, raw in rows:
            values = {text(k): text(v) for k, v in raw.items()}
            at_ms = int(text(entry_id).split("-", 1)[0])
            entries.append(AuditEntry(at_ms, *(values.get(f, "") for f in _FIELDS)))
        return entries
