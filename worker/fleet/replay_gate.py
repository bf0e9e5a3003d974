"""What a replay of held turns asks before it runs one: is it still wanted, and may its
tenant run one more turn now.

A held turn whose deadline passed while it was held (its hold time plus its `deadline_s`)
or whose caller is known gone (nothing in the turn store says it was sent: an agent
framework's turn run in its own process, which took the refusal and moved on, or one
whose rejection expired) is set aside, unless the operator asked for such turns too
(`include_expired`). One that runs holds a lease of its tenant's `max_in_flight`,
fleet-wide, beside the turns the workers run; a tenant's turns take their leases in the
order they were held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import TYPE_CHECKING

import breakers
from worker.types import TurnRequest

if TYPE_CHECKING:
    from worker.fleet.fairqueue import FairQueue
    from worker.fleet.turnstore import TurnStore

__all__ = ["Place", "ReplayGate", "SetAside"]

# How often a turn whose tenant is at max_in_flight looks for a lease again.
_POLL_S = 0.2
# How long a replayed turn's lease holds: it is given back when the run ends, and a
# replay killed meanwhile leaves it to run out.
_LEASE_S = 300.0


class SetAside(StrEnum):
    """Why a held turn was not run."""

    EXPIRED = "expired"  # its deadline passed while it was held
    CALLER_GONE = "caller_gone"  # nothing in the turn store says it was sent


class Place:
    """A turn's place in its tenant's line: it takes a lease after the turn before it did."""

    def __init__(self, before: asyncio.Future[None] | None) -> None:
        self.before = before
        self.mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def comes(self) -> None:
        if self.before is not None:
            await asyncio.shield(self.before)

    def leave(self) -> None:
        """The turns after it may go (it has its lease, or will not run)."""
        if not self.mine.done():
            self.mine.set_result(None)


class ReplayGate:
    """The checks and the leases of one replay."""

    def __init__(
        self, store: TurnStore, fair: FairQueue | None, *, include_expired: bool = False
    ) -> None:
        """`fair`: the fleet's fair queue, whose leases the replay takes (None: fairness
        is off, no lease); `include_expired`: run turns whose deadline passed or whose
        caller is gone too."""
        self.store = store
        self.fair = fair
        self.include_expired = include_expired
        self._last: dict[str, Place] = {}

    def line_up(self, request: TurnRequest) -> Place:
        """The turn's place in its tenant's line; call in the order the turns were held,
        before anything awaits, and `leave` it whatever becomes of the turn."""
        last = self._last.get(request.tenant_id)
        place = Place(None if last is None else last.mine)
        self._last[request.tenant_id] = place
        return place

    async def set_aside(self, turn: breakers.HeldTurn, request: TurnRequest) -> SetAside | None:
        """Why the turn is not to run (None: it runs)."""
        if self.include_expired:
            return None
        if turn.held_at_ms + request.deadline_s * 1000 < time.time() * 1000:
            return SetAside.EXPIRED
        if not await self.store.known(request.turn_id):
            return SetAside.CALLER_GONE
        return None

    @asynccontextmanager
    async def leased(self, request: TurnRequest, place: Place) -> AsyncIterator[None]:
        """Hold a lease of the turn's tenant while the block runs, taken after the turns
        before it in its tenant's line took theirs."""
        await place.comes()
        if self.fair is None:
            place.leave()
            yield
            return
        tenant, turn_id = request.tenant_id, request.turn_id
        # Polled: a lease comes back through a script, with no event this process sees.
        taken = await self.fair.lease(tenant, turn_id, hold_s=_LEASE_S)
        while not taken:
            await asyncio.sleep(_POLL_S)
            taken = await self.fair.lease(tenant, turn_id, hold_s=_LEASE_S)
        place.leave()
        try:
            yield
        finally:
            await self.fair.release(tenant, turn_id)
