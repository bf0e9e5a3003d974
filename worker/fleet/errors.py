"""What sending a turn and reading what became of it raise (beside `InputError`).

RelevoError (worker.errors)
├── TurnTimeout         no result (or no end of its stream) in time; also a TimeoutError
└── StreamRestarted     the turn runs again: the text read so far is void
"""

from __future__ import annotations

from worker.errors import RelevoError

__all__ = ["StreamRestarted", "TurnTimeout"]


class TurnTimeout(RelevoError, TimeoutError):
    """No result for the turn in time: still queued or running, lost, or never sent."""

    def __init__(self, turn_id: str, waited_s: float) -> None:
        super().__init__(
            f"turn {turn_id!r}: no result after {waited_s:g} s "
            "(still queued or running, or unknown)"
        )
        self.turn_id = turn_id
        self.waited_s = waited_s


class StreamRestarted(RelevoError):
    """The turn runs again (the worker running it died) after some of its text was read.

    Drop the text read so far: the turn's result is the new run's. Reading the stream
    again gives the new run's text from its start.
    """

    def __init__(self, turn_id: str) -> None:
        super().__init__(f"turn {turn_id!r} runs again (its worker was lost): its text starts over")
        self.turn_id = turn_id
