"""The fleet: the Celery app and its task, the runner, the turn store, enqueueing turns."""

from worker.fleet.app import make_app
from worker.fleet.enqueue import TurnHandle, enqueue_turn
from worker.fleet.turnstore import TurnStore

__all__ = ["TurnHandle", "TurnStore", "enqueue_turn", "make_app"]
