"""What a confirmation shows: the state now beside the state after, read before anything changes.

`preview` reads with the viewer's client and may refuse the action outright (a breaker
scope the configured chain does not have), so that a refused request leaves no line in
the audit trail. An empty fallback cap keeps the tenant's cap: removing one takes the
form's explicit "remove the cap" box.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from redis.asyncio import Redis

import breakers
from budgets import format_micros as usd
from worker.console.actions import Action
from worker.fleet.heartbeat import read_heartbeats, unreached
from worker.fleet.operations import OperatorFleet
from worker.fleet.turnstore import TurnKeys

__all__ = ["Preview", "preview"]


@dataclass(frozen=True)
class Preview:
    """The action as it will be done, what holds now, what will hold after, and warnings."""

    action: Action
    now: str
    after: str
    warnings: list[str]


def _limits_text(daily: int, monthly: int, cap: int | None, overdraft: int) -> str:
    shown = "none" if cap is None else usd(cap)
    return (
        f"daily {usd(daily)}, monthly {usd(monthly)}, fallback cap {shown}, "
        f"overdraft {usd(overdraft)}"
    )


async def preview(fleet: OperatorFleet, client: Redis, action: Action) -> Preview:
    """The confirmation of `action`; raises `InputError` for one that cannot be done."""
    namespace = fleet.config.redis.namespace
    if action.kind == "breaker":
        ops = breakers.Operators(fleet.store(client))
        known = await ops.scopes()
        warnings = [] if action.target in known else [fleet.accept_unknown(action.target, known)]
        report = await ops.report()
        state = next((s.state for s in report.scopes if s.scope == action.target), None)
        now = f"{action.target}: {state or 'never used'}"
        return Preview(action, now, action.summary, warnings)
    if action.kind == "kill_switch":
        switch = await breakers.KillSwitch(client, namespace=namespace).status()
        now = "off" if switch is None else f"ON by {switch.who}: {switch.reason}"
        if switch is not None and switch.unreadable is not None:
            now += f" (unreadable: {switch.unreadable})"
        warnings = []
        if action.fields["mode"] == "on":  # who would go on running turns regardless
            beats = await read_heartbeats(client, TurnKeys(namespace))
            warnings = unreached(beats.beats, int(time.time() * 1000)).lines()
        return Preview(action, f"kill switch {now}", action.summary, warnings)
    if action.kind == "replay":
        held = await breakers.HeldTurns(client, namespace=namespace).count()
        return Preview(action, f"{held} held turn(s)", action.summary, [])
    if action.kind == "gone":
        return Preview(action, f"{action.target} marked gone", action.summary, [])
    return await _limits(fleet, client, action)


async def _limits(fleet: OperatorFleet, client: Redis, action: Action) -> Preview:
    ledger = fleet.ledger(client)
    values = dict(action.values)
    fields = dict(action.fields)
    if action.target not in await ledger.tenants():
        now = "no limits and no spend yet"
        warnings = [f"no tenant {action.target!r} has limits or spend yet: check the id for a typo"]
    else:
        report = await ledger.report(action.target)
        limits, warnings = report.limits, []
        now = _limits_text(
            limits.daily_micros,
            limits.monthly_micros,
            limits.fallback_cap_micros,
            limits.overdraft_micros,
        )
        if values["cap"] is None and not values.get("remove_cap"):
            values["cap"] = limits.fallback_cap_micros  # empty keeps the cap
            if values["cap"] is not None:
                fields["fallback_cap"] = usd(values["cap"]).removeprefix("$")
    after = _limits_text(values["daily"], values["monthly"], values["cap"], values["overdraft"])
    summary = f"Set {action.target}'s limits: {after}"
    done = replace(action, values=values, fields=fields, summary=summary)
    return Preview(done, now, after, warnings)
