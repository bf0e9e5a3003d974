"""How many output tokens an attempt reserves: what its model has been seen to answer.

The evidence is fleet-wide (`budgets.OutputEvidence`); each process keeps the current
percentile per model and refreshes it in the background every `refresh_s`, so sizing a
reservation never waits for Redis. Until a model has `min_samples` answers on record,
or while Redis cannot say, an attempt reserves its whole `max_tokens`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

import budgets
from worker.errors import STORE_DOWN

__all__ = ["OutputSizer"]

log = structlog.get_logger("relevo.guard")


class OutputSizer:
    """The output tokens to reserve per model; None `percentile` reserves `max_tokens`."""

    def __init__(
        self,
        evidence: budgets.OutputEvidence,
        *,
        percentile: float | None,
        min_samples: int,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.evidence = evidence
        self.percentile = percentile
        self.min_samples = min_samples
        self.refresh_s = refresh_s
        self._clock = clock
        self._known: dict[str, int | None] = {}
        self._fetched_at: dict[str, float] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}

    def tokens(self, model: str, max_tokens: int) -> int:
        """What to reserve for an attempt of `model` that may write `max_tokens`."""
        if self.percentile is None:
            return max_tokens
        fetched = self._fetched_at.get(model)
        if (fetched is None or self._clock() - fetched >= self.refresh_s) and (
            model not in self._refreshing
        ):
            task = asyncio.get_running_loop().create_task(self.refresh(model))
            self._refreshing[model] = task
            task.add_done_callback(lambda _: self._refreshing.pop(model, None))
        seen = self._known.get(model)
        return max_tokens if seen is None else min(max_tokens, seen)

    async def refresh(self, model: str) -> None:
        """Read `model`'s percentile now; what was known stays when Redis cannot answer."""
        assert self.percentile is not None
        try:
            found = await self.evidence.percentiles(
                [model], self.percentile, min_samples=self.min_samples
            )
        except STORE_DOWN as exc:
            log.debug("guard.evidence_unreachable", model=model, error=type(exc).__name__)
            self._fetched_at[model] = self._clock()  # retried after refresh_s, not per turn
            return
        self._known[model] = found[model]
        self._fetched_at[model] = self._clock()

    async def aclose(self) -> None:
        """Stop the refreshes still running."""
        for task in list(self._refreshing.values()):
            task.cancel()
        await asyncio.gather(*self._refreshing.values(), return_exceptions=True)
