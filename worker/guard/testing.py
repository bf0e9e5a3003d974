"""A guard for tests of code that runs turns: its fleet view is scripted, and it remembers.

    guard = ScriptedGuard({"gpt-5": Availability.OPEN}, refuse={"an": "unknown_tenant"})
    result = await Chain.from_settings(settings, client, guard=guard).run(request)
    assert [c.provider for c in guard.reserved] == [...]

No Redis, no shared state: what the fleet would say is given up front, and what the
chain told the guard is kept in lists to assert on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import budgets
from worker.guard.protocol import (
    Admission,
    Availability,
    Charge,
    Conclusion,
    FleetView,
    Refusal,
    Signal,
    Target,
)

__all__ = ["ScriptedGuard"]


class ScriptedGuard:
    """A `Guard` whose answers are given and whose calls are recorded.

    `availability` is keyed by provider model id (a target absent from it is
    available); `refuse` maps a provider name to the refusal every reservation on
    it gets; `kill_switch` is the reason the switch is on, if it is;
    `output_tokens` is what a model's attempts reserve (default: their `max_tokens`);
    `routes` are the tenants' routes.
    """

    def __init__(
        self,
        availability: Mapping[str, Availability] | None = None,
        *,
        kill_switch: str | None = None,
        probe_granted: bool = True,
        refuse: Mapping[str, str] | None = None,
        output_tokens: Mapping[str, int] | None = None,
        routes: Mapping[str, budgets.Route] | None = None,
    ) -> None:
        self.availability = dict(availability or {})
        self.kill_switch = kill_switch
        self.probe_granted = probe_granted
        self.refuse = {provider: Refusal(why) for provider, why in (refuse or {}).items()}
        self.sizes = dict(output_tokens or {})
        self.routes = dict(routes or {})
        self.reserved: list[Charge] = []
        """Every charge reserved, the first attempt's included, in order."""
        self.concluded: list[tuple[Target, Charge, Signal | None, int | None]] = []
        """(target, charge, signal, settled cost) per concluded or released charge."""
        self.probes: list[str] = []
        """Holders that asked for a half-open probe slot."""
        self.held: list[str] = []
        """Payloads of turns held because the kill switch was on."""
        self.handed_off: list[tuple[str, str]] = []
        """(reason, payload) of turns handed to people."""
        self._first_target: Target | None = None

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        view = FleetView(
            kill_switch=self.kill_switch,
            availability={
                t: self.availability[t.provider_model]
                for t in targets
                if t.provider_model in self.availability
            },
        )
        self._first_target = targets[0]
        if first is None:
            return Admission(view)
        self.reserved.append(first)
        return Admission(view, self.refuse.get(first.provider))

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> Refusal | None:
        if replacing is not None and self._first_target is not None:
            # The first attempt's reservation, given back unused (its model was skipped).
            self.concluded.append((self._first_target, replacing, None, None))
        self.reserved.append(charge)
        return self.refuse.get(charge.provider)

    def output_tokens(self, model: str, max_tokens: int) -> int:
        return min(max_tokens, self.sizes.get(model, max_tokens))

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        self.probes.append(holder)
        return self.probe_granted

    async def conclude(self, end: Conclusion) -> None:
        self.concluded.append((end.target, end.charge, end.signal, end.cost_micros))

    async def hold(self, turn_id: str, payload: str) -> None:
        self.held.append(payload)

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        self.handed_off.append((reason, payload))

    async def route(self, tenant: str) -> budgets.Route | None:
        return self.routes.get(tenant)
