"""The offline allowance: what a tenant may start in one process while the budgets are away.

Redis holds every tenant's limits and spend; while it cannot be reached, a process still
lets a tenant start calls, within the least of two amounts: the allowance (`micros`, the
same for every tenant) and its share of the tenant's room, what the tenant's worst cases
could still take when this process last heard from Redis about it (every reservation's
reply says it), divided by the live worker `processes` (the fleet's heartbeats say how
many), since each of them may admit the same tenant offline. A tenant this process has
not heard about since it started gets the allowance's share (allowance / processes), so
the fleet's processes together start at most one allowance for it; one with no room
left starts nothing offline. The short rooms (those whose share is less than the
allowance) are shared with the other processes at each heartbeat: a process takes the
least of its own word and the fleet's, so a tenant that ran out of room in another
process is not given the allowance's share here.

A call counts at its worst case (`Charge.worst`) from its start to its end, then at its
cost until Redis has been told (the backlog's pending settlements), so calls in flight
at once cannot pass it together.
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.guard.backlog import Backlog
from worker.guard.protocol import Charge, Refusal

__all__ = ["OfflineAllowance"]

# The rooms of this many tenants at most, the least recently heard forgotten first: a
# forgotten tenant is one never heard about.
MAX_ROOMS = 100_000


class OfflineAllowance:
    """One process's allowance per tenant, `micros` each (0: no call starts offline),
    within its share of the room each tenant had when this process last heard from Redis."""

    def __init__(self, micros: int, backlog: Backlog) -> None:
        self.micros = micros
        self._backlog = backlog
        # The calls admitted offline and still running: by charge id, and their worst
        # cases summed per tenant.
        self._running: dict[str, Charge] = {}
        self._running_micros: dict[str, int] = {}
        self._rooms: dict[str, int] = {}
        # Rooms heard since the fleet was last told, and the short rooms it told back.
        self._told: dict[str, int] = {}
        self._fleet_rooms: dict[str, int] = {}
        self.processes = 1
        """The live worker processes that share a room (this one until it knows more)."""

    def heard(self, tenant: str, room_micros: int) -> None:
        """Redis said what `tenant`'s worst cases may still take (its latest word wins)."""
        for rooms in (self._rooms, self._told):
            rooms.pop(tenant, None)
            rooms[tenant] = room_micros
            if len(rooms) > MAX_ROOMS:
                del rooms[next(iter(rooms))]

    def room(self, tenant: str) -> int:
        """The most `tenant` may start offline in this process, before what it did start."""
        words = [rooms[tenant] for rooms in (self._rooms, self._fleet_rooms) if tenant in rooms]
        room = min(words) if words else self.micros
        return min(self.micros, room // max(1, self.processes))

    def short_below(self) -> int:
        """A room under this many micro-dollars leaves each process less than the
        allowance: the fleet's processes must know it."""
        return self.micros * max(1, self.processes)

    def take_heard(self) -> dict[str, int]:
        """The rooms heard since the last call (for the fleet's shared record)."""
        heard, self._told = self._told, {}
        return heard

    def untaken(self, heard: Mapping[str, int]) -> None:
        """`heard` did not reach the fleet: told again next time, unless heard since."""
        self._told = {**heard, **self._told}

    def fleet_knows(self, tenant: str) -> bool:
        """Whether the fleet's record had a short room for `tenant` when last read."""
        return tenant in self._fleet_rooms

    def fleet_said(self, rooms: Mapping[str, int]) -> None:
        """The short rooms the fleet's processes heard last (each tenant's latest word)."""
        self._fleet_rooms = dict(rooms)

    def admit(self, charge: Charge) -> Refusal | None:
        """Start the call only if its worst case fits what its tenant has left, counting
        the calls still running at their worst case and those ended at their cost."""
        tenant = charge.tenant
        spent = self._backlog.pending_micros(tenant) + self._running_micros.get(tenant, 0)
        if spent + charge.worst > self.room(tenant):
            return Refusal.BUDGET_UNREACHABLE
        self._running[charge.charge_id] = charge
        self._running_micros[tenant] = self._running_micros.get(tenant, 0) + charge.worst
        return None

    def ended(self, charge: Charge) -> None:
        """The call ended: from now on its cost counts, in the backlog, until Redis has it."""
        if self._running.pop(charge.charge_id, None) is None:
            return
        left = self._running_micros[charge.tenant] - charge.worst
        if left:
            self._running_micros[charge.tenant] = left
        else:
            del self._running_micros[charge.tenant]
