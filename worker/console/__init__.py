"""The operator console in the browser: the fleet, its tenants, one turn; actions on them.

`relevo console --config FILE` serves it (`serve_console`); `relevo demo --console`
runs it beside the demo (`running_console`). It reads and acts through the same
operator functions as the `relevo` commands (`worker.fleet.operations`). See
docs/operating.md.
"""

from worker.console.app import build_app
from worker.console.server import RunningConsole, running_console, serve_console

__all__ = ["RunningConsole", "build_app", "running_console", "serve_console"]
