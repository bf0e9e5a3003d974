"""What sending a turn and reading what became of it raise (beside `InputError`).

    RelevoError (worker.errors)
    ├── FleetUnavailable    the fleet's Redis (broker or turn store) did not answer, or
    │                       refused this client; names which one
    ├── TurnTimeout         no result (or no end of its stream) in time; also a TimeoutError
    ├── StreamRestarted     the turn runs again: the text read so far is void
    └── Unreadable          a stored item (a turn's result, a piece of its stream) this
                            release cannot read: a newer release wrote it, or it is damaged

`fleet_errors` is the one place where kombu's, Celery's and redis-py's failures of the
fleet's Redis become `FleetUnavailable`, for every producer call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kombu.exceptions import OperationalError
from redis.asyncio import Redis

from breakers.schema import ReadProblem
from worker.errors import STORE_DOWN, STORE_REFUSED, RelevoError
from worker.observability.redact import redact_url

__all__ = [
    "FleetUnavailable",
    "StreamRestarted",
    "TurnTimeout",
    "Unreadable",
    "check_timeout",
    "fleet_errors",
    "where",
]


class FleetUnavailable(RelevoError):
    """The fleet's Redis at `url` did not answer, or refused this client (`refused`).

    A turn being sent may or may not have gone out: sending it again with the same turn
    id is safe, the fleet runs a turn id once.
    """

    def __init__(self, url: str, error: BaseException) -> None:
        self.url = url
        self.refused = _refused(error)
        what = "refused this client" if self.refused else "did not answer"
        super().__init__(f"the fleet's Redis at {url} {what} ({type(error).__name__})")


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


class Unreadable(RelevoError):
    """A stored item this release cannot read: `newer` when a newer release wrote it (a
    schema version above this release's; that release reads it), else it is damaged
    (not JSON, not UTF-8, not of its shape).

    `what` names the item ("result", "stream"), `turn_id` its turn when it has one, `why`
    what was wrong; never the item's content. Reading the item again gives the same.
    """

    def __init__(self, what: str, problem: ReadProblem, *, turn_id: str | None = None) -> None:
        whose = f"turn {turn_id!r}: its {what}" if turn_id is not None else what
        super().__init__(f"{whose} cannot be read by this release: {problem.why}")
        self.what = what
        self.turn_id = turn_id
        self.why = problem.why
        self.newer = problem.newer


# Celery's result consumer ends its reconnects in a RuntimeError raised from the last
# connection error; kombu wraps a failed connect or publish in OperationalError.
_WRAPPERS: tuple[type[BaseException], ...] = (OperationalError, RuntimeError)


@contextmanager
def fleet_errors(url: str) -> Iterator[None]:
    """Raise `FleetUnavailable` (naming `url`) for a failure of the Redis at `url`."""
    try:
        yield
    except RelevoError:
        raise  # TurnTimeout is a TimeoutError, which a store error can be too
    except (*STORE_DOWN, *_WRAPPERS) as exc:
        if isinstance(exc, RuntimeError) and not _from_store(exc):
            raise
        raise FleetUnavailable(redact_url(url), exc) from exc


def where(client: Redis) -> str:
    """The URL of the Redis `client` talks to, as far as its pool says."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    if "host" not in kwargs:
        return "(the turn store)"
    return f"redis://{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def check_timeout(timeout_s: float | None) -> None:
    """`ValueError` for a timeout that is negative (or not a number)."""
    if timeout_s is not None and not timeout_s >= 0:
        raise ValueError(f"timeout_s: must be 0 or more seconds, not {timeout_s!r}")


def _from_store(exc: BaseException) -> bool:
    cause = exc.__cause__
    return cause is not None and (isinstance(cause, STORE_DOWN) or _from_store(cause))


def _refused(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, STORE_REFUSED):
            return True
        exc = exc.__cause__
    return False
