"""What this process last saw of the fleet store: the kill switch, when, and the store's epoch.

`ResilientBreakers` looks at the store at least every `rejoin_check_s` (a timer, and every
turn's check), so while the store answers this memory is never older than one look
period plus the store's timeout (`fresh_s`). It serves twice:

- While the store cannot be reached, turns see the kill switch as it was at the last look.
- When the store comes back empty (its epoch, a random id it keeps, is gone or new), this
  process logs `breakers.store_reset` as an error and, if its memory shows the switch on,
  turns it back on for the fleet (`KillSwitch.restore`). Only a current memory is
  restored: one confirmed within `fresh_s` of the store's last answer before it went
  away or came back empty. The store refuses the restore once a person turned the switch
  off in the new epoch, and past `2 * fresh_s` after the epoch's birth (by then every
  process that was looking has had its turn; a later one was cut off and knows less).
  A restore Redis does not answer (it went away again) is tried again, with jittered
  backoff up to `fresh_s`, until the store answers or the process stops; each failure is
  logged once (`breakers.kill_switch_restore_failed`). Meanwhile checks see the switch
  being restored, so no turn runs, and the window is stretched by the time spent
  retrying: the restore was decided in time, only its answer is late.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable

import structlog

from breakers.killswitch import KillSwitch
from breakers.state import FleetState, KillSwitchState
from breakers.store import FleetBreakers
from rediskit import DOWN, backoff_s, raise_if_forbidden

__all__ = ["FleetMemory"]

# The first wait before a restore is tried again; each wait doubles, up to `fresh_s`.
_RETRY_FIRST_S = 0.05
log = structlog.get_logger("relevo.breakers")
# What the fleet store holds, and so loses with its data.
STORE_HOLDS = (
    "breakers and cooldowns",
    "exhausted and gone marks",
    "budgets' spend and holds",
    "held turns",
    "the kill switch",
)


class FleetMemory:
    """The switch as last seen (`kill`), when that look was asked (`seen_at`, monotonic),
    and the store's epoch. `on_reset` is called each time the store lost its data."""

    def __init__(
        self, fleet: FleetBreakers, *, fresh_s: float, on_reset: Callable[[], None]
    ) -> None:
        self.fleet = fleet
        self.fresh_s = fresh_s
        self.kill: KillSwitchState | None = None
        self.seen_at = -math.inf
        self._on_reset = on_reset
        # When the first question asked after the last look went unanswered, if one did.
        self._unanswered: float | None = None
        self._epoch: str | None = None
        self._restore: _Restore | None = None  # the current epoch's, if any
        # What else the store held, for the reset's log line and the epoch's note (the
        # worker says: the turns queued, the shares, the results, when they live here).
        self.also_lost: tuple[str, ...] = ()
        self._noting: asyncio.Future[None] | None = None

    def lost(self, asked_at: float) -> None:
        """A question asked at `asked_at` got no answer: the store was last seen before."""
        if asked_at >= self.seen_at and (self._unanswered is None or asked_at < self._unanswered):
            self._unanswered = asked_at

    async def mind(self, state: FleetState, asked_at: float) -> FleetState:
        """Remember what the fleet showed to a check asked at `asked_at`; notice a store
        that lost its data since the last look.

        A check read before the restore landed (the same batch as the one that noticed
        the reset, or the round trip after) shows the new epoch, or none, with the switch
        off and nobody having turned it off: it gets the restored switch, so no turn runs
        in between. Once a person turns the switch off, the epoch says so.
        """
        epoch = state.epoch
        try:
            if not epoch:
                epoch = await self.fleet.start_epoch()
            if self._epoch is not None and epoch != self._epoch:
                self._epoch = epoch  # before any await: one process notices a reset once
                self._store_was_reset(state, epoch, self.kill, self._look_age_s(asked_at))
            unrestored = state.kill_switch is None and not state.epoch_off_by
            if self._restore is not None and unrestored and state.epoch in ("", self._epoch):
                restored = await self._restored()
                if restored is not None:
                    state = dataclasses.replace(state, kill_switch=restored)
        except DOWN as exc:
            raise_if_forbidden(exc)
            return state  # the next check tries again
        self._epoch = epoch
        if asked_at >= self.seen_at:  # an answer to an older question is no newer look
            self.kill, self.seen_at = state.kill_switch, asked_at
            if self._unanswered is not None and self._unanswered <= asked_at:
                self._unanswered = None
        return state

    def _look_age_s(self, asked_at: float) -> float:
        """How old the last look was when the store was last seen: when it first left a
        question unanswered since, else now (`asked_at`, the question that found it empty)."""
        until = asked_at if self._unanswered is None else self._unanswered
        return max(0.0, until - self.seen_at)

    def _store_was_reset(
        self, state: FleetState, epoch: str, last: KillSwitchState | None, age_s: float
    ) -> None:
        """Count and log the reset; turn the kill switch back on if the last look showed
        it on and was current (`_restore_until_answered`, in the background)."""
        seen = last if age_s <= self.fresh_s else None
        self._on_reset()
        restore = seen is not None and state.kill_switch is None and not state.epoch_off_by
        lost = [*STORE_HOLDS, *self.also_lost]
        log.error(
            "breakers.store_reset",
            detail=f"the store lost its data: {', '.join(lost)}",
            lost=lost,
            kill_switch_seen_on=last is not None,
            look_age_s=round(age_s, 3) if math.isfinite(age_s) else None,
            restoring=restore,
        )
        self._noting = asyncio.ensure_future(self._note(epoch, lost))
        self.close()  # an earlier epoch's restore: this reset supersedes it
        if not restore or seen is None:
            return
        tried = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(self._restore_until_answered(seen, epoch, tried))
        self._restore = _Restore(seen, tried, task)

    async def _note(self, epoch: str, lost: list[str]) -> None:
        """Say in the new epoch what was lost, for operators (the console); best effort."""
        try:
            await self.fleet.note_reset(epoch, lost)
        except DOWN as exc:
            log.warning("breakers.store_reset_not_noted", error=type(exc).__name__)

    async def _restored(self) -> KillSwitchState | None:
        """The restore's answer; while the store has not given one (a try failed), the
        switch being restored: no turn runs before the store says otherwise."""
        restore = self._restore
        if restore is None:
            return None
        await asyncio.shield(restore.tried)  # one round trip at most, as any check
        if restore.task.done() and not restore.task.cancelled():
            return restore.task.result()
        return restore.seen

    async def _restore_until_answered(
        self, seen: KillSwitchState, epoch: str, tried: asyncio.Future[None]
    ) -> KillSwitchState | None:
        """`KillSwitch.restore` until the store answers, with jittered backoff."""
        switch = KillSwitch(self.fleet.redis, namespace=self.fleet.keys.namespace)
        started = time.monotonic()
        attempt = 0
        try:
            while True:
                attempt += 1
                late_by_s = time.monotonic() - started
                try:
                    return await switch.restore(seen, epoch, within_s=2 * self.fresh_s + late_by_s)
                except Exception as exc:  # Redis away again (or worse): try again, say so once
                    wait_s = backoff_s(attempt - 1, first_s=_RETRY_FIRST_S, cap_s=self.fresh_s)
                    log.warning(
                        "breakers.kill_switch_restore_failed",
                        attempt=attempt,
                        error=type(exc).__name__,
                        retry_in_s=round(wait_s, 3),
                        who=seen.who,
                    )
                if not tried.done():
                    tried.set_result(None)
                await asyncio.sleep(wait_s)
        finally:
            if not tried.done():
                tried.set_result(None)

    def close(self) -> None:
        """Stop a restore under way (the process stops, or the store was reset again)."""
        if self._restore is not None:
            self._restore.task.cancel()
        self._restore = None


@dataclasses.dataclass(frozen=True, slots=True)
class _Restore:
    """A restore under way: the switch it puts back, the end of its first try, its task."""

    seen: KillSwitchState
    tried: asyncio.Future[None]
    task: asyncio.Task[KillSwitchState | None]
