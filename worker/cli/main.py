"""The `relevo` command: run turns, serve the simulator, run the demo, operate the fleet.

    relevo turn --config FILE [--input FILE|-] [--stream]
    relevo simulate [--port P]                     relevo demo [--redis URL]
    relevo worker|enqueue|result|tail ...          (worker.cli.fleet)
    relevo breakers [open|close|reset SCOPE]       relevo kill-switch on|off|status
    relevo budgets list|show|set ...               relevo replay-held --config FILE
    relevo handoffs

Exit status (`worker.cli.common`): 0 ok, 3 degraded, 4 failed, 5 rejected, 2 bad
usage, input or configuration, 6 Redis did not answer, 7 refused (the kill switch is
on). Errors the user can fix are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence

from worker.cli import breakers, budgets, fleet, killswitch, replay
from worker.cli.common import (
    EXIT_BY_STATUS,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    read_input,
)
from worker.errors import ConfigError, InputError
from worker.settings import Settings, load_settings
from worker.turn.intake import checked_turn
from worker.types import TurnRequest, TurnResult

__all__ = ["main"]


def _cmd_turn(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    request = checked_turn(read_input(args.input), settings.limits)
    on_text = _echo_to_stderr if args.stream else None
    if args.stream and not request.stream:
        request = request.model_copy(update={"stream": True})
    result = asyncio.run(_run_turn(settings, request, on_text))
    print(result.to_json())
    return EXIT_BY_STATUS[result.status]


async def _run_turn(
    settings: Settings, request: TurnRequest, on_text: Callable[[str], None] | None
) -> TurnResult:
    from worker.adapters import make_client
    from worker.turn.chain import Chain

    async with make_client() as client:
        chain = Chain.from_settings(settings, client)
        return await chain.run(request, on_text=on_text)


def _echo_to_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _cmd_simulate(args: argparse.Namespace) -> int:
    from worker.simulator import serve

    serve(args.host, args.port)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from worker.demo.run import run_demo

    lost = run_demo(
        redis_url=args.redis,
        config=args.config,
        rate=args.rate,
        concurrency=args.concurrency,
        as_json=args.json,
    )
    return EXIT_INCOMPLETE if lost else EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relevo", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    turn = commands.add_parser("turn", help="run one turn through the chain, print the result")
    turn.add_argument("--config", required=True, help="chain configuration (TOML)")
    turn.add_argument("--input", default="-", help="turn request JSON file, or - for stdin")
    turn.add_argument("--stream", action="store_true", help="stream content to stderr")
    turn.set_defaults(func=_cmd_turn)

    simulate = commands.add_parser("simulate", help="serve simulated providers on loopback")
    simulate.add_argument("--host", default="127.0.0.1")
    simulate.add_argument("--port", type=int, default=8900)
    simulate.set_defaults(func=_cmd_simulate)

    demo = commands.add_parser(
        "demo", help="run the fleet end to end on misbehaving simulated providers"
    )
    demo.add_argument(
        "--redis",
        metavar="URL",
        help="use this Redis server and a separate `relevo worker` (default: both in-process)",
    )
    demo.add_argument(
        "--config",
        default="examples/demo.toml",
        help="with --redis: the configuration the worker runs with too",
    )
    demo.add_argument("--rate", type=float, default=15.0, help="turns sent per second")
    demo.add_argument("--concurrency", type=int, default=16, help="turns in flight at most")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON")
    demo.set_defaults(func=_cmd_demo)

    for register in (
        breakers.register,
        killswitch.register,
        replay.register,
        budgets.register,
        fleet.register,
    ):
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `relevo` console script."""
    from worker.observability.logs import configure_logging

    args = _parser().parse_args(argv)
    configure_logging(level=args.log_level)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (ConfigError, InputError) as exc:
        print(f"relevo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
