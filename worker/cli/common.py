"""What every operator command shares: where Redis is, one client per command, errors, output.

Each command runs its own coroutine with `asyncio.run`, opens one Redis client with
the operator timeout and closes it before returning. Errors an operator can act on
become one line on stderr and an exit status (the `EXIT_*` codes below).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

from pydantic import ValidationError
from redis.asyncio import Redis
from rich.console import Console

import breakers
import budgets
from worker.errors import STORE_DOWN, STORE_REFUSED, ConfigError, InputError
from worker.observability.redact import redact_url
from worker.settings import RedisSettings, Settings, load_settings
from worker.types import Status

__all__ = [
    "EXIT_BY_STATUS",
    "EXIT_DEGRADED",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_REJECTED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "OPERATOR_TIMEOUT_S",
    "Commands",
    "OperatorError",
    "add_redis_options",
    "console",
    "duration",
    "emit_json",
    "iso",
    "operator_command",
    "operator_redis",
    "operator_settings",
    "positive_int",
    "read_input",
    "redis_settings",
    "utc",
]

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # the demo: some turn got no result
EXIT_USAGE = 2  # bad arguments, input, configuration, name or amount
EXIT_DEGRADED = 3
EXIT_FAILED = 4
EXIT_REJECTED = 5
EXIT_UNAVAILABLE = 6  # Redis did not answer
EXIT_REFUSED = 7  # the kill switch is on
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
# The `relevo` parser's subcommands, as argparse types them (not subscriptable at run time).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# What an operator typed wrong, whichever package noticed it.
_USAGE = (ConfigError, InputError, breakers.BreakersError, budgets.BudgetError)


class OperatorError(Exception):
    """A one-line message for the operator and the exit status that goes with it."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_input(source: str) -> bytes:
    """The bytes of file `source`, or of standard input for ``-``."""
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read input {source}: {exc.strerror}") from None


def redis_settings(config: str | None) -> RedisSettings:
    """The `[redis]` section of `config`, else `RELEVO_REDIS__URL` / `__NAMESPACE` or defaults."""
    if config is not None:
        return load_settings(config, require_secrets=False).redis
    env = {
        field: os.environ[f"RELEVO_REDIS__{field.upper()}"]
        for field in ("url", "namespace")
        if os.environ.get(f"RELEVO_REDIS__{field.upper()}")
    }
    try:
        return RedisSettings(**env)
    except ValidationError as exc:
        where = ", ".join(f"RELEVO_REDIS__{str(e['loc'][0]).upper()}" for e in exc.errors())
        raise ConfigError(f"{where}: not a valid Redis setting") from None


def operator_settings(config: str) -> Settings:
    """The whole configuration, for commands that run turns (API keys required)."""
    return load_settings(config)


@asynccontextmanager
async def operator_redis(where: RedisSettings) -> AsyncIterator[Redis]:
    """A client with the operator timeout; Redis failures become `OperatorError`, exit 6."""
    client = where.connect(timeout_s=max(where.timeout_s, OPERATOR_TIMEOUT_S))
    try:
        yield client
    except STORE_REFUSED as exc:
        raise OperatorError(
            f"Redis at {redact_url(where.url)} refused this client ({type(exc).__name__}); "
            "check the user and password in the URL and its ACL permissions",
            EXIT_UNAVAILABLE,
        ) from None
    except STORE_DOWN as exc:
        cause = exc.__cause__ if isinstance(exc, breakers.StoreUnavailableError) else exc
        raise OperatorError(
            f"Redis at {redact_url(where.url)} did not answer ({type(cause or exc).__name__}); "
            "check --config or RELEVO_REDIS__URL",
            EXIT_UNAVAILABLE,
        ) from None
    finally:
        await client.aclose()


Handler = Callable[[Any], Coroutine[Any, Any, int]]


def operator_command(handler: Handler) -> Callable[[Any], int]:
    """Run `handler(args)` on a fresh event loop; expected errors become one stderr line."""

    def run(args: Any) -> int:
        try:
            return asyncio.run(handler(args))
        except OperatorError as exc:
            return _fail(str(exc), exc.exit_code)
        except _USAGE as exc:
            return _fail(str(exc), EXIT_USAGE)

    return run


def _fail(message: str, code: int) -> int:
    print(f"relevo: {message}", file=sys.stderr)
    return code


def console() -> Console:
    """A console on the current stdout; wide when piped so tables do not wrap names."""
    out = sys.stdout
    return Console(file=out, width=None if out.isatty() else 200, highlight=False)


def emit_json(value: object) -> None:
    """Print `value` as one JSON document."""
    print(json.dumps(value, ensure_ascii=False))


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


def add_redis_options(parser: argparse.ArgumentParser, *, json: bool = True) -> None:
    """`--config FILE` (where Redis is) and, for commands that show something, `--json`."""
    parser.add_argument("--config", help="read [redis] from this TOML file (else RELEVO_REDIS__*)")
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value
