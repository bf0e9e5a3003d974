"""`relevo kill-switch on|off|status`: a person turns the whole fleet off, or on again.

While it is on no turn calls any provider; turns end `rejected` and are held for
`relevo replay-held`. Nothing but these commands ever flips it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import breakers
from worker.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    emit_json,
    iso,
    operator_action,
    operator_command,
    operator_redis,
    operator_who,
    utc,
)
from worker.cli.parsing import Commands, add_command, add_redis_options
from worker.fleet.audit import AuditTrail, cli_actor
from worker.fleet.heartbeat import read_heartbeats, unreached
from worker.fleet.operations import check_text, switch_settle_s
from worker.fleet.operator_config import redis_settings
from worker.fleet.turnstore import TurnKeys
from worker.observability.visible import one_line

__all__ = ["register"]


async def _kill_on(args: argparse.Namespace) -> int:
    who, reason = operator_who(args.who), check_text(args.reason, "--reason")
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        trail = AuditTrail(client, namespace=where.namespace)
        async with trail.acting(cli_actor(who), "kill_switch.on", "fleet", reason) as done:
            state = await breakers.KillSwitch(client, namespace=where.namespace).on(who, reason)
            done.text = f"kill switch ON by {state.who}: {state.reason}"
        by = f"{one_line(state.who)}: {one_line(state.reason)}"
        print(f"kill switch ON since {utc(state.since_ms)} by {by}")
        print("No turn calls any provider; turns are held for `relevo replay-held`.", flush=True)
        # Every turn reads the switch, but a worker whose read timed out decides on its
        # memory of the switch until its next look: by now every look has been taken.
        await asyncio.sleep(switch_settle_s(where))
        try:
            beats = await read_heartbeats(client, TurnKeys(where.namespace))
        except breakers.STORE_ERRORS:
            print("Could not read the workers' heartbeats: see the console's fleet page.")
            return 0
    print("Every worker process that reaches Redis has seen it.")
    for line in unreached(beats.beats, int(time.time() * 1000)).lines():
        print(line)
    return 0


async def _kill_off(args: argparse.Namespace) -> int:
    who = operator_who(args.who)
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        switch = breakers.KillSwitch(client, namespace=where.namespace)
        trail = AuditTrail(client, namespace=where.namespace)
        async with trail.acting(cli_actor(who), "kill_switch.off", "fleet", "") as done:
            before = await switch.off(who)
            done.text = "kill switch was already off" if before is None else "kill switch OFF"
        if before is None:
            print("kill switch was already off")
        else:
            since = utc(before.since_ms) if before.unreadable is None else "?"
            shown = f"on since {since} by {one_line(before.who)}: {one_line(before.reason)}"
            print(f"kill switch OFF ({shown})", flush=True)
        undone = await switch.confirm_off(who, after_s=switch_settle_s(where))
        held = await breakers.HeldTurns(client, namespace=where.namespace).count()
    if undone is not None:
        print(
            "The store lost its data meanwhile and a worker restored the switch from its "
            "look before the off: turned off again."
        )
    if held:
        print(f"{held} held turn(s): run `relevo replay-held --config FILE` to run them.")
    return 0


async def _kill_status(args: argparse.Namespace) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where, shared=True) as client:
        state = await breakers.KillSwitch(client, namespace=where.namespace).status()
        held = await breakers.HeldTurns(client, namespace=where.namespace).count()
    if args.json:
        on: dict[str, Any] = dict.fromkeys(("who", "reason", "since_ms", "since"))
        if state is not None:
            on = {"who": state.who, "reason": state.reason, "since_ms": state.since_ms}
            on["since"] = iso(state.since_ms) if state.unreadable is None else None
            on["unreadable"] = state.unreadable
        emit_json({"on": state is not None, **on, "held_turns": held})
    elif state is None:
        print(f"kill switch: off\nheld turns: {held}")
    else:
        since = utc(state.since_ms) if state.unreadable is None else "?"
        shown = "ON" if state.unreadable is None else f"on (unreadable: {state.unreadable})"
        print(
            f"kill switch: {shown}\nwho: {one_line(state.who)}\nwhy: {one_line(state.reason)}\n"
            f"since: {since}\nheld turns: {held}"
        )
    return 0


def register(commands: Commands) -> None:
    """Add `kill-switch` to the `relevo` command."""
    exits = (EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE)
    kill = add_command(
        commands,
        "kill-switch",
        "turn every turn in the fleet off, or on again",
        exits=exits,
        details="While it is on no turn calls any provider: turns end rejected and are "
        "held for `relevo replay-held`. Nothing but these commands ever flips it.",
    )
    add_redis_options(kill, json=False)
    modes = kill.add_subparsers(dest="mode", required=True, metavar="MODE")
    on = add_command(
        modes,
        "on",
        "stop every provider call fleet-wide; hold turns",
        exits=exits,
        details="Returns once every worker that reaches Redis has seen the switch on "
        "([redis] rejoin_check_s plus timeout_s later), and names the worker processes "
        "that could not reach Redis at their last heartbeat.",
    )
    on.add_argument(
        "--reason", required=True, help="why, for the workers' logs and the audit trail"
    )
    on.add_argument("--who", help="defaults to $USER")
    add_redis_options(on, json=False)
    on.set_defaults(func=operator_action(_kill_on))
    off = add_command(
        modes,
        "off",
        "let turns run again",
        exits=exits,
        details="Returns once every worker has seen the switch off ([redis] rejoin_check_s "
        "plus timeout_s later): if the store lost its data in between, a worker may have "
        "restored the switch from an older look, and it is turned off again.",
    )
    off.add_argument("--who", help="defaults to $USER")
    add_redis_options(off, json=False)
    off.set_defaults(func=operator_action(_kill_off))
    status = add_command(
        modes, "status", "who turned it on, why and since when (exit 0 either way)", exits=exits
    )
    add_redis_options(status)
    status.set_defaults(func=operator_command(_kill_status))
