"""How a turn walks the chain: its models, hedging, retries and what a refused budget gets."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from worker.settings.base import ModelSlug, Section

DEFAULT_CHAIN = "default"
"""The name of `[chain]`: what a turn that names no chain runs on."""


class HedgingSettings(Section):
    """Hedged attempts: a call with no content by its hedge delay gets the next model
    started beside it; the first to send content answers (docs/hedging.md)."""

    enabled: bool = False
    """Hedged attempts on or off."""
    percentile: float = Field(default=95.0, gt=0, lt=100)
    """The hedge delay: this percentile of the model-on-provider's first-byte latency,
    fleet-wide..."""
    min_samples: int = Field(default=50, ge=1)
    """...once it has this many samples in the window; `fallback_s` until then."""
    fallback_s: float = Field(default=1.0, gt=0, le=120)
    """The hedge delay while too few samples are known."""
    floor_s: float = Field(default=0.05, ge=0, le=60)
    """The shortest hedge delay."""
    window_s: float = Field(default=300.0, ge=1, le=86_400)
    """Latency samples older than two windows are forgotten."""
    budget_share: float = Field(default=0.05, ge=0, le=1)
    """The fleet's hedge budget: each normal attempt refills a token bucket by this share
    of a hedge."""
    burst: int = Field(default=10, ge=1, le=10_000)
    """The most hedges that bucket holds."""
    refresh_s: float = Field(default=5.0, gt=0, le=3600)
    """How often a process re-reads the fleet's latency evidence."""


class Lineup(Section):
    """What every chain sets: its models and its cheaper stand-in."""

    models: tuple[ModelSlug, ...] = Field(min_length=2, max_length=3)
    """Two or three model slugs (each under `[models]`), the primary first."""
    cheaper_model: ModelSlug | None = None
    """This chain's stand-in for a turn its tenant's budget refused, in place of
    `[degradation] cheaper_model` (with `action = "cheaper_model"`)."""


class ChainSettings(Lineup):
    """The ordered models a turn may use, the primary first: the chain named `default`,
    which a turn naming no chain runs on (docs/routing.md)."""

    hedging: HedgingSettings = HedgingSettings()
    """Hedged attempts (docs/hedging.md); the delay and the budget are fleet-wide, for
    every chain."""


class NamedChainSettings(Lineup):
    """Another chain a turn may choose by its name (`"chain": NAME`; docs/routing.md)."""

    hedging: bool | None = None
    """Hedged attempts on this chain; unset, as `[chain.hedging] enabled`."""


class RetrySettings(Section):
    """The per-model retry: at most one, short, jittered."""

    retries_per_model: int = Field(default=1, ge=0, le=1)
    """Retries of the same model on the same provider before moving on: 0 or 1."""
    base_delay_s: float = Field(default=0.2, ge=0, le=5)
    """A retry waits between half and all of this."""
    retry_after_cap_s: float = Field(default=5.0, ge=0, le=60)
    """The longest wait a 429's hint may ask for and still be waited out (within the
    turn's deadline); a longer one moves on."""


class DegradationSettings(Section):
    """What a turn does when money, not health, stops it."""

    action: Literal["message", "handoff", "read_only", "cheaper_model"] = "message"
    """What a money-stopped turn does: answer `message`, go on the hand-off stream, run
    read-only, or be answered by `cheaper_model` (docs/budgets.md)."""
    message: str = Field(
        default="The assistant is unavailable right now; a person will follow up.",
        max_length=2000,
    )
    """The reply of a degraded turn."""
    cheaper_model: ModelSlug | None = None
    """With `action = "cheaper_model"`: the model under `[models]` (in the chain or not)
    that answers, in one call, a turn the tenant's budget refused; never used for a
    provider's quota."""

    @model_validator(mode="after")
    def _cheaper_model_named(self) -> DegradationSettings:
        if self.action == "cheaper_model" and self.cheaper_model is None:
            raise ValueError('cheaper_model: needed with action = "cheaper_model"')
        return self
