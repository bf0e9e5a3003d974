"""The operator commands of `relevo`: breakers, kill switch, held turns, budgets, hand-offs.

    relevo breakers [--json]                       relevo budgets list [--json]
    relevo breakers open|close|reset SCOPE         relevo budgets show TENANT [--json]
    relevo kill-switch on|off|status               relevo budgets set TENANT --daily D --monthly M
    relevo replay-held --config FILE [--limit N]   relevo handoffs [--count N] [--json]

Redis is the `[redis]` section of `--config FILE`, else `RELEVO_REDIS__URL` and
`RELEVO_REDIS__NAMESPACE` (defaults redis://127.0.0.1:6379/0 and "relevo").

Exit status: 0 done; 2 bad usage, configuration, name or amount, or an unknown
scope or tenant; 4 some held turns were not valid requests (dropped, printed);
6 Redis did not answer; 7 replay refused because the kill switch is on.
One line on stderr says what went wrong; never a traceback.
"""

from __future__ import annotations

from worker import (
    operate_breakers,
    operate_budgets,
    operate_fleet,
    operate_killswitch,
    operate_replay,
)
from worker.operate_base import (
    EXIT_FAILED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Commands,
)

__all__ = ["EXIT_FAILED", "EXIT_REFUSED", "EXIT_UNAVAILABLE", "EXIT_USAGE", "add_commands"]


def add_commands(commands: Commands) -> None:
    """Register every operator command on the `relevo` parser's subcommands."""
    operate_breakers.register(commands)
    operate_killswitch.register(commands)
    operate_replay.register(commands)
    operate_budgets.register(commands)
    operate_fleet.register(commands)
