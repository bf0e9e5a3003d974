"""`relevo console --config FILE`: the operator console in the browser (`worker.console`)."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from worker.cli.common import EXIT_OK, EXIT_PORT, EXIT_USAGE, OperatorError
from worker.cli.parsing import Commands, add_command, add_config_option
from worker.errors import ConfigError
from worker.settings import ConsoleSettings

__all__ = ["register"]

_UVICORN_STARTUP_FAILURE = 3


def _serve(args: argparse.Namespace) -> int:
    from worker.fleet.operations import operator_fleet

    try:
        from worker.console import serve_console
        from worker.console.server import console_settings
    except ImportError as exc:
        extra = "pip install 'relevo[console]'"
        raise ConfigError(f"relevo console needs the console extra: {extra} ({exc})") from None

    fleet = operator_fleet(args.config)
    console = console_settings(fleet)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    try:
        console = ConsoleSettings.model_validate({**console.model_dump(), **overrides})
    except ValidationError as exc:
        raise ConfigError(f"--host/--port: {exc.errors()[0]['msg']}") from None
    try:
        serve_console(fleet, console)
    except SystemExit as exc:
        # uvicorn's "could not start" (3): its line above says why, e.g. the port is in use.
        if exc.code != _UVICORN_STARTUP_FAILURE:
            raise
        raise OperatorError(
            f"console: could not serve on {console.host} port {console.port} (see the "
            "line above); choose another with --port",
            EXIT_PORT,
        ) from None
    return EXIT_OK


def register(commands: Commands) -> None:
    """Add `console` to the `relevo` command."""
    console = add_command(
        commands,
        "console",
        "serve the operator console in the browser (127.0.0.1:8800 by default)",
        exits=(EXIT_OK, EXIT_USAGE, EXIT_PORT),
        details="Logins are the tokens of RELEVO_CONSOLE_TOKENS or [console] tokens_file, "
        'one "NAME ROLE TOKEN" a line (ROLE viewer or operator). Pages say so while Redis '
        "does not answer, and recover when it does. Ctrl-C stops it.",
    )
    add_config_option(console, "configuration (TOML)")
    console.add_argument("--host", help="address to listen on (default [console] host)")
    console.add_argument("--port", type=int, help="port (default [console] port)")
    console.set_defaults(func=_serve)
