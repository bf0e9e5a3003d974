"""The fleet's stores as the configuration describes them, and the breaker scopes of a chain.

Every path that reads or writes the shared state (the guard, the operator commands,
the metrics endpoint) builds its breaker store and ledger here, so they all apply the
same configured policy to the same scope names.
"""

from __future__ import annotations

from redis.asyncio import Redis

import breakers
import budgets
from worker.guard.protocol import Target
from worker.settings import Settings

__all__ = [
    "breaker_store",
    "budget_ledger",
    "configured_scopes",
    "model_scope",
    "output_evidence",
    "vendor_scope",
]


def model_scope(target: Target) -> str:
    """The breaker of one model on one provider."""
    return f"model:{target.model}@{target.provider}"


def vendor_scope(target: Target) -> str:
    """The breaker of every model of a vendor."""
    return f"vendor:{target.vendor}"


def configured_scopes(settings: Settings) -> list[str]:
    """The model and vendor scopes the configured chains can touch."""
    scopes: dict[str, None] = {}
    chains = (settings.chain, *settings.chains.values())
    for slug in dict.fromkeys(slug for chain in chains for slug in chain.models):
        model = settings.models[slug]
        for serving in model.serve:
            target = Target(slug, model.vendor, serving.provider, serving.model_id)
            scopes[model_scope(target)] = None
            scopes[vendor_scope(target)] = None
    return list(scopes)


def breaker_store(
    settings: Settings, redis: Redis, *, know_scopes: bool = False
) -> breakers.FleetBreakers:
    """The fleet's breakers with the configured policy; `know_scopes` lets operators name
    the configured scopes before the fleet has called them."""
    return breakers.FleetBreakers(
        redis,
        namespace=settings.redis.namespace,
        policy=settings.breakers.policy(),
        cooldowns=settings.breakers.cooldowns(),
        scopes=configured_scopes(settings) if know_scopes else (),
    )


def budget_ledger(settings: Settings, redis: Redis) -> budgets.Ledger:
    """The tenants' budgets, with the configured default limits."""
    return budgets.Ledger(
        redis,
        namespace=settings.redis.namespace,
        default_limits=settings.budgets.default_limits(),
    )


def output_evidence(settings: Settings, redis: Redis) -> budgets.OutputEvidence:
    """The output tokens the fleet has seen per model, as reservations are sized by."""
    return budgets.OutputEvidence(
        redis, namespace=settings.redis.namespace, samples=settings.budgets.evidence_samples
    )
