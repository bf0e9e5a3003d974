"""The one reader of the process's environment variables.

`RELEVO_CONFIG` names the configuration file; `RELEVO_<SECTION>__<KEY>` overrides a key
of it (pydantic-settings reads those for `Settings`, by the same rule); `relevo worker
--node-name` hands its processes `RELEVO_NODE_NAME`. Every other variable relevo reads (a
provider's API key, the console's and the metrics' tokens, `$USER`) is read here too.
Names are read case-insensitively, as pydantic-settings reads them, and a variable set to
the empty string counts as unset, everywhere: an empty `RELEVO_REDIS__URL` leaves the
file's or the default URL, never an empty one. `tests/test_environment.py` fails when a
module reads `os.environ` on its own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping

__all__ = [
    "CONFIG_VARIABLE",
    "NODE_VARIABLE",
    "PREFIX",
    "config_path",
    "forget_ours",
    "node_name",
    "section_overrides",
    "value",
    "variable",
    "variables",
]

PREFIX = "RELEVO_"
CONFIG_VARIABLE = "RELEVO_CONFIG"
NODE_VARIABLE = "RELEVO_NODE_NAME"


def variables(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """Every variable: `environ` when given (a test's), else this process's."""
    return os.environ if environ is None else environ


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable `name` (any case; spelt as asked first), or None when it is unset or
    empty."""
    env = variables(environ)
    if exact := env.get(name):
        return exact
    wanted = name.upper()
    return next((text for key, text in env.items() if key.upper() == wanted and text), None)


def forget_ours() -> None:
    """Unset every `RELEVO_` variable (any case) in this process: what it starts next
    sees only what it is handed."""
    for name in [n for n in os.environ if n.upper().startswith(PREFIX)]:
        del os.environ[name]


def config_path(given: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The configuration file: `given` (a `--config`), else `RELEVO_CONFIG`, else None."""
    return given or value(CONFIG_VARIABLE, environ)


def node_name(environ: Mapping[str, str] | None = None) -> str:
    """The name this process's node goes by: `RELEVO_NODE_NAME`, else the host name."""
    return value(NODE_VARIABLE, environ) or socket.gethostname()


def section_overrides(
    section: str, keys: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The keys of `[section]` that `RELEVO_<SECTION>__<KEY>` variables set."""
    found = {key: value(variable(section, key), environ) for key in keys}
    return {key: text for key, text in found.items() if text is not None}


def variable(section: str, key: str) -> str:
    """The variable that overrides `section.key`: `RELEVO_REDIS__URL`."""
    return f"{PREFIX}{section}__{key}".upper()
