"""Which chain a turn runs on: the one it names, else `default` (`[chain]`).

A name no chain has is refused where the turn enters (`enqueue_turn`, `Producer`,
`relevo turn`), naming the chains that exist; a worker configured without it (a fleet
whose producers and workers disagree) ends the turn `failed` with `unknown_chain`.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.errors import InputError
from worker.settings import Settings
from worker.types import TurnRequest

__all__ = ["UNKNOWN_CHAIN", "check_chain", "primary_model"]

UNKNOWN_CHAIN = "unknown_chain"
"""The reason of a turn whose worker has no chain of the name it gives."""


def check_chain(request: TurnRequest, chains: Sequence[str]) -> None:
    """`InputError` for a turn naming a chain not among `chains`."""
    if request.chain is not None and request.chain not in chains:
        known = ", ".join(chains)
        raise InputError(f"chain: no chain named {request.chain!r} (chains: {known})")


def primary_model(settings: Settings, request: TurnRequest) -> str:
    """The primary of the chain `request` runs on (`default`'s for a name not configured)."""
    route = settings.chains.get(request.chain or "", settings.chain)
    return route.models[0]
