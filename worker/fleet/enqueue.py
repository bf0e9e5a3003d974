"""Sending turns to the fleet, and reading what became of them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from worker.adapters import make_client
from worker.fleet.sending import send_turn
from worker.settings import LimitsSettings, Settings
from worker.turn.chain import Chain
from worker.turn.intake import checked_turn
from worker.types import TurnRequest, TurnResult

__all__ = ["TurnHandle", "enqueue_turn", "run_turn", "send_turn"]


@dataclass(frozen=True)
class TurnHandle:
    """A turn on its way through the fleet; `result` is Celery's AsyncResult."""

    turn_id: str
    result: AsyncResult

    def get(self, timeout_s: float | None = None) -> TurnResult:
        """Wait for the turn's result."""
        # The caller may itself run inside a worker (the embedded demo): waiting
        # here is on purpose, not a task waiting on a subtask.
        raw = self.result.get(timeout=timeout_s, disable_sync_subtasks=False)
        return TurnResult.model_validate(raw)


def enqueue_turn(
    request: TurnRequest | dict[str, Any],
    *,
    app: Celery,
    limits: LimitsSettings | None = None,
) -> TurnHandle:
    """Validate the turn and its size here (a bad one never reaches a worker) and enqueue it.

    `limits` should be the workers' (`settings.limits`); the defaults otherwise.
    """
    turn = checked_turn(request, limits or LimitsSettings())
    return TurnHandle(turn.turn_id, send_turn(app, turn))


def run_turn(request: TurnRequest, settings: Settings) -> TurnResult:
    """Run one turn in this process, without the fleet (no shared breakers or budgets)."""

    async def go() -> TurnResult:
        async with make_client() as client:
            return await Chain.from_settings(settings, client).run(request)

    return asyncio.run(go())
