"""The operator's kill switch: one Redis key saying who turned the fleet off, why and when."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from breakers.errors import StoreUnavailableError
from breakers.keys import Keys
from breakers.scripts import SCRIPTS
from breakers.state import KillSwitchState
from rediskit import Parse, raise_if_error, store_errors, text

__all__ = ["KillSwitch", "stored_state"]

log = structlog.get_logger("relevo.breakers")
_MAX_TEXT = 1000
# The end of the reason of a switch a worker turned back on.
_RESTORED = " [restored: the store lost its data]"
# How long `off` keeps trying to confirm an off through a Redis restart or failover.
_CONFIRM_WITHIN_S = 30.0


def _check_text(value: str, what: str) -> str:
    if not value.strip() or len(value) > _MAX_TEXT:
        raise ValueError(f"{what} must be 1-{_MAX_TEXT} characters, not blank")
    return value


def _state(row: list[Any]) -> KillSwitchState | None:
    return stored_state(row[0], row[1], row[2]) if row else None


def stored_state(who: object, why: object, since: object) -> KillSwitchState:
    """The switch as stored: on whatever its fields hold, saying which it could not read."""
    bad = []
    fields = []
    for name, value in (("who", who), ("why", why or b"")):
        try:
            fields.append(text(value))
        except UnicodeDecodeError:
            fields.append(cast(bytes, value).decode("utf-8", "replace"))
            bad.append(f"{name} is not UTF-8")
    raw = since.decode("utf-8", "replace") if isinstance(since, bytes) else str(since or "0")
    since_ms = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 16 else 0
    if since_ms == 0 and raw != "0":
        bad.append(f"since_ms {raw[:40]!r} is not a time")
    return KillSwitchState(fields[0], fields[1], since_ms, "; ".join(bad) or None)


class KillSwitch:
    """Only a person turns it on or off; nothing in the chain ever flips it. A worker
    only restores it, as it last saw it, in a store that lost its data (`restore`).

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

        async with store_errors("kill switch on"):
            since_ms = await SCRIPTS.run(self._redis, queue)
        log.warning("breakers.kill_switch_on", who=who, reason=reason, since_ms=since_ms)
        return KillSwitchState(who, reason, since_ms)

    async def off(self, who: str) -> KillSwitchState | None:
        """Turn the kill switch off; return the state it had (None if it was already off).

        Then `confirm_off`: a worker may restore the switch from a look older than the off.
        """
        _check_text(who, "who")
        async with store_errors("kill switch off"):
            before = await self._off(who, confirming=False)
        log.warning("breakers.kill_switch_off", who=who, was_on=before is not None)
        return before

    async def confirm_off(self, who: str, *, after_s: float) -> KillSwitchState | None:
        """Wait `after_s` (the workers' look period plus the store's timeout: every worker
        has seen the switch off by then), then make sure the store still notes the off.

        If it lost its data in between, a worker may have restored the switch from its
        look before the off: that switch is turned off again and returned (None: nothing
        to undo). Redis not answering for 30 s raises `StoreUnavailableError`.
        """
        _check_text(who, "who")
        await asyncio.sleep(after_s)
        deadline = time.monotonic() + _CONFIRM_WITHIN_S
        while True:
            try:
                async with store_errors("kill switch off (confirming)"):
                    undone = await self._off(who, confirming=True)
                break
            except StoreUnavailableError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(after_s)
        if undone is not None:
            log.warning("breakers.kill_switch_off_again", who=who, restored_by_a_worker=True)
        return undone

    async def _off(self, who: str, *, confirming: bool) -> KillSwitchState | None:
        def queue(pipe: Pipeline) -> Parse[KillSwitchState | None]:
            keys = [self._keys.kill, self._keys.epoch]
            SCRIPTS.queue(pipe, "kill_off", keys, [who, "1" if confirming else ""])

            async def parse(reply: object) -> KillSwitchState | None:
                return _state(raise_if_error(reply))

            return parse

        return await SCRIPTS.run(self._redis, queue)

    async def status(self) -> KillSwitchState | None:
        """The kill switch while on, else None."""
        async with store_errors("kill switch status"):
            who, why, since = await self._redis.hmget(self._keys.kill, ["who", "why", "since_ms"])
        if who is None:
            return None
        return stored_state(who, why, since)

    async def restore(
        self, seen: KillSwitchState, epoch: str, *, within_s: float
    ) -> KillSwitchState | None:
        """Turn the switch back on as `seen`, in a store found empty with epoch `epoch`:
        the switch as it is now on, or None if it stays off (a person turned it off in
        this epoch, the epoch is older than `within_s` or is another one). Logged."""
        reason = seen.reason if seen.reason.endswith(_RESTORED) else seen.reason + _RESTORED
        within_ms = max(1, round(within_s * 1000))

        def queue(pipe: Pipeline) -> Parse[tuple[str, KillSwitchState | None]]:
            keys = [self._keys.kill, self._keys.epoch]
            SCRIPTS.queue(pipe, "kill_restore", keys, [epoch, seen.who, reason, within_ms])

            async def parse(reply: object) -> tuple[str, KillSwitchState | None]:
                row: list[Any] = raise_if_error(reply)
                outcome = text(row[0])
                return outcome, _state(row[1:]) if outcome in ("restored", "on") else None

            return parse

        async with store_errors("kill switch restore"):
            outcome, state = await SCRIPTS.run(self._redis, queue)
        if outcome == "restored":
            log.warning("breakers.kill_switch_restored", who=seen.who, reason=reason)
        elif state is None:
            log.warning("breakers.kill_switch_not_restored", who=seen.who, why=outcome)
        return state
