"""`relevo config check`, and the warning about `RELEVO_*` variables that set nothing.

    relevo config check [--config FILE] [--without-keys] [--json]

Checks the configuration as a worker starting here would read it (the file, then the
environment), then prints every key's effective value, secrets redacted, beside the
variable that set it. Every command warns on stderr about a `RELEVO_` variable that is
neither a setting nor one relevo reads otherwise, naming the nearest real one
(`RELEVO_REDIS_URL`: did you mean `RELEVO_REDIS__URL`?): pydantic-settings ignores it.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from worker.cli.common import EXIT_OK, EXIT_USAGE, emit_json
from worker.cli.parsing import Commands, add_command, add_config_option
from worker.console.auth import TOKENS_ENV
from worker.fleet.liveness import ALIVE_VARIABLE
from worker.fleet.operator_config import load_config
from worker.fleet.startup import PARENT_ENV
from worker.observability.metrics_http import TOKEN_ENV as METRICS_TOKEN_ENV
from worker.observability.redact import redact_text
from worker.settings import Settings, environment
from worker.settings.environment import CONFIG_VARIABLE, NODE_VARIABLE
from worker.settings.variables import assignments, nearest_variable, unknown

__all__ = ["register", "stray_variables"]

# What relevo reads besides the settings; the test suite's and the benchmarks' own
# variables (keys, servers, where screenshots go) start as below.
OTHER_VARIABLES = (
    CONFIG_VARIABLE,
    NODE_VARIABLE,
    PARENT_ENV,
    TOKENS_ENV,
    METRICS_TOKEN_ENV,
    ALIVE_VARIABLE,
)
_OWN_PREFIXES = ("RELEVO_TEST_", "RELEVO_SECURITY_TEST_", "RELEVO_BENCH_", "RELEVO_SCREENSHOTS")


def stray_variables(config: str | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per `RELEVO_` variable of `environ` that sets nothing. A provider's
    `api_key_env` in `config` may name a `RELEVO_` variable: that one is read."""
    env = environment.variables(environ)
    others = {*OTHER_VARIABLES, *_key_variables(config)}
    lines = []
    for name in unknown(env, Settings, others):
        if name.upper().startswith(_OWN_PREFIXES):
            continue
        nearest = nearest_variable(name, Settings)
        hint = (
            f"did you mean {nearest}?"
            if nearest
            else "a setting's variable is RELEVO_<KEY> or RELEVO_<SECTION>__<KEY>"
        )
        lines.append(f"{name} sets nothing ({hint})")
    return lines


def _key_variables(config: str | None) -> set[str]:
    """The variables the file's providers take their API keys from, as far as it reads."""
    if config is None:
        return set()
    try:
        raw = tomllib.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return set()  # the command itself says what is wrong with the file
    providers = raw.get("providers")
    if not isinstance(providers, dict):
        return set()
    return {
        str(p["api_key_env"]).upper()
        for p in providers.values()
        if isinstance(p, dict) and p.get("api_key_env")
    }


def _check(args: argparse.Namespace) -> int:
    settings = load_config(args.config, require_secrets=not args.without_keys)
    set_by = {
        ".".join(path): name
        for name, path in assignments(environment.variables(), Settings).items()
    }
    values = dict(_leaves(settings.model_dump(mode="json")))
    if args.json:
        emit_json(
            {
                "config": args.config,
                "valid": True,
                "settings": {key: _redacted(value) for key, value in values.items()},
                "environment": dict(sorted((v, k) for k, v in set_by.items())),
            }
        )
        return EXIT_OK
    print(f"{args.config}: valid")
    for key, value in values.items():
        shown = json.dumps(_redacted(value), ensure_ascii=False)
        setter = next((set_by[p] for p in _prefixes(key) if p in set_by), None)
        print(f"{key} = {shown}" + (f"  # {setter}" if setter else ""))
    return EXIT_OK


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every key's value by its dotted path; a list stands whole, as the file writes it."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            name = f'"{key}"' if "/" in key or "." in key else key
            yield from _leaves(inner, f"{path}.{name}" if path else name)
    else:
        yield path, value


def _prefixes(key: str) -> Iterator[str]:
    """`a.b.c`, `a.b`, `a`: a variable may set a whole table."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        yield ".".join(parts[:n])


def _redacted(value: Any) -> Any:
    """`value` with passwords in URLs and anything shaped like a key removed."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    return value


def register(commands: Commands) -> None:
    """Add `config check` to the `relevo` parser."""
    group = add_command(
        commands,
        "config",
        "check a configuration and show what it comes to",
        exits=(EXIT_OK, EXIT_USAGE),
    )
    add_config_option(group, "the configuration to check")
    actions = group.add_subparsers(dest="config_action", required=True, metavar="ACTION")
    check = add_command(
        actions,
        "check",
        "check the configuration as a worker would, print every key's effective value",
        exits=(EXIT_OK, EXIT_USAGE),
        details="Reads the file, then the RELEVO_* variables over it, and runs every check "
        "a worker runs as it starts, each provider's API key included (--without-keys "
        "skips that one, on a machine that runs no worker). Prints each key's value, "
        "secrets redacted, with the variable that set it after a #. A RELEVO_ variable "
        "that sets nothing gets a warning on stderr naming the nearest real one.",
        notes={EXIT_USAGE: "the configuration has an error (one line on stderr)"},
    )
    add_config_option(check, "the configuration to check")
    check.add_argument(
        "--without-keys",
        action="store_true",
        help="do not require the providers' API keys here",
    )
    check.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON: the values by key, and the variables that set them",
    )
    check.set_defaults(func=_check)
