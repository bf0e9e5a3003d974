"""One `ast.parse` at a time in the test process, on CPython 3.11.

CPython 3.11 keeps the AST constructor's recursion counter per interpreter, not per
thread. Two threads parsing at once (pytest formatting a failure while a worker thread
formats a logged traceback, whose carets 3.11 finds with `ast.parse`) leave it unbalanced,
and the parse that notices raises ``SystemError: AST constructor recursion depth
mismatch``. Raised while pytest builds a report, it is an INTERNALERROR that takes the
xdist worker down and loses the failure's own message. CPython 3.12 keeps the counter per
thread. tests/conftest.py installs it before any test runs.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

_LOCK = threading.RLock()


def install() -> None:
    """Serialise `ast.parse` (once; a no-op on the Pythons without the race)."""
    if sys.version_info >= (3, 12) or getattr(ast.parse, "serialised", False):
        return
    parse = ast.parse

    @functools.wraps(parse)
    def serialised(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return parse(*args, **kwargs)

    serialised.serialised = True  # type: ignore[attr-defined]
    ast.parse = serialised
