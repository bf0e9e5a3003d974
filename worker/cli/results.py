"""`relevo result` and `relevo tail`: what became of a turn, and its content as it streams.

relevo result TURN_ID [--config FILE]
relevo tail TURN_ID [--config FILE] [--idle-timeout S]

`tail` reads the turn's content stream (`worker.fleet.streams`) from the start and ends
when the stream does, when the turn's result is stored without one (a turn that did not
stream, or whose stream was cut), or after `--idle-timeout` seconds with nothing new. A
tail started after a turn began running again (its worker died) prints the new run's
text alone; one that had printed the earlier run's says so on stderr and prints the new
run's text from a new line. Both answer at once for a turn id nothing knows
(`TurnStore.known`: never sent, or its result expired).

What this release cannot read (a result or a run's text a newer release wrote, a damaged
result, a piece of text that is not UTF-8) is said on stderr, and the command exits 9
(`EXIT_UNREADABLE`); `tail` prints such a piece with U+FFFD for its bad bytes (a newer
release's run: nothing) and reads on.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from enum import Enum
from typing import Any

from redis.asyncio import Redis

from worker.cli.common import (
    EXIT_BY_STATUS,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    OperatorError,
    note,
    operator_command,
    operator_redis,
    write_out,
)
from worker.cli.parsing import Commands, add_command, add_redis_options, positive_seconds
from worker.fleet.errors import UnknownTurn
from worker.fleet.operator_config import redis_settings
from worker.fleet.streams import StreamEvent, StreamReader
from worker.fleet.turnstore import TurnKeys, TurnStore, ask_known, known_from
from worker.observability.visible import json_visible
from worker.types import TurnResult

__all__ = ["IDLE_TIMEOUT_S", "register"]

# Longer than a provider's first-byte timeout plus a fallback: a live turn can be quiet
# that long between two pieces of content.
IDLE_TIMEOUT_S = 60.0
_READ_MS = 1000  # each wait for content, below the operator client's read timeout


def register(commands: Commands) -> None:
    """Add `result` and `tail` to the `relevo` parser."""
    result = add_command(
        commands,
        "result",
        "print a finished turn's result",
        exits=(
            *(EXIT_OK, EXIT_USAGE, EXIT_DEGRADED, EXIT_FAILED, EXIT_REJECTED, EXIT_UNAVAILABLE),
            EXIT_TIMEOUT,
            EXIT_UNREADABLE,
        ),
        details="Prints the result JSON and exits with the turn's status. Fields this "
        "release does not know are left out.",
        notes={
            EXIT_USAGE: "bad usage, or an unknown turn id (never sent, or its result expired)",
            EXIT_TIMEOUT: "the turn has not finished yet (queued or running)",
            EXIT_UNREADABLE: "a result is stored, but this release cannot read it (a newer "
            "release wrote it: that release's relevo result prints it; or it is damaged); "
            "stderr says which",
        },
    )
    result.add_argument("turn_id", metavar="TURN_ID")
    add_redis_options(result, json=False)
    result.set_defaults(func=operator_command(_result))

    tail = add_command(
        commands,
        "tail",
        "print a streaming turn's content as it arrives",
        exits=(EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_UNREADABLE),
        details="Ends when the turn's stream ends, or when its result is stored without one "
        "(it did not stream: `relevo result` prints it). Gives up after --idle-timeout "
        "seconds with no new content. A turn that runs again (its worker died) starts its "
        "text over on a new line, with a note on stderr.",
        notes={
            EXIT_OK: "the turn ended (its status: relevo result TURN_ID)",
            EXIT_USAGE: "bad usage, or an unknown turn id (never sent, or its result "
            "expired), at once",
            EXIT_TIMEOUT: "gave up: nothing new for --idle-timeout seconds (the turn may "
            "still finish: relevo result TURN_ID)",
            EXIT_UNREADABLE: "the turn ended, but some of its text could not be read (not "
            "UTF-8: printed with U+FFFD for its bad bytes; or a run a newer release "
            "streamed), said on stderr",
        },
    )
    tail.add_argument("turn_id", metavar="TURN_ID")
    tail.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up after this long with nothing new (default {IDLE_TIMEOUT_S:g})",
    )
    add_redis_options(tail, json=False)
    tail.set_defaults(func=operator_command(_tail))


async def _result(args: Any) -> int:
    where = redis_settings(args.config)
    async with operator_redis(where) as redis:
        store = TurnStore(redis, namespace=where.namespace)
        found: TurnResult | None = await store.result(args.turn_id)
        known = found is not None or await store.known(args.turn_id)
    if not known:
        raise UnknownTurn(args.turn_id)
    if found is None:
        raise OperatorError(
            f"turn {args.turn_id!r} has not finished (queued or running); "
            f"`relevo tail {args.turn_id}` follows it",
            EXIT_TIMEOUT,
        )
    print(json_visible(found.to_json()))
    return EXIT_BY_STATUS.get(found.status, EXIT_FAILED)


class _End(Enum):
    STREAM = "stream"  # the end marker: every piece of content was printed
    RESULT = "result"  # a result is stored and no end marker follows
    IDLE = "idle"  # nothing new for the idle timeout
    UNKNOWN = "unknown"  # nothing knows the turn id (`TurnStore.known`)


@dataclass
class _Follow:
    """One turn's stream, read from the start."""

    redis: Redis
    keys: TurnKeys
    turn_id: str
    printed: bool = False
    restarts: int = 0
    unreadable: int = 0

    def __post_init__(self) -> None:
        self.reader = StreamReader(self.redis, self.keys.chunks(self.turn_id))

    @property
    def last(self) -> str:
        return self.reader.last

    async def read(self, block_ms: int | None) -> bool:
        """Print what arrived after the last entry read (waiting up to `block_ms`); True at
        the end marker."""
        self._print(await self.reader.read(block_ms))
        return self.reader.ended

    async def drain(self) -> bool:
        """Print everything written so far; True if it ends with the end marker."""
        self._print(await self.reader.drain())
        return self.reader.ended

    def _print(self, events: list[StreamEvent]) -> None:
        for event in events:
            if event.restart:
                # Printed text cannot be taken back: the new run's starts on a line of its own.
                self.restarts += 1
                write_out("\n")
                note(
                    f"turn {self.turn_id!r} runs again (its worker was lost): its text "
                    "starts over on the next line"
                )
                self.printed = False
                continue
            if event.problem is not None:
                self.unreadable += 1
                note(f"could not read a piece of turn {self.turn_id!r}'s text: {event.problem.why}")
            write_out(event.text)
            self.printed = True

    async def known(self) -> tuple[bool, bool]:
        """(whether a result is stored, whether anything knows the turn id)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self.keys.result(self.turn_id))
        ask_known(pipe, self.keys, self.turn_id)
        stored, *known = await pipe.execute()
        return bool(stored), bool(stored) or known_from(known)


async def _follow(stream: _Follow, idle_s: float) -> _End:
    """Print the turn's content until its stream or the turn ends, or `idle_s` of quiet."""
    loop = asyncio.get_running_loop()
    quiet_since, first = loop.time(), True
    while (left := idle_s - (loop.time() - quiet_since)) > 0:
        before = stream.last
        # Asked before each wait, so a turn that already ended ends the tail at once.
        stored, known = await stream.known()
        if stored:
            # The end marker, if the turn streamed, was written before its result; a held
            # turn's replay streams after its "rejected" result: read on while it runs.
            if await stream.drain():
                return _End.STREAM
            if not stream.reader.running:
                return _End.RESULT
        if first and not known:
            return _End.UNKNOWN
        first = False
        if await stream.read(max(1, min(_READ_MS, round(left * 1000)))):
            return _End.STREAM
        if stream.last != before:
            quiet_since = loop.time()
    return _End.IDLE


async def _tail(args: argparse.Namespace) -> int:
    where = redis_settings(args.config)
    turn_id: str = args.turn_id
    async with operator_redis(where) as redis:
        reader = _Follow(redis, TurnKeys(where.namespace), turn_id)
        end = await _follow(reader, args.idle_timeout)
    if reader.printed:
        write_out("\n")
    if end is _End.RESULT:
        what = "its stream was cut short" if reader.printed else "it did not stream"
        note(f"turn {turn_id!r} ended ({what}); `relevo result {turn_id}` prints its result")
    elif end is _End.UNKNOWN:
        raise UnknownTurn(turn_id)
    elif end is _End.IDLE:
        raise OperatorError(
            f"gave up on turn {turn_id!r}: nothing new for {args.idle_timeout:g}s "
            f"(--idle-timeout); it may still finish: `relevo result {turn_id}`",
            EXIT_TIMEOUT,
        )
    return EXIT_UNREADABLE if reader.unreadable else EXIT_OK
