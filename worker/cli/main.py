"""The `relevo` command: run turns, serve the simulator, run the demo, operate the fleet.

    relevo turn --config FILE [--input FILE|-] [--stream]
    relevo simulate [--port P]                     relevo demo [--redis URL]
    relevo worker|exporter|enqueue                 (worker.cli.fleet, worker.cli.enqueue)
    relevo result|tail TURN_ID                     (worker.cli.results)
    relevo breakers [open|close|reset SCOPE]       relevo kill-switch on|off|status
    relevo budgets list|show|set ...               relevo replay-held --config FILE
    relevo handoffs                                relevo console --config FILE
    relevo tenants [list|set|clear ...]            relevo config check --config FILE

Exit codes are `worker.cli.common`'s (`relevo --help` lists them). Errors the user can
fix are one line on stderr, never a traceback; so is a closed stdout (`| head`).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib import metadata

from rediskit import StoreError
from worker.cli import (
    breakers,
    budgets,
    config_command,
    console_command,
    enqueue,
    fleet,
    killswitch,
    replay_command,
    results,
    tenants,
)
from worker.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_BY_STATUS,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_MEANINGS,
    EXIT_OK,
    EXIT_PORT,
    EXIT_REJECTED,
    EXIT_UNAVAILABLE,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    USAGE_ERRORS,
    OperatorError,
    OutputClosed,
    add_chain_option,
    chosen_chain,
    read_input,
    warn,
)
from worker.cli.parsing import (
    CONFIG_HELP,
    LOG_LEVELS,
    SHARED_DEFAULTS,
    Commands,
    add_command,
    add_config_option,
    exit_epilog,
)
from worker.fleet.errors import Unreadable
from worker.fleet.operator_config import load_config
from worker.observability.visible import VisibleStream, json_visible
from worker.settings import Settings, environment
from worker.turn.intake import checked_turn
from worker.types import TurnRequest, TurnResult

__all__ = ["build_parser", "main"]

# The demo's own chain, when neither --config nor RELEVO_CONFIG names another.
DEMO_CONFIG = "examples/demo.toml"
_ABOUT = (
    "relevo keeps AI agents answering when their model provider doesn't: Celery workers "
    "run each agent turn through a short fallback chain of models, with fleet-wide circuit "
    "breakers, a kill switch and per-tenant budgets in Redis. `relevo COMMAND --help` "
    "says more about each command."
)
_OPTIONS_ANYWHERE = (
    "A command's options may stand before or after its subcommand "
    "(relevo breakers --config F open SCOPE); --log-level may follow any command."
)


def _cmd_turn(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    if args.input is None and sys.stdin.isatty():
        # Else it would wait for input no one knows it expects, then call it invalid JSON.
        # `--input -` at a terminal is asked for: the JSON may be typed or pasted.
        raise OperatorError(
            "turn: the turn request is JSON on stdin or in --input FILE, e.g. "
            "relevo turn --config FILE --input examples/turn.json"
        )
    request = checked_turn(read_input(args.input or "-"), settings.limits)
    request = chosen_chain(request, args.chain, settings)
    echo = _Echo() if args.stream else None
    if args.stream and not request.stream:
        request = request.model_copy(update={"stream": True})
    try:
        result = asyncio.run(_run_turn(settings, request, echo))
    finally:
        if echo is not None:
            echo.end()
    print(json_visible(result.to_json()))
    return EXIT_BY_STATUS[result.status]


async def _run_turn(
    settings: Settings, request: TurnRequest, on_text: Callable[[str], None] | None
) -> TurnResult:
    from worker.adapters import make_client
    from worker.turn.chain import Chain

    async with make_client(settings.http) as client:
        chain = Chain.from_settings(settings, client)
        return await chain.run(request, on_text=on_text)


class _Echo:
    """Streamed content to stderr, ended by a newline so that the prompt starts on its own."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()
        self.last = text[-1:] or self.last

    def end(self) -> None:
        if self.last and self.last != "\n":
            sys.stderr.write("\n")
            sys.stderr.flush()


# The errors of a port that is taken, not ours to bind, or on no interface here.
_UNBINDABLE = frozenset({errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL})


def _cmd_simulate(args: argparse.Namespace) -> int:
    from worker.simulator import serve

    try:
        serve(args.host, args.port, seed=args.seed)
    except OSError as exc:
        if exc.errno not in _UNBINDABLE:
            raise
        raise OperatorError(
            f"simulate: could not listen on {args.host} port {args.port} ({exc.strerror}); "
            "choose another with --port",
            EXIT_PORT,
        ) from None
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from worker.demo.run import run_demo

    lost = run_demo(
        redis_url=args.redis,
        config=args.config or DEMO_CONFIG,
        rate=args.rate,
        concurrency=args.concurrency,
        as_json=args.json,
        console_port=args.console,
    )
    return EXIT_INCOMPLETE if lost else EXIT_OK


def _add_local_commands(commands: Commands) -> None:
    """The commands that need no fleet: `turn`, `simulate`, `demo`."""
    turn = add_command(
        commands,
        "turn",
        "run one turn through the chain in this process, print the result",
        exits=(EXIT_OK, EXIT_USAGE, EXIT_DEGRADED, EXIT_FAILED, EXIT_REJECTED),
        details="The result is JSON on stdout; with --stream the content goes to stderr "
        "as it arrives. No Redis: no shared breakers or budgets.",
    )
    add_config_option(turn, "chain configuration")
    turn.add_argument(
        "--input", help="turn request JSON file, or - for stdin (the default, unless a terminal)"
    )
    turn.add_argument("--stream", action="store_true", help="stream content to stderr")
    add_chain_option(turn)
    turn.set_defaults(func=_cmd_turn)

    simulate = add_command(
        commands,
        "simulate",
        "serve simulated providers on loopback",
        exits=(EXIT_OK, EXIT_PORT),
    )
    simulate.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)"
    )
    simulate.add_argument(
        "--port", type=int, default=8900, help="the port to listen on (default: %(default)s)"
    )
    simulate.add_argument(
        "--seed", type=int, default=None, help="seed the faults' random draws (reproducible)"
    )
    simulate.set_defaults(func=_cmd_simulate)

    demo = add_command(
        commands,
        "demo",
        "run the fleet end to end on misbehaving simulated providers",
        exits=(EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE),
    )
    demo.add_argument(
        "--redis",
        metavar="URL",
        help="use this Redis server and a separate `relevo worker` (default: both in-process)",
    )
    demo.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help=f"with --redis: the configuration the worker runs with too ({CONFIG_HELP}, "
        f"else {DEMO_CONFIG})",
    )
    demo.add_argument("--rate", type=float, default=15.0, help="turns sent per second")
    demo.add_argument("--concurrency", type=int, default=16, help="turns in flight at most")
    demo.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the summary as JSON"
    )
    demo.add_argument(
        "--console",
        nargs="?",
        type=int,
        const=0,
        metavar="PORT",
        help="serve the operator console on 127.0.0.1 while the demo runs (default: a free "
        "port) and print its URL and login token",
    )
    demo.set_defaults(func=_cmd_demo)


def _version() -> str:
    try:
        return metadata.version("relevo")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The `relevo` parser, every command on it."""
    parser = argparse.ArgumentParser(
        prog="relevo",
        description=textwrap.fill(_ABOUT, 78),
        epilog=f"{textwrap.fill(_OPTIONS_ANYWHERE, 78)}\n\n{exit_epilog(EXIT_MEANINGS)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"relevo {_version()}")
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="what this command logs on stderr")
    parser.set_defaults(**SHARED_DEFAULTS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_local_commands(commands)
    for register in (
        fleet.register,
        enqueue.register,
        results.register,
        breakers.register,
        killswitch.register,
        replay_command.register,
        budgets.register,
        tenants.register,
        console_command.register,
        config_command.register,
    ):
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `relevo` console script."""
    # Every line printed holds names, reasons and replies from Redis: none may act on the
    # terminal (erase a line, reorder text), whichever command prints it.
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = VisibleStream(out), VisibleStream(err)
    try:
        try:
            return _run(argv)
        finally:
            # Written here, not at interpreter exit, where a closed pipe cannot be caught.
            sys.stdout.flush()
    except (BrokenPipeError, OutputClosed):
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        sys.stdout, sys.stderr = out, err


def _run(argv: Sequence[str] | None) -> int:
    from worker.observability.logs import configure_logging

    args = build_parser().parse_args(argv)
    # The raw stream: a terminal's log lines keep their colours (`configure_logging`
    # writes their values out itself).
    configure_logging(level=args.log_level or "info", stream=getattr(sys.stderr, "raw", None))
    args.config = environment.config_path(args.config)
    for line in config_command.stray_variables(args.config):
        warn(line)
    if args.needs_config and args.config is None:
        return _fail(f"{args.command}: --config FILE is needed (or RELEVO_CONFIG)", EXIT_USAGE)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except OperatorError as exc:
        return _fail(str(exc), exc.exit_code)
    except StoreError as exc:  # a store call no command wrapped: still one line, exit 6
        return _fail(str(exc), EXIT_UNAVAILABLE)
    except USAGE_ERRORS as exc:
        return _fail(str(exc), EXIT_USAGE)
    except Unreadable as exc:
        return _fail(str(exc), EXIT_UNREADABLE)


def _fail(message: str, code: int) -> int:
    print(f"relevo: {message}", file=sys.stderr)
    return code


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered must not fail again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a test's capture
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
