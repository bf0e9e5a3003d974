"""The operator's kill switch: one Redis key saying who turned the fleet off, why and when."""

from __future__ import annotations

from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from breakers.keys import Keys
from breakers.rediskit import Parse, raise_if_error, text, unavailable_as_error
from breakers.scripts import SCRIPTS
from breakers.state import KillSwitchState

__all__ = ["KillSwitch"]

log = structlog.get_logger("relevo.breakers")
_MAX_TEXT = 1000


def _check_text(value: str, what: str) -> str:
    if not value.strip() or len(value) > _MAX_TEXT:
        raise ValueError(f"{what} must be 1-{_MAX_TEXT} characters, not blank")
    return value


class KillSwitch:
    """Only a person turns it on or off; nothing in the chain ever flips it.

    Its times are always the Redis server's: a person's action is never on a test clock.
    """

    def __init__(self, redis: Redis, *, namespace: str = "relevo") -> None:
        self._redis = redis
        self._keys = Keys(namespace)

    async def on(self, who: str, reason: str) -> KillSwitchState:
        """Turn the kill switch on (or replace its reason); return its new state."""
        _check_text(who, "who")
        _check_text(reason, "reason")

        def queue(pipe: Pipeline) -> Parse[int]:
            SCRIPTS.queue(pipe, "kill_on", [self._keys.kill], [who, reason])

            async def parse(reply: object) -> int:
                return int(raise_if_error(reply))

            return parse

        async with unavailable_as_error("kill switch on"):
            since_ms = await SCRIPTS.run(self._redis, queue)
        log.warning("breakers.kill_switch_on", who=who, reason=reason, since_ms=since_ms)
        return KillSwitchState(who, reason, since_ms)

    async def off(self, who: str) -> KillSwitchState | None:
        """Turn the kill switch off; return the state it had (None if it was already off)."""
        _check_text(who, "who")

        def queue(pipe: Pipeline) -> Parse[KillSwitchState | None]:
            SCRIPTS.queue(pipe, "kill_off", [self._keys.kill, self._keys.epoch], [who])

            async def parse(reply: object) -> KillSwitchState | None:
                row: list[Any] = raise_if_error(reply)
                return KillSwitchState(text(row[0]), text(row[1]), int(row[2])) if row else None

            return parse

        async with unavailable_as_error("kill switch off"):
            before = await SCRIPTS.run(self._redis, queue)
        log.warning("breakers.kill_switch_off", who=who, was_on=before is not None)
        return before

    async def status(self) -> KillSwitchState | None:
        """The kill switch while on, else None."""
        async with unavailable_as_error("kill switch status"):
            who, why, since = await self._redis.hmget(self._keys.kill, ["who", "why", "since_ms"])
        if who is None:
            return None
        return KillSwitchState(text(who), text(why or b""), int(since or 0))
