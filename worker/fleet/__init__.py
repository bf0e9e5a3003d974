"""The fleet: the Celery app and its task, the runner, the turn store, enqueueing turns."""

from worker.fleet.app import make_app
from worker.fleet.enqueue import TurnHandle, enqueue_turn
from worker.fleet.producer import AsyncTurnHandle, Producer, TurnTimeout
from worker.fleet.turnstore import TurnStore

__all__ = [
    "AsyncTurnHandle",
    "Producer",
    "TurnHandle",
    "TurnStore",
    "TurnTimeout",
    "enqueue_turn",
    "make_app",
]
