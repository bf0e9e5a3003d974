"""Celery's pool says at debug which task it starts, with the task's arguments: a turn.

relevo's handler blanks them unless `[observability] log_content` is on. The line comes
from Celery's own pool (`TaskPool.apply_async`), as a worker at `--log-level debug` logs it
for a message a producer made by hand, whose short headers leave the turn inside Celery's
1,024 characters.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from celery.concurrency.solo import TaskPool

from worker.observability.logs import configure_logging

CANARY = "CANARY-prompt-in-a-hand-made-message"


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    configure_logging(level="info", stream=io.StringIO())


def started(content: bool) -> str:
    out = io.StringIO()
    configure_logging(level="debug", json=True, stream=out, content=content)
    turn = {"tenant_id": "acme", "messages": [{"role": "user", "content": CANARY}]}
    pool = TaskPool()
    pool.apply_async(
        lambda *args, **kwargs: None,
        args=["relevo.run_turn", "x2", {"args": [turn]}],
        callback=lambda _: None,
    )
    return out.getvalue()


@pytest.mark.usefixtures("restored")
def test_the_pools_debug_line_keeps_no_turn_unless_content_is_on() -> None:
    hidden = started(content=False)
    assert "TaskPool: Apply" in hidden
    assert CANARY not in hidden
    assert CANARY in started(content=True)
