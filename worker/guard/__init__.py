"""What the chain asks of the fleet's shared state (`Guard`), and its Redis implementation."""

from worker.guard.hedge_book import HedgeBook, LocalHedges, hedge_book
from worker.guard.protocol import (
    Admission,
    Availability,
    Charge,
    Conclusion,
    FleetView,
    Guard,
    OpenGuard,
    Refusal,
    Signal,
    Target,
)
from worker.guard.redis_guard import RedisGuard, open_guard

__all__ = [
    "Admission",
    "Availability",
    "Charge",
    "Conclusion",
    "FleetView",
    "Guard",
    "HedgeBook",
    "LocalHedges",
    "OpenGuard",
    "RedisGuard",
    "Refusal",
    "Signal",
    "Target",
    "hedge_book",
    "open_guard",
]
