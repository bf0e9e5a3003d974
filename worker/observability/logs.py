"""structlog, configured once: JSON lines for machines, readable lines for a terminal.

One stream: relevo's own events and the standard-library loggers' (Celery's, kombu's,
redis-py's, at warning and above unless the level is debug) come out in one format,
each line with its logger's name. Every event passes the `Redactor` last, after
exceptions are rendered to text, so API keys and prompts are removed from tracebacks too.

Content stays out: Celery's task lines (`celery.app.trace`: "succeeded in ...: <return
value>", failures with the task's arguments) carry whole turns and results, so their
arguments and return value are replaced by `[content]` unless `content=True`
(`[observability] log_content`, for debugging). Tracebacks are plain text, never rich's
frame locals (a Redis URL's password is a local somewhere).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

import structlog

from worker.observability.redact import Redactor, provider_secrets
from worker.observability.visible import visible
from worker.settings import Settings

__all__ = ["configure_from_settings", "configure_logging", "redact_secrets"]

_redactor = Redactor()


def configure_logging(
    *,
    level: str = "info",
    json: bool | None = None,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
    content: bool = False,
) -> None:
    """Send structured logs to `stream` (stderr by default), JSON unless it is a terminal.

    `secrets` are exact values (API keys) removed from every line, besides the key patterns.
    `content` keeps the turns and results in Celery's task lines (debugging only).
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
    named: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    rendered: list[structlog.typing.Processor] = [
        structlog.processors.format_exc_info,
        _redactor,
        # JSON escapes what would act on a terminal; readable lines write it out.
        *(() if as_json else (_inert,)),
        renderer,
    ]
    number = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*named, *rendered],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=_NamedLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER)
    if not content:
        handler.addFilter(_hide_task_content)
    _celery_bodies(shown=content)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=named,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendered],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    # Celery says "received" and "succeeded" at info for every task: two lines a turn.
    root.setLevel(number if number <= logging.DEBUG else max(number, logging.WARNING))


_HANDLER = "relevo"


def _inert(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Every text of a readable line with its control and bidi characters written out."""
    return {k: visible(v) if isinstance(v, str) else v for k, v in event.items()}


# What Celery's task lines put in their arguments: the payload (a whole turn) and the
# return value (a whole result). Exceptions stay: relevo's errors name fields, not values.
_CONTENT_FIELDS = frozenset({"args", "kwargs", "return_value"})
_HIDDEN = "[content]"


def _celery_bodies(*, shown: bool) -> None:
    """Celery's consumer prints a message it cannot run (an unknown task, a body it cannot
    decode) with its body, a whole turn, through one function: keep the size only."""
    from celery.worker.consumer import consumer

    original = getattr(consumer, "_relevo_dump_body", consumer.dump_body)
    consumer._relevo_dump_body = original

    def sized(message: Any, body: Any) -> str:
        return f"{_HIDDEN} ({len(message.body)}b)"

    consumer.dump_body = original if shown else sized


# The pool's debug line for each task it starts: the request, body and arguments included
# (a message whose headers are short shows its whole turn within Celery's 1,024 characters).
_POOL_APPLY = "TaskPool: Apply"


def _hide_task_content(record: logging.LogRecord) -> bool:
    """Blank the content fields of a Celery task line; every other record passes as it is."""
    if (
        record.name.startswith("celery.")
        and isinstance(record.msg, str)
        and record.msg.startswith(_POOL_APPLY)
        and isinstance(record.args, tuple)
        and record.args
    ):
        record.args = (record.args[0], *(_HIDDEN for _ in record.args[1:]))
    elif record.name.startswith("celery.") and isinstance(record.args, Mapping):
        hidden = {k: _HIDDEN if k in _CONTENT_FIELDS else v for k, v in record.args.items()}
        record.args = hidden
        if isinstance(getattr(record, "data", None), Mapping):
            record.data = hidden
    return True


class _NamedWriteLogger(structlog.WriteLogger):
    """A `WriteLogger` that keeps the name it was asked for (`get_logger("relevo.chain")`)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class _NamedLoggerFactory:
    # One write per line: `print` writes the line and its newline apart, and the
    # processes of a node share one stderr, so their lines interleaved mid-line.
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        return _NamedWriteLogger(self._out, str(args[0]) if args else "relevo")


def configure_from_settings(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Logging as `[observability]` says, with the configured providers' keys redacted."""
    obs = settings.observability
    configure_logging(
        level=obs.log_level,
        json=obs.log_json,
        stream=stream,
        secrets=provider_secrets(settings),
        content=obs.log_content,
    )


def redact_secrets(secrets: Iterable[str]) -> None:
    """Also remove these exact values from every line logged from now on."""
    _redactor.add(secrets)
