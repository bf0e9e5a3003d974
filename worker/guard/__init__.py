"""What the chain asks of the fleet's shared state (`Guard`), and its Redis implementation."""

from worker.guard.hedging import HedgeBook, LocalHedges, hedge_book
from worker.guard.protocol import (
    Admission,
    Availability,
    Charge,
    FleetView,
    Guard,
    OpenGuard,
    Signal,
    Target,
)
from worker.guard.redis_guard import RedisGuard, open_guard

__all__ = [
    "Admission",
    "Availability",
    "Charge",
    "FleetView",
    "Guard",
    "HedgeBook",
    "LocalHedges",
    "OpenGuard",
    "RedisGuard",
    "Signal",
    "Target",
    "hedge_book",
    "open_guard",
]
