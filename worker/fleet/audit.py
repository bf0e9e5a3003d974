"""The operators' audit trail: who did what, from where, when and why; in Redis and the logs.

    {N}:console:audit   stream  who, role, address, action, target, reason, outcome
                                (the newest 10,000)

The console and the `relevo` commands both write it (`AuditTrail.acting`): each
action once before it is carried out ("requested") and again after ("done …" or
"refused: …"), so an action whose outcome never came back still shows. The stream is
the trail's memory, capped rather than expiring: the logs keep the rest. Redis times,
so every writer's entries sort on one clock. Each entry says its schema version
(`worker.fleet.schema`); one this release cannot read (a newer release's, or one with
bytes that are not UTF-8) is listed with its `problem`, its fields as far as they go.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
from redis.asyncio import Redis

from breakers.schema import SCHEMA_FIELD, ReadProblem, read_entry
from rediskit import text
from worker.fleet.schema import AUDIT_SCHEMA

__all__ = ["Actor", "AuditEntry", "AuditTrail", "Outcome", "cli_actor"]

log = structlog.get_logger("relevo.audit")
_MAXLEN = 10_000
_FIELDS = ("who", "role", "address", "action", "target", "reason", "outcome")


@dataclass(frozen=True)
class Actor:
    """Who acts: a name, a role ("operator", "cli"), and where from."""

    name: str
    role: str
    address: str


def cli_actor(who: str) -> Actor:
    """A person at a `relevo` command: the login and host they act from."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):  # no user name in a bare container
        login = "?"
    return Actor(who, "cli", f"{login}@{socket.gethostname()}")


@dataclass(frozen=True)
class AuditEntry:
    """One line of the trail."""

    at_ms: int
    who: str
    role: str
    address: str
    action: str
    target: str
    reason: str
    outcome: str
    problem: ReadProblem | None = None


@dataclass
class Outcome:
    """What the action came to, set by the block `acting` wraps."""

    text: str = "done"


class AuditTrail:
    """Append to and read the trail under one namespace."""

    def __init__(self, redis: Redis, *, namespace: str) -> None:
        self._redis = redis
        self.key = f"{{{namespace}}}:console:audit"

    async def record(self, who: Actor, action: str, target: str, reason: str, outcome: str) -> None:
        """Write one entry to Redis and to the log (the log first: it needs no server)."""
        fields: dict[Any, Any] = {
            "who": who.name,
            "role": who.role,
            "address": who.address,
            "action": action,
            "target": target,
            "reason": reason,
            "outcome": outcome,
        }
        log.info("audit.action", **fields)
        fields[SCHEMA_FIELD] = AUDIT_SCHEMA
        await self._redis.xadd(self.key, fields, maxlen=_MAXLEN, approximate=True)

    @asynccontextmanager
    async def acting(
        self, who: Actor, action: str, target: str, reason: str
    ) -> AsyncIterator[Outcome]:
        """ "requested" now; the block's `Outcome`, or "refused: …" if it raises, after."""
        await self.record(who, action, target, reason, "requested")
        outcome = Outcome()
        try:
            yield outcome
        except Exception as exc:
            await self.record(who, action, target, reason, f"refused: {exc}")
            raise
        await self.record(who, action, target, reason, outcome.text)

    async def latest(self, count: int = 20) -> list[AuditEntry]:
        """The newest entries, newest first."""
        rows: Any = await self._redis.xrevrange(self.key, count=count)
        entries = []
        for entry_id, raw in rows:
            entry = read_entry(raw, AUDIT_SCHEMA)
            at_ms = int(text(entry_id).split("-", 1)[0])
            shown = {f: entry.fields.get(f, "") for f in _FIELDS}
            entries.append(AuditEntry(at_ms, **shown, problem=entry.problem))
        return entries
