"""structlog, configured once: JSON lines for machines, readable lines for a terminal."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ["configure_logging"]


def configure_logging(
    *, level: str = "info", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Send structured logs to `stream` (stderr by default), JSON unless it is a terminal."""
    out = stream or sys.stderr
    as_json = not out.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
