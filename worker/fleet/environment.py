"""The one reader of relevo's environment variables.

`RELEVO_CONFIG` names the configuration file; `RELEVO_<SECTION>__<KEY>` overrides a key
of it; `relevo worker --node-name` hands its processes `RELEVO_NODE_NAME`. Names are read
case-insensitively, as pydantic-settings reads them for the settings, and a variable set to
the empty string counts as unset, everywhere: an empty `RELEVO_REDIS__URL` leaves the file's
or the default URL, never an empty one.
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
    "node_name",
    "section_overrides",
    "value",
    "variable",
]

PREFIX = "RELEVO_"
CONFIG_VARIABLE = "RELEVO_CONFIG"
NODE_VARIABLE = "RELEVO_NODE_NAME"


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable `name` (any case), or None when it is unset or empty."""
    env = os.environ if environ is None else environ
    wanted = name.upper()
    return next((text for key, text in env.items() if key.upper() == wanted and text), None)


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
