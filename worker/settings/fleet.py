"""The Celery fleet: its nodes, fair dispatch between tenants, and the limits at intake."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

import budgets
from worker.settings.base import Name, Section


class WorkerSettings(Section):
    """The Celery fleet: how a node runs turns and how no turn is lost."""

    queue: Name = "relevo"
    """The Celery queue turns are sent to and workers take them from."""
    processes: int = Field(default=2, ge=1, le=64)
    """Worker processes `relevo worker` starts on a node (one per core)."""
    threads: int = Field(default=500, ge=1, le=5000)
    """Turns each process runs at once (Celery's threads pool, one event loop)."""
    # Longer than a turn can run, so a live turn is never handed out twice.
    visibility_timeout_s: float | None = Field(default=None, gt=0)
    """A turn a dead worker held goes back to the Redis broker's queue after this long
    (RabbitMQ gives it back at once); unset, twice the turn deadline plus a minute. Also
    how old a turn record is before the sweeper re-sends it."""
    restore_interval_s: float = Field(default=10.0, gt=0)
    """How often a worker looks for such turns."""
    sweep_interval_s: float = Field(default=30.0, gt=0)
    """How often a worker re-sends turns the broker lost: sent, but neither claimed nor
    answered after the visibility timeout plus `restore_interval_s` (docs/deploy.md)."""
    result_ttl_s: int = Field(default=86_400, ge=60)
    """How long a turn's result is kept (`relevo result`)."""
    oldest_release: Literal["0.1.0", "0.2.0"] = "0.1.0"
    """The oldest relevo release still running on the fleet's Redis (producers, workers,
    consoles). At 0.1.0, turns and results are written as 0.1.0 reads them: a tool
    message's `is_error` is left out of a queued turn, the fields a call did not carry
    are named in its attempt's `detail` rather than its `left_out`, and a turn of a tenant
    id 0.1.0 refuses (`org:1234`, `team/42`) is refused at intake. Raise it once no 0.1.0
    process is left (docs/deploy.md)."""


class FairnessSettings(Section):
    """Weighted fair dispatch across tenants, and the share of a tenant nobody configured
    (`relevo tenants set` gives one its own; docs/fairness.md)."""

    enabled: bool = True
    """Weighted fair dispatch; off, producers publish straight to the broker's queue, first
    in first out."""
    queue_depth: int = Field(default=8, ge=1, le=10_000)
    """Turns the broker's queue may hold that no worker has taken yet: enough that a worker
    that frees a thread finds one, few enough that a tenant arriving waits behind few."""
    interval_s: float = Field(default=1.0, ge=0.01, le=60)
    """Rounds run when a turn arrives for an idle tenant or a lease is given back; an idle
    dispatcher looks anyway this often (a safety net: a dead worker's leases run out on
    it)."""
    batch: int = Field(default=32, ge=1, le=1000)
    """The most turns one round moves (one Lua step holds Redis that long)."""
    gather_s: float = Field(default=0.2, ge=0, le=1.0)
    """Leases a worker process gives back wait for its next round, which starts this long
    after the first at most (sooner once half `queue_depth` have come, or at once while a
    tenant is parked): under load, one round moves several turns (less Redis CPU per
    turn); 0: a round per lease given back."""
    default_max_in_flight: int | None = Field(default=None, ge=1)
    """Turns of a tenant with no share of its own running at once, fleet-wide (unset: no
    limit)."""
    default_turns_per_minute: int | None = Field(default=None, ge=1)
    """Turns such a tenant may start a minute (a token bucket; unset: no limit)."""
    default_input_tokens_per_minute: int | None = Field(default=None, ge=1)
    """Input tokens (estimated) such a tenant may send a minute (unset: no limit)."""
    default_weight: int = Field(default=1, ge=1, le=budgets.MAX_WEIGHT)
    """Such a tenant's share of a saturated fleet, against the others' weights."""

    def default_share(self) -> budgets.Share:
        """The share of a tenant that has none of its own."""
        return budgets.Share(
            self.default_max_in_flight,
            self.default_turns_per_minute,
            self.default_input_tokens_per_minute,
            self.default_weight,
        )


class LimitsSettings(Section):
    """How big one turn may be: checked at enqueue and again on the worker."""

    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """The largest turn request, as UTF-8 JSON."""
    max_messages: int = Field(default=500, ge=1, le=100_000)
    """The most messages in a turn."""
    max_tools: int = Field(default=128, ge=0, le=10_000)
    """The most tools in a turn."""
    max_message_chars: int = Field(default=256 * 1024, ge=1)
    """The longest message text (its text parts together)."""
    max_attachments: int = Field(default=20, ge=0, le=1000)
    """The most images and documents in a turn."""
    max_attachment_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """The largest image or document, once decoded."""
