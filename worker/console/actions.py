"""What an operator may do from the console, checked as the `relevo` commands check it.

A form becomes an `Action` (`parse_action`: every field validated, an error naming the
field), is shown back for confirmation, then carried out (`Actions.perform`) with the
operator's Redis client, between two entries of the audit trail. The work itself is
`worker.fleet.operations` and `worker.fleet.replay`, as for the commands.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from redis.asyncio import Redis

import breakers
import budgets
from budgets import format_micros as usd
from worker.console.auth import Principal
from worker.errors import InputError
from worker.fleet.audit import Actor, AuditTrail
from worker.fleet.operations import (
    BREAKER_ACTIONS,
    OperatorFleet,
    check_limits,
    check_scope,
    check_text,
    switch_settle_s,
)
from worker.fleet.replay import ReplaySummary, replay_fleet

__all__ = ["KINDS", "Action", "Actions", "parse_action"]

log = structlog.get_logger("relevo.console")

KINDS = ("breaker", "gone", "kill_switch", "replay", "limits")
_MAX_FIELD = 1000


@dataclass(frozen=True)
class Action:
    """A checked request to change the fleet: what the confirmation page shows."""

    kind: str
    name: str  # e.g. "breaker.open", the audit trail's "action"
    target: str
    reason: str
    summary: str  # one sentence for people
    fields: Mapping[str, str]  # what the confirmation form posts again
    values: Mapping[str, Any] = field(default_factory=dict)  # the parsed values


def _field(form: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise InputError(f"{name}: must be text")
    if len(value) > _MAX_FIELD:
        raise InputError(f"{name}: at most {_MAX_FIELD} characters")
    # Not stripped: a name is checked exactly as typed, as the commands check it.
    if required and not value.strip():
        raise InputError(f"{name}: required")
    return value


def _seconds(text: str) -> float | None:
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise InputError(f"seconds: {text!r} is not a number") from None
    if not math.isfinite(seconds) or not 0 < seconds <= 30 * 86_400:
        raise InputError("seconds: more than 0 and at most 30 days")
    return seconds


def _dollars(name: str, text: str) -> int:
    try:
        return budgets.parse_dollars(text)
    except budgets.InvalidAmountError as exc:
        raise InputError(f"{name}: {exc}") from None


def parse_action(kind: str, form: Mapping[str, Any]) -> tuple[Action, str | None]:
    """The action the form asks for, and a warning to show with it; raises on bad input."""
    if kind not in KINDS:
        raise InputError(f"unknown action {kind!r}")
    reason = check_text(_field(form, "reason"), "reason")
    if kind == "breaker":
        op = _field(form, "op")
        if op not in BREAKER_ACTIONS:
            raise InputError(f"op: one of {', '.join(BREAKER_ACTIONS)}")
        scope = check_scope(_field(form, "scope"))
        seconds = (
            _seconds(_field(form, "seconds", required=False).strip()) if op == "open" else None
        )
        how = "" if op != "open" else (" until closed" if seconds is None else f" for {seconds:g}s")
        fields = {"op": op, "scope": scope, "seconds": "" if seconds is None else f"{seconds:g}"}
        action = Action(
            kind, f"breaker.{op}", scope, reason, f"{op.capitalize()} breaker {scope}{how}",
            {**fields, "reason": reason}, {"op": op, "seconds": seconds},
        )  # fmt: skip
        return action, None
    if kind == "gone":
        account = breakers.validate_name(_field(form, "provider"), "provider")
        model = breakers.validate_name(_field(form, "model"), "model")
        pair = f"{account}|{model}"
        what = f"Clear the gone mark of {pair}: the fleet calls the model again"
        fields = {"provider": account, "model": model, "reason": reason}
        named = {"account": account, "model": model}
        return Action(kind, "breakers.clear_gone", pair, reason, what, fields, named), None
    if kind == "kill_switch":
        mode = _field(form, "mode")
        if mode not in ("on", "off"):
            raise InputError("mode: on or off")
        what = (
            "Turn the kill switch ON: no turn calls any provider, turns are held"
            if mode == "on"
            else "Turn the kill switch OFF: turns run again"
        )
        fields = {"mode": mode, "reason": reason}
        return Action(kind, f"kill_switch.{mode}", "fleet", reason, what, fields), None
    if kind == "replay":
        what = "Replay the turns held while the kill switch was on"
        return Action(kind, "replay_held", "fleet", reason, what, {"reason": reason}), None
    tenant = budgets.check_tenant(_field(form, "tenant"))
    daily = _dollars("daily", _field(form, "daily"))
    monthly = _dollars("monthly", _field(form, "monthly"))
    cap_text = _field(form, "fallback_cap", required=False)
    remove_cap = form.get("remove_cap") == "yes"
    if remove_cap and cap_text.strip():
        raise InputError("fallback_cap: leave it empty to remove the cap")
    # Empty without "remove": the tenant's cap stays (`preview` reads it).
    cap = None if not cap_text.strip() else _dollars("fallback_cap", cap_text)
    overdraft_text = _field(form, "overdraft", required=False)
    overdraft = _dollars("overdraft", overdraft_text if overdraft_text.strip() else "0")
    warning = check_limits(daily, monthly, overdraft)
    shown_cap = "none" if cap is None else usd(cap)
    what = (
        f"Set {tenant}'s limits: daily {usd(daily)}, monthly {usd(monthly)}, "
        f"fallback cap {shown_cap}, overdraft {usd(overdraft)}"
    )
    fields = {
        "tenant": tenant,
        "daily": usd(daily).removeprefix("$"),
        "monthly": usd(monthly).removeprefix("$"),
        "fallback_cap": "" if cap is None else usd(cap).removeprefix("$"),
        "overdraft": usd(overdraft).removeprefix("$"),
        "remove_cap": "yes" if remove_cap else "",
        "reason": reason,
    }
    values = {
        "daily": daily,
        "monthly": monthly,
        "cap": cap,
        "overdraft": overdraft,
        "remove_cap": remove_cap,
    }
    return Action(kind, "budgets.set", tenant, reason, what, fields, values), warning


class Actions:
    """Carries out actions with the operator's client; one replay at a time, in the background."""

    def __init__(self, fleet: OperatorFleet, client: Redis) -> None:
        self.fleet = fleet
        self.client = client
        self.namespace = fleet.config.redis.namespace
        self.audit = AuditTrail(client, namespace=self.namespace)
        self.replay: asyncio.Task[None] | None = None

    @property
    def replaying(self) -> bool:
        return self.replay is not None and not self.replay.done()

    async def perform(self, action: Action, who: Principal, address: str) -> str:
        """Do `action` as `who` from `address`; the message to show. Errors are recorded,
        then raised."""
        actor = Actor(who.name, who.role.value, address)
        async with self.audit.acting(actor, action.name, action.target, action.reason) as done:
            done.text = await self._do(action, actor)
        return done.text

    async def _do(self, action: Action, who: Actor) -> str:
        switch = breakers.KillSwitch(self.client, namespace=self.namespace)
        if action.kind == "breaker":
            op, seconds = action.values["op"], action.values["seconds"]
            was, warning = await self.fleet.force(self.client, op, action.target, seconds)
            done = f"{action.target}: {was} -> {BREAKER_ACTIONS[op]}"
            return done if warning is None else f"{done} ({warning})"
        if action.kind == "gone":
            account, model = action.values["account"], action.values["model"]
            found = await self.fleet.clear_gone(self.client, account, model, who.name)
            return f"{action.target}: not marked gone" if found is None else "gone mark cleared"
        if action.name == "kill_switch.on":
            state = await switch.on(who.name, action.reason)
            # As `relevo kill-switch on`: done once every worker that reaches Redis saw it.
            await asyncio.sleep(switch_settle_s(self.fleet.config.redis))
            return f"kill switch ON by {state.who}: {state.reason}"
        if action.name == "kill_switch.off":
            before = await switch.off(who.name)
            settle_s = switch_settle_s(self.fleet.config.redis)
            again = await switch.confirm_off(who.name, after_s=settle_s)
            done = "kill switch was already off" if before is None else "kill switch OFF"
            return done if again is None else f"{done} (again: a worker had restored it)"
        if action.kind == "replay":
            return await self._start_replay(switch, who, action)
        limits = await self.fleet.ledger(self.client).set_limits(
            action.target,
            action.values["daily"],
            action.values["monthly"],
            action.values["cap"],
            action.values["overdraft"],
        )
        daily, monthly = usd(limits.daily_micros), usd(limits.monthly_micros)
        return f"{action.target}: daily {daily}, monthly {monthly}"

    async def _start_replay(self, switch: breakers.KillSwitch, who: Actor, action: Action) -> str:
        settings = self.fleet.settings
        if settings is None:
            raise InputError("replaying needs a configuration with a chain (--config FILE)")
        if self.replaying:
            raise InputError("a replay is already running")
        state = await switch.status()
        if state is not None:
            raise InputError(
                f"the kill switch is on ({state.reason}, by {state.who}); "
                "turn it off before replaying held turns"
            )
        held = await breakers.HeldTurns(self.client, namespace=self.namespace).count()

        async def run() -> None:
            summary = ReplaySummary()
            try:
                left = await replay_fleet(settings, self.client, lambda line: None, summary=summary)
                outcome = (
                    f"done: replayed {summary.replayed}, skipped {summary.skipped}, "
                    f"invalid {summary.invalid}, not stored {summary.not_stored}, "
                    f"a newer release's {summary.left_held}, {left} held"
                )
            except Exception as exc:  # the trail says how it ended, whatever ended it
                log.exception("console.replay_failed")
                outcome = f"failed: {type(exc).__name__}; replayed {summary.replayed}"
            await self.audit.record(who, "replay_held", "fleet", action.reason, outcome)

        self.replay = asyncio.create_task(run())
        return f"replay started: {held} held turn(s)"
