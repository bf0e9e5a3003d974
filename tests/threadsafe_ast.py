"""One `ast.parse` at a time in the test process, on CPython 3.11, with no parse inside it.

CPython 3.11 keeps the AST constructor's recursion counter per interpreter, not per call.
A second parse while one is building its tree leaves the first one's count wrong, and
the first raises ``SystemError: AST constructor recursion depth mismatch``. Two ways lead
there: another thread parsing at once (a worker thread formatting a logged traceback,
whose carets 3.11 finds with `ast.parse`), and the garbage collector running inside the
parse and calling a finaliser that parses (an unclosed socket's ResourceWarning, which
pytest's unraisable-exception hook formats with carets). Raised while pytest builds a
failure's report, it is an INTERNALERROR that takes the xdist worker down and loses the
failure's own message. Here a lock keeps other threads out and the collector waits until
the tree is built. CPython 3.12 keeps the counter per call. tests/conftest.py installs it
before any test runs.
"""

from __future__ import annotations

import ast
import functools
import gc
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
            collecting = gc.isenabled()
            gc.disable()  # a finaliser run by the collector mid-parse may parse
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    serialised.serialised = True  # type: ignore[attr-defined]
    ast.parse = serialised
