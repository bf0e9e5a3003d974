"""What every command shares: exit codes, errors, one Redis client per command, output.

Each operator command runs its own coroutine with `asyncio.run`, opens one Redis client
with the operator timeout and closes it before returning. Errors a user can act on
become one line on stderr and an exit status (the `EXIT_*` codes below, defined here
only: the help text lists them from `EXIT_MEANINGS`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from redis.asyncio import Redis
from rich.console import Console

import breakers
import budgets
from rediskit import FAILED, StoreError, refused
from worker.errors import ConfigError, InputError
from worker.fleet.errors import FleetUnavailable, UnknownTurn, write_refusal
from worker.fleet.operations import check_text
from worker.observability.redact import redact_url
from worker.observability.visible import json_visible
from worker.settings import RedisSettings, Settings, environment
from worker.turn.routing import check_chain
from worker.types import Status, TurnRequest

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_BY_STATUS",
    "EXIT_DEGRADED",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
    "EXIT_MEANINGS",
    "EXIT_OK",
    "EXIT_PORT",
    "EXIT_RECORDED",
    "EXIT_REFUSED",
    "EXIT_REJECTED",
    "EXIT_TIMEOUT",
    "EXIT_UNAVAILABLE",
    "EXIT_UNREADABLE",
    "EXIT_USAGE",
    "OPERATOR_TIMEOUT_S",
    "USAGE_ERRORS",
    "OperatorError",
    "OutputClosed",
    "console",
    "duration",
    "emit_json",
    "iso",
    "note",
    "operator_action",
    "operator_command",
    "operator_redis",
    "operator_who",
    "read_input",
    "redis_trouble",
    "utc",
    "warn",
    "write_out",
]

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # the demo: some turn got no result
EXIT_USAGE = 2  # bad arguments, input, configuration, name or amount
EXIT_DEGRADED = 3
EXIT_FAILED = 4
EXIT_REJECTED = 5
EXIT_UNAVAILABLE = 6  # Redis did not answer, or refused this client
EXIT_REFUSED = 7  # the kill switch is on
EXIT_TIMEOUT = 8  # gave up waiting; the turn may still finish
EXIT_UNREADABLE = 9  # something stored this release cannot read: newer, or damaged
EXIT_RECORDED = 10  # enqueue: the send failed after the turn was recorded; it will run
EXIT_PORT = 11  # a port to serve on could not be bound
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
EXIT_BROKEN_PIPE = 141  # stdout closed early (`| head`), as a shell reports SIGPIPE
EXIT_MEANINGS: Mapping[int, str] = MappingProxyType(
    {
        EXIT_OK: "ok, done",
        EXIT_INCOMPLETE: "demo: some turn got no result",
        EXIT_USAGE: "bad usage, input, configuration, name or amount; an unknown turn, "
        "scope or tenant",
        EXIT_DEGRADED: "the turn was degraded",
        EXIT_FAILED: "the turn failed",
        EXIT_REJECTED: "the turn was rejected",
        EXIT_UNAVAILABLE: "Redis did not answer, or refused this client",
        EXIT_REFUSED: "refused: the kill switch is on",
        EXIT_TIMEOUT: "gave up waiting, or not finished yet (the turn may still finish: "
        "relevo result ID)",
        EXIT_UNREADABLE: "this release cannot read what is stored (a turn's result, some of "
        "its stream, a held turn): a newer release wrote it (use that release's relevo), "
        "or it is damaged",
        EXIT_RECORDED: "enqueue: Redis failed after the turn was recorded: it will run (a "
        "worker sends it); its id is printed, keep it (relevo result ID)",
        EXIT_PORT: "a port to serve on could not be bound (in use, or not allowed)",
        EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
        EXIT_BROKEN_PIPE: "standard output was closed early (e.g. | head)",
    }
)
EXIT_BY_STATUS: Mapping[Status, int] = MappingProxyType(
    {
        Status.OK: EXIT_OK,
        Status.DEGRADED: EXIT_DEGRADED,
        Status.FAILED: EXIT_FAILED,
        Status.REJECTED: EXIT_REJECTED,
    }
)
# People wait for an answer; the workers' control path keeps its own short timeout.
OPERATOR_TIMEOUT_S = 2.0
# What a user typed wrong, whichever package noticed it: exit 2 and one line.
USAGE_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    InputError,
    breakers.BreakersError,
    budgets.BudgetError,
    UnknownTurn,
)


class OperatorError(Exception):
    """A one-line message for the user and the exit status that goes with it."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OutputClosed(Exception):
    """Standard output was closed by its reader.

    Not an `OSError`, so that no Redis error handler mistakes it for the store going away.
    """


def read_input(source: str) -> bytes:
    """The bytes of file `source`, or of standard input for ``-``."""
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read input {source}: {exc.strerror}") from None


def add_chain_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chain",
        metavar="NAME",
        help="the chain to run on ([chains.NAME] or default); unset, the request's own",
    )


def chosen_chain(request: TurnRequest, name: str | None, settings: Settings) -> TurnRequest:
    """`request` on chain `name` when given; `InputError` (exit 2) for a chain the
    configuration does not have."""
    if name is not None:  # a name the configuration has is a valid one
        request = request.model_copy(update={"chain": name})
    check_chain(request, settings.chain_names)
    return request


def redis_trouble(
    where: RedisSettings, exc: BaseException, hint: str = "", *, shared: bool = False
) -> OperatorError:
    """What went wrong with Redis, in one line without its password: exit 6.

    `shared`: the failure was the shared state's store's (`RedisSettings.shared_url`,
    when set), not the fleet's Redis (`url`): the message names the one that failed.
    """
    url, setting = _store(where, shared=shared)
    url = redact_url(url)
    if refused(exc) or (isinstance(exc, FleetUnavailable) and exc.refused):
        return OperatorError(
            f"Redis at {url} refused this client ({type(_cause(exc)).__name__}); "
            f"check the user and password in the URL and its ACL permissions{hint}",
            EXIT_UNAVAILABLE,
        )
    why = write_refusal(exc)
    if why is not None:
        return OperatorError(f"Redis at {url} refused the write ({why}){hint}", EXIT_UNAVAILABLE)
    return OperatorError(
        f"Redis at {url} did not answer ({type(_cause(exc)).__name__}); "
        f"check --config or {setting}{hint}",
        EXIT_UNAVAILABLE,
    )


def _store(where: RedisSettings, *, shared: bool) -> tuple[str, str]:
    """The URL of the Redis named, and the environment variable that sets it."""
    if shared and where.shared_url is not None:
        return where.shared_url, "RELEVO_REDIS__SHARED_URL"
    return where.url, "RELEVO_REDIS__URL"


def _cause(exc: BaseException) -> BaseException:
    """The Redis or socket error itself, under what breakers, kombu or the fleet made of it."""
    wrapped = isinstance(exc, FleetUnavailable | StoreError)
    if (wrapped or type(exc).__module__.startswith("kombu")) and exc.__cause__ is not None:
        return _cause(exc.__cause__)
    return exc


# The operator clients open in this task, innermost last: a failure is named after the
# one that fails a PING, whichever context manager the exception passes first.
_OPEN: ContextVar[tuple[tuple[Redis, bool], ...]] = ContextVar("relevo_operator", default=())


@asynccontextmanager
async def operator_redis(where: RedisSettings, *, shared: bool = False) -> AsyncIterator[Redis]:
    """A client with the operator timeout; Redis failures become `OperatorError`, exit 6.

    `shared`: on the shared state's store (breakers, budgets, kill switch), which may be
    a Redis Cluster of its own (`RedisSettings.shared_url`). The error names the store
    that failed, whichever of a command's clients its exception comes through."""
    timeout_s = max(where.timeout_s, OPERATOR_TIMEOUT_S)
    connect = where.connect_shared if shared else where.connect
    client = connect(timeout_s=timeout_s)
    opened = _OPEN.set((*_OPEN.get(), (client, shared)))
    try:
        yield client
    except FAILED as exc:
        raise redis_trouble(where, exc, shared=await _failing(shared)) from None
    finally:
        _OPEN.reset(opened)
        await client.aclose()


async def _failing(default: bool) -> bool:
    """Whether the store that failed is the shared state's: the first open client that
    does not answer now, innermost first; `default` if every one answers."""
    for client, shared in reversed(_OPEN.get()):
        try:
            await client.ping()
        except FAILED:
            return shared
    return default


Handler = Callable[[Any], Coroutine[Any, Any, int]]


def operator_command(handler: Handler) -> Callable[[Any], int]:
    """Run `handler(args)` on a fresh event loop (`main` turns its errors into one line)."""

    def run(args: Any) -> int:
        return asyncio.run(handler(args))

    return run


def operator_action(handler: Handler) -> Callable[[Any], int]:
    """`operator_command` for an action the audit trail records (`worker.fleet.audit`).

    Unless `--log-level` is given, only errors are logged: the trail keeps the action and
    stdout confirms it, so its log lines on the operator's terminal would only repeat them.
    """
    command = operator_command(handler)

    def run(args: Any) -> int:
        if getattr(args, "log_level", None) is None:
            from worker.observability.logs import configure_logging

            configure_logging(level="error")
        return command(args)

    return run


def operator_who(given: str | None) -> str:
    """Who acts, for the logs and the switch: `--who`, else $USER, else "operator"."""
    return check_text(given or environment.value("USER") or "operator", "--who")


def note(message: str) -> None:
    """One line on stderr for the user, beside the output."""
    print(f"relevo: {message}", file=sys.stderr)


def warn(message: str) -> None:
    """One line on stderr about something done anyway."""
    note(f"warning: {message}")


def write_out(text: str) -> None:
    """Write `text` to stdout now; a closed stdout raises `OutputClosed`."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed from None


def console() -> Console:
    """A console on the current stdout; wide when piped so tables do not wrap names."""
    out = sys.stdout
    # No colours and no markup: what a table shows is written out (`VisibleStream`), and a
    # name or a reason read from Redis is never taken for rich's markup.
    return Console(
        file=out,
        width=None if out.isatty() else 200,
        highlight=False,
        color_system=None,
        markup=False,
        emoji=False,
    )


def emit_json(value: object) -> None:
    """Print `value` as one JSON document."""
    print(json_visible(json.dumps(value, ensure_ascii=False)))


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as a UTC time, e.g. "2025-05-01 12:00:03Z"."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC, for JSON."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def duration(seconds: float) -> str:
    """Seconds for people: "-" for none, "pinned" for forever, else "12.3s"."""
    if math.isinf(seconds):
        return "pinned"
    if seconds <= 0:
        return "-"
    return f"{seconds:.1f}s"
