"""Output tokens the fleet has seen, per model: the evidence reservations are sized by.

A reservation of every `max_tokens` an attempt may produce is safe but idle money: a
turn that may write 256 tokens usually writes a few dozen. Workers record each
answer's output tokens here (a capped list per model, shared by the fleet) and reserve
a high percentile of them instead; the worst case is still bounded by the tenant's
overdraft (docs/budgets.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from budgets.errors import InvalidAmountError
from budgets.keys import BudgetKeys

__all__ = ["EVIDENCE_TTL_S", "OutputEvidence", "percentile"]

# A model nobody called for a week starts again from the worst case.
EVIDENCE_TTL_S = 7 * 86_400


def percentile(values: Sequence[int], pct: float) -> int:
    """The nearest-rank `pct` percentile of `values` (not empty): a value that was seen."""
    if not values:
        raise ValueError("a percentile of no values")
    if not 0 < pct <= 100:
        raise ValueError(f"pct must be in (0, 100] (got {pct})")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


class OutputEvidence:
    """The last `samples` output-token counts of each model, in Redis under `namespace`."""

    def __init__(self, redis: Redis, *, namespace: str = "relevo", samples: int = 1000) -> None:
        if samples < 1:
            raise ValueError(f"samples must be at least 1 (got {samples})")
        self._redis = redis
        self.keys = BudgetKeys(namespace)
        self.samples = samples

    def record_on(self, pipe: Pipeline, model: str, output_tokens: int) -> int:
        """Queue one answer's output tokens on `pipe`; returns how many replies it adds."""
        if (
            not isinstance(output_tokens, int)
            or isinstance(output_tokens, bool)
            or output_tokens < 0
        ):
            raise InvalidAmountError(f"output_tokens must be a count (got {output_tokens!r})")
        key = self.keys.evidence(model)
        pipe.lpush(key, output_tokens)
        pipe.ltrim(key, 0, self.samples - 1)
        pipe.expire(key, EVIDENCE_TTL_S)
        return 3

    async def record(self, model: str, output_tokens: int) -> None:
        """Record one answer's output tokens."""
        async with self._redis.pipeline(transaction=False) as pipe:
            self.record_on(pipe, model, output_tokens)
            await pipe.execute()

    async def percentiles(
        self, models: Sequence[str], pct: float, *, min_samples: int = 1
    ) -> dict[str, int | None]:
        """Each model's `pct` percentile of output tokens, or None below `min_samples`."""
        keys = [self.keys.evidence(model) for model in models]
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lrange(key, 0, self.samples - 1)
            replies = await pipe.execute()
        found: dict[str, int | None] = {}
        for model, raw in zip(models, replies, strict=True):
            values = [int(v) for v in raw]
            found[model] = percentile(values, pct) if len(values) >= max(1, min_samples) else None
        return found
