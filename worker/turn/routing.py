"""Which chain a turn runs on: the one it names, else its tenant's default, else `default`.

A name no chain has is refused where the turn enters (`enqueue_turn`, `Producer`,
`relevo turn`), naming the chains that exist; a worker configured without it (a fleet
whose producers and workers disagree) ends the turn `failed` with `unknown_chain`. A
tenant's route (`budgets.Route`, set by operators) gives its default chain and the
chains it may use: a turn on another ends `failed` with `chain_not_allowed`.
"""

from __future__ import annotations

from collections.abc import Sequence

from budgets import Route
from worker.errors import InputError
from worker.settings import DEFAULT_CHAIN, Settings
from worker.types import TurnRequest

__all__ = ["CHAIN_NOT_ALLOWED", "UNKNOWN_CHAIN", "check_chain", "primary_model", "routed"]

UNKNOWN_CHAIN = "unknown_chain"
"""The reason of a turn whose worker has no chain of the name it gives."""
CHAIN_NOT_ALLOWED = "chain_not_allowed"
"""The reason of a turn on a chain its tenant may not use."""


def check_chain(request: TurnRequest, chains: Sequence[str]) -> None:
    """`InputError` for a turn naming a chain not among `chains`."""
    if request.chain is not None and request.chain not in chains:
        known = ", ".join(chains)
        raise InputError(f"chain: no chain named {request.chain!r} (chains: {known})")


def routed(request: TurnRequest, route: Route | None) -> tuple[TurnRequest, InputError | None]:
    """`request` on its tenant's default chain when it names none, and the error of a turn
    on a chain its tenant may not use (None: it may)."""
    if route is None:
        return request, None
    if request.chain is None and route.default is not None:
        request = request.model_copy(update={"chain": route.default})
    chain = request.chain or DEFAULT_CHAIN
    if route.allows(chain):
        return request, None
    allowed = ", ".join(route.allowed or ())
    tenant = request.tenant_id
    why = f"chain: tenant {tenant!r} may not use chain {chain!r} (its chains: {allowed})"
    return request, InputError(why)


def primary_model(settings: Settings, request: TurnRequest) -> str:
    """The primary of the chain `request` runs on (`default`'s for a name not configured)."""
    return (settings.chain_named(request.chain) or settings.chain).models[0]
