"""How the `relevo` parser is built: commands with their help and exit codes, shared options.

argparse copies a subcommand's defaults over what its parent parsed, so an option that
stands at more than one level (`relevo breakers --config F open S`) would be lost. Every
option below the top is declared with `default=SUPPRESS`, and the top parser holds the
defaults (`SHARED_DEFAULTS`): a value given at any level stands.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Iterable, Mapping
from typing import TypeAlias, get_args

from worker.cli.common import EXIT_MEANINGS
from worker.settings import ObservabilitySettings

__all__ = [
    "LOG_LEVELS",
    "SHARED_DEFAULTS",
    "Commands",
    "add_command",
    "add_config_option",
    "add_redis_options",
    "exit_epilog",
    "positive_int",
    "positive_seconds",
]

# The `relevo` parser's subcommands, as argparse types them (not subscriptable at run time).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# What `[observability] log_level` accepts, and nothing else.
LOG_LEVELS: tuple[str, ...] = get_args(ObservabilitySettings.model_fields["log_level"].annotation)
# `log_level` None: not given (`relevo worker` then leaves the configuration's);
# `needs_config`: the command cannot run without a configuration file.
SHARED_DEFAULTS = {"config": None, "json": False, "log_level": None, "needs_config": False}
CONFIG_HELP = "else RELEVO_CONFIG"
_WIDTH = 78


def add_command(
    commands: Commands,
    name: str,
    summary: str,
    *,
    exits: Iterable[int],
    details: str = "",
    notes: Mapping[int, str] | None = None,
) -> argparse.ArgumentParser:
    """A subcommand whose help says what it does (`summary`, then `details`) and how it exits.

    `notes` replaces the general meaning of an exit code for this command.
    """
    paragraphs = [f"{summary[0].upper()}{summary[1:]}.", *details.split("\n\n")]
    description = "\n\n".join(textwrap.fill(p, _WIDTH) for p in paragraphs if p.strip())
    parser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=exit_epilog(exits, notes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    return parser


def exit_epilog(codes: Iterable[int], notes: Mapping[int, str] | None = None) -> str:
    """The exit codes `codes`, one a line in ascending order, as `EXIT_MEANINGS` (or
    `notes`) words them."""
    lines = ["exit status:"]
    for code in sorted(codes):
        meaning = (notes or {}).get(code, EXIT_MEANINGS[code])
        lines.append(
            textwrap.fill(
                meaning, _WIDTH, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7
            )
        )
    return "\n".join(lines)


def add_config_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--config FILE`, which the command needs: given, or named by `RELEVO_CONFIG`."""
    parser.add_argument(
        "--config", metavar="FILE", default=argparse.SUPPRESS, help=f"{what} ({CONFIG_HELP})"
    )
    parser.set_defaults(needs_config=True)


def add_redis_options(parser: argparse.ArgumentParser, *, json: bool = True) -> None:
    """`--config FILE` (where Redis is) and, for commands that show something, `--json`."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="TOML file whose [redis] section says where Redis is (else RELEVO_CONFIG, "
        "else RELEVO_REDIS__*)",
    )
    if json:
        parser.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print JSON instead of text",
        )


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value
