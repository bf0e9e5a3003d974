"""What sending a turn and reading what became of it raise (beside `InputError`).

    RelevoError (worker.errors)
    ├── FleetUnavailable    the fleet's Redis (broker or turn store) or its RabbitMQ broker
    │   │                   did not answer, refused this client or refused the write;
    │   │                   names which one
    │   ├── TurnNotSent     sending a turn: nothing of it reached the fleet; it will not run
    │   └── TurnRecorded    sending a turn: the fleet has its record; it will run (a
    │                       worker's sweeper sends it): keep its `turn_id`
    ├── TurnTimeout         no result (or no end of its stream) in time; also a TimeoutError
    ├── UnknownTurn         nothing says a turn with that id was sent; also a LookupError
    │                       (`lost`: it was known while a producer waited, and is no longer)
    ├── StreamRestarted     the turn runs again: the text read so far is void
    └── Unreadable          a stored item (a turn's result, a piece of its stream) this
                            release cannot read: a newer release wrote it, or it is damaged

`fleet_errors` is the one place where kombu's, Celery's, py-amqp's and redis-py's failures
of the fleet's Redis or broker become `FleetUnavailable` (or `InputError`, for a turn the
broker refused as too large), for every producer call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from amqp.exceptions import AccessRefused, ChannelError, ContentTooLarge, PreconditionFailed
from kombu.exceptions import OperationalError
from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

from breakers.schema import ReadProblem
from rediskit import refused
from worker.errors import STORE_DOWN, InputError, RelevoError
from worker.observability.redact import redact_url

__all__ = [
    "FleetUnavailable",
    "StreamRestarted",
    "TurnNotSent",
    "TurnRecorded",
    "TurnTimeout",
    "UnknownTurn",
    "Unreadable",
    "check_timeout",
    "fleet_errors",
    "where",
    "write_refusal",
]

# Redis answered and refused a write for a state of its own, not for this client's rights:
# by the reply's error code (redis-py strips the code of the two it has classes for).
_WRITE_REFUSALS: Mapping[str, str] = MappingProxyType(
    {
        "OOM": "its memory is full (maxmemory)",
        "NOREPLICAS": "fewer replicas in sync than min-replicas-to-write",
        "READONLY": "it is a read-only replica",
        "MISCONF": "it cannot save to disk",
    }
)
_CODES: Mapping[type[ResponseError], str] = MappingProxyType(
    {OutOfMemoryError: "OOM", ReadOnlyError: "READONLY"}
)


class FleetUnavailable(RelevoError):
    """The fleet's Redis (or RabbitMQ, `rabbitmq`) at `url` did not answer, refused this
    client (`refused`), or refused the write for a state of its own (a full memory:
    `write_refusal`).

    Sending a turn raises one of its two subclasses, which say whether the turn will run
    (`TurnRecorded`) or not (`TurnNotSent`).
    """

    def __init__(self, url: str, error: BaseException, *, during: str | None = None) -> None:
        """`during`: what was being done, when the caller knows (it ends the message)."""
        self.url = url
        self.refused = refused(error, also=(AccessRefused,))
        self.rabbitmq = url.startswith("amqp")
        why = write_refusal(error)
        if self.refused:
            what = f"refused this client ({type(error).__name__})"
        elif isinstance(error, ChannelError):
            what = f"refused the message ({type(error).__name__}: {error.reply_text})"
        elif why is not None:
            what = f"refused the write ({why})"
        else:
            what = f"did not answer ({type(error).__name__})"
        server = "RabbitMQ" if self.rabbitmq else "Redis"
        message = f"the fleet's {server} at {url} {what}"
        super().__init__(f"{message} {during}" if during else message)


class TurnNotSent(FleetUnavailable):
    """Sending turn `turn_id` failed before anything of it reached the fleet (no
    connection, or Redis refused the client or the write): it will not run. Send it again
    when the fleet answers, under this id or another.
    """

    def __init__(
        self, url: str, error: BaseException, *, turn_id: str, during: str | None = None
    ) -> None:
        super().__init__(url, error, during=during)
        self.turn_id = turn_id


class TurnRecorded(FleetUnavailable):
    """Sending turn `turn_id` failed after its record reached the fleet's Redis: it will
    run, as a worker's sweeper sends a recorded turn the broker does not have (after the
    visibility timeout and a restore interval). Keep `turn_id` and read the turn through
    it; do not send it under a new id, which would run (and be charged) twice. Sending it
    again under the same id is safe: the fleet runs a turn id once.

    `acknowledged` is False when the record was sent and Redis did not answer (a stall):
    a stalled Redis writes it when it wakes. Only a Redis that loses it (restarted empty,
    which loses acknowledged records too) leaves the turn unknown (`UnknownTurn`).
    """

    def __init__(
        self,
        url: str,
        error: BaseException,
        *,
        turn_id: str,
        acknowledged: bool,
        during: str | None = None,
    ) -> None:
        super().__init__(url, error, during=during)
        self.turn_id = turn_id
        self.acknowledged = acknowledged


class TurnTimeout(RelevoError, TimeoutError):
    """No result for the turn in time: still queued or running, or lost."""

    def __init__(self, turn_id: str, waited_s: float) -> None:
        super().__init__(
            f"turn {turn_id!r}: no result after {waited_s:g} s (still queued or running)"
        )
        self.turn_id = turn_id
        self.waited_s = waited_s


class UnknownTurn(RelevoError, LookupError):
    """Nothing in the turn store knows the turn id: no record of it being sent (queued),
    no claim (running), no stream and no result.

    Either no one sent a turn with that id, or it finished longer ago than the results are
    kept (`worker.result_ttl_s`) and its result expired with its other traces.
    """

    def __init__(self, turn_id: str, *, lost: bool = False) -> None:
        """`lost`: the turn was known while a producer waited on it, and no longer is."""
        if lost:
            message = (
                f"turn {turn_id!r} was lost: the turn store no longer knows it (its Redis was "
                "emptied or replaced while the turn waited, and queued turns went with it); "
                "send it again"
            )
        else:
            message = (
                f"unknown turn {turn_id!r}: no turn with that id is queued, running or "
                "finished (never sent, or its result expired)"
            )
        super().__init__(message)
        self.turn_id = turn_id
        self.lost = lost


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
def fleet_errors(url: str, *, during: str | None = None) -> Iterator[None]:
    """Raise `FleetUnavailable` (naming `url`, and `during` if given) for a failure of the
    Redis at `url`."""
    try:
        yield
    except RelevoError:
        raise  # TurnTimeout is a TimeoutError, which a store error can be too
    except ChannelError as exc:
        # RabbitMQ answered and closed the channel over this publish: too large a message
        # is the turn's fault (`[broker] max_message_bytes` above the broker's own limit).
        if _too_large(exc):
            raise InputError(
                f"the broker refused the turn as too large ({exc.reply_text}); "
                "[broker] max_message_bytes should be the broker's max_message_size"
            ) from None
        raise FleetUnavailable(redact_url(url), exc, during=during) from exc
    except (*STORE_DOWN, *_WRAPPERS) as exc:
        if isinstance(exc, RuntimeError) and not _from_store(exc):
            raise
        raise FleetUnavailable(redact_url(url), exc, during=during) from exc


def _too_large(exc: ChannelError) -> bool:
    if isinstance(exc, ContentTooLarge):
        return True
    # RabbitMQ: "PRECONDITION_FAILED - message size 2097254 is larger than configured max size"
    return isinstance(exc, PreconditionFailed) and "max size" in str(exc.reply_text)


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


def write_refusal(exc: BaseException | None) -> str | None:
    """Why Redis refused a write for a state of its own (`OOM: its memory is full...`),
    from `exc` or what it was raised from; None for any other failure. Never the server's
    own words: the code, and what it means."""
    while exc is not None:
        if isinstance(exc, ResponseError):
            # In a pipeline, redis-py puts the command before the reply's words.
            reply = str(exc).rsplit(" of pipeline caused error: ", 1)[-1]
            code = _CODES.get(type(exc)) or reply.split(" ", 1)[0]
            if code in _WRITE_REFUSALS:
                return f"{code}: {_WRITE_REFUSALS[code]}"
        exc = exc.__cause__
    return None
