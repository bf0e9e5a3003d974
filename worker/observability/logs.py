"""structlog, configured once: JSON lines for machines, readable lines for a terminal.

Every event passes the `Redactor` last, after exceptions are rendered to text, so
API keys and prompts are removed from tracebacks too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import TextIO

import structlog

from worker.observability.redact import Redactor, provider_secrets
from worker.settings import Settings

__all__ = ["configure_from_settings", "configure_logging", "redact_secrets"]

_redactor = Redactor()


def configure_logging(
    *,
    level: str = "info",
    json: bool | None = None,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
) -> None:
    """Send structured logs to `stream` (stderr by default), JSON unless it is a terminal.

    `secrets` are exact values (API keys) removed from every line, besides the key patterns.
    """
    global _redactor  # noqa: PLW0603 - structlog's configuration is process-wide too
    out = stream or sys.stderr
    as_json = not out.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        # Tracebacks arrive as redacted text: plain printing, not rich's frame locals.
        else structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    _redactor = Redactor(secrets)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redactor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line: `print` writes the line and its newline apart, and the
        # processes of a node share one stderr, so their lines interleaved mid-line.
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def configure_from_settings(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Logging as `[observability]` says, with the configured providers' keys redacted."""
    obs = settings.observability
    configure_logging(
        level=obs.log_level, json=obs.log_json, stream=stream, secrets=provider_secrets(settings)
    )


def redact_secrets(secrets: Iterable[str]) -> None:
    """Also remove these exact values from every line logged from now on."""
    _redactor.add(secrets)
