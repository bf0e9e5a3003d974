"""The fleet: the Celery app and its task, the runner, the turn store, sending turns."""

from worker.fleet.app import make_app
from worker.fleet.enqueue import Producer, enqueue_turn
from worker.fleet.errors import (
    FleetUnavailable,
    StreamRestarted,
    TurnNotSent,
    TurnRecorded,
    TurnTimeout,
    UnknownTurn,
    Unreadable,
)
from worker.fleet.handles import AsyncTurnHandle, TurnHandle
from worker.fleet.streams import StreamEvent
from worker.fleet.turnstore import TurnStore

__all__ = [
    "AsyncTurnHandle",
    "FleetUnavailable",
    "Producer",
    "StreamEvent",
    "StreamRestarted",
    "TurnHandle",
    "TurnNotSent",
    "TurnRecorded",
    "TurnStore",
    "TurnTimeout",
    "UnknownTurn",
    "Unreadable",
    "enqueue_turn",
    "make_app",
]
