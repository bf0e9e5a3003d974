"""Sending turns to the fleet: every turn is published by `send_turn`.

    handle = enqueue_turn(request, app=app, limits=settings.limits)   # sync code
    result = handle.get(timeout_s=60)

    async with Producer.from_settings(settings) as producer:          # async code
        handle = await producer.enqueue(request)   # checked here, then sent
        async for text in handle.stream():         # the streamed text, as it arrives
            ...
        result = await handle.result(timeout_s=60)  # TurnResult, or TurnTimeout

`enqueue_turn` and `Producer.enqueue` check the turn here (a bad one never reaches a
worker), then call `send_turn`; so does the workers' sweeper when it re-sends a turn the
broker lost (`worker.fleet.sweeper`). What became of a turn is read through its handle
(`worker.fleet.handles`). `send_turn` publishes through Celery's `send_task`, so its
signals fire (`before_task_publish`); `Producer` runs it on a few threads of its own: a
slow broker holds up the caller that enqueues, never the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import structlog
from celery import Celery
from celery.result import AsyncResult
from kombu.utils.functional import retry_over_time
from redis.asyncio import Redis

from budgets.keys import PLAIN
from rediskit import BLIPS, REFUSED, refused
from worker.errors import InputError
from worker.fleet.agreement import FLEET_HEADER, Agreement, FleetShape
from worker.fleet.broker import TASK_NAME, celery_app, store_client
from worker.fleet.envelope import compact
from worker.fleet.errors import (
    FleetUnavailable,
    TurnNotSent,
    TurnRecorded,
    fleet_errors,
    write_refusal,
)
from worker.fleet.fairqueue import FairTurn
from worker.fleet.handles import AsyncTurnHandle, TurnHandle
from worker.fleet.heartbeat import read_heartbeats
from worker.fleet.schema import SCHEMA_HEADER, TURN_SCHEMA
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.observability.redact import redact_url
from worker.settings import DEFAULT_CHAIN, LimitsSettings, Settings
from worker.turn.intake import checked_turn
from worker.turn.routing import check_chain
from worker.types import TURN_ID_RULE, TurnRequest, is_turn_id

__all__ = ["TASK_NAME", "Producer", "enqueue_turn", "send_turn"]

log = structlog.get_logger("relevo.fleet")
_READ_TIMEOUT_S = 2.0
# send_task takes well under a millisecond when the broker answers: a few threads suffice.
_PUBLISH_THREADS = 4
# What a Redis blip raises on the record's write (a client Redis refuses is no blip), or
# `store_client` for it when the record goes to the result store (a RabbitMQ broker).
_BLIPS: tuple[type[BaseException], ...] = (*BLIPS, FleetUnavailable)
# kombu's `Connection.ensure` defaults, for what a publish retry policy leaves out.
_ENSURE_DEFAULTS = {"max_retries": None, "interval_start": 1, "interval_step": 1, "interval_max": 1}
# What Celery's message body adds around the payload (its args, kwargs and options).
_ENVELOPE_BYTES = 256
_PUBLISHING = "publishing the turn (it is recorded: a worker sends it if it did not go out)"
_CONNECTING = "connecting to send the turn (nothing was sent: it will not run)"


_ARGS_SHOWN = "[content]"


def send_turn(app: Celery, turn: TurnRequest, *, ignore_result: bool = False) -> AsyncResult:
    """Record the turn as sent, then publish it through Celery's `send_task` (its publish
    signals fire).

    The record (`TurnKeys.sent`, `TurnKeys.payloads`) is written first, in the fleet's
    Redis (on the broker connection the publish then uses, when Redis is the broker): a
    turn the broker loses afterwards is re-sent by the workers' sweeper
    (`worker.fleet.sweeper`) instead of vanishing, and readers tell a queued turn from an
    id nobody sent by it. The write is retried as the publish is (`task_publish_retry_policy`),
    so a Redis blip shorter than that costs a moment, not the turn.
    `ignore_result`: Celery neither stores the task's return value nor subscribes this
    process to it; the turn store still holds the result (what `Producer` reads).

    When the broker does not answer within `broker.SEND_TIMEOUT_S` (or the store's
    timeout, if longer) or refuses this client, the exception says whether the turn will
    run: `TurnNotSent` when no part of its record reached Redis (it will not run), and
    `TurnRecorded` once its record was written, or sent and not answered (it will run: the
    sweeper sends it once the record is older than the visibility timeout plus a restore
    interval, as for a turn the broker lost). Sending it again with the same turn id is
    safe either way.
    """
    payload = _payload(turn, app)
    encoded = compact(payload)
    _check_size(app, len(encoded.encode()))
    url = app.conf.broker_url
    recorded = False
    try:
        with fleet_errors(url), app.producer_or_acquire() as producer:
            # Within the app's bound: kombu's own default keeps retrying a dead broker for 6 s.
            producer.connection.ensure_connection(
                max_retries=1, interval_start=0, timeout=app.conf.relevo_send_timeout_s
            )
            _record_sent(app, producer.channel, turn.turn_id, encoded)
            recorded = True
            with fleet_errors(url, during=_PUBLISHING):
                return app.send_task(
                    TASK_NAME,
                    args=[payload],
                    task_id=turn.turn_id,
                    # Shown by Celery's logs, `celery inspect` and Flower: never the turn's text.
                    argsrepr=_ARGS_SHOWN,
                    kwargsrepr="{}",
                    # The payload stays as relevo 0.1.0's workers validate it: no field more.
                    headers={
                        **FairTurn.headers(turn),
                        SCHEMA_HEADER: TURN_SCHEMA,
                        FLEET_HEADER: app.conf.get("relevo_fleet"),
                    },
                    # None, not False: the task's own setting decides, and the message is
                    # as before.
                    ignore_result=True if ignore_result else None,
                    producer=producer,
                )
    except (TurnNotSent, TurnRecorded):
        raise
    except FleetUnavailable as exc:
        cause = exc.__cause__ or exc
        if recorded:
            raise TurnRecorded(
                exc.url, cause, turn_id=turn.turn_id, acknowledged=True, during=_PUBLISHING
            ) from cause
        raise TurnNotSent(exc.url, cause, turn_id=turn.turn_id, during=_CONNECTING) from cause


def _payload(turn: TurnRequest, app: Celery) -> dict[str, Any]:
    """The turn as its message carries it; `InputError` for a chain the fleet has not.

    While relevo 0.1.0 may run it (`[worker] oldest_release`), the message has no field
    0.1.0's workers refuse: a failed tool's `is_error` is left out (the model reads the
    tool's error as its output), and a turn naming a chain other than `default`, with
    metadata, or of a tenant id outside 0.1.0's plain alphabet ("org:1234"), is refused.
    """
    check_chain(turn, app.conf.get("relevo_chains") or (DEFAULT_CHAIN,))
    if app.conf.get("relevo_oldest_release", "0.1.0") == "0.1.0":
        newer = "chain" if turn.chain not in (None, DEFAULT_CHAIN) else None
        if turn.metadata:
            newer = "metadata"
        if not PLAIN.valid(turn.tenant_id):
            newer = "tenant_id"
        if newer is not None:
            raise InputError(
                f"{newer}: cannot be sent while relevo 0.1.0 workers may run the turn; "
                'set [worker] oldest_release = "0.2.0" once none is left (docs/deploy.md)'
            )
        if _marks_errors(turn) or turn.chain is not None:
            messages = tuple(m.model_copy(update={"is_error": False}) for m in turn.messages)
            turn = turn.model_copy(update={"messages": messages, "chain": None})
    return turn.model_dump(mode="json")


def _marks_errors(turn: TurnRequest) -> bool:
    return any(message.is_error for message in turn.messages)


def _check_size(app: Celery, size: int) -> None:
    """`InputError` for a turn whose message the broker would refuse: nothing is sent."""
    limit = app.conf.get("relevo_max_message_bytes") or 0
    if limit and size + _ENVELOPE_BYTES > limit:
        raise InputError(
            f"the turn is {size} bytes as a broker message, over the broker's limit of "
            f"{limit} bytes ([broker] max_message_bytes)"
        )


def _record_sent(app: Celery, channel: Any, turn_id: str, payload: str) -> None:
    """One round trip: the turn's send time and payload; tried again after a connection
    error as the publish is, within the send timeout. The keys' expiry is the sweeper's:
    a producer that could EXPIRE them could empty every service's records at once."""
    keys = TurnKeys(app.conf.get("relevo_namespace") or "relevo")
    policy = {**_ENSURE_DEFAULTS, **(app.conf.task_publish_retry_policy or {})}
    tries, started = 0, time.monotonic()
    # Whether a write went out on a connection and got no answer: a stalled Redis writes
    # it when it wakes, so the turn is recorded even though this call gives up.
    sent = False

    def write() -> None:
        nonlocal tries, sent
        tries += 1
        with store_client(app, channel) as client:
            # Connected first (and greeted): a failure here sent nothing of the record.
            connection = client.connection_pool.get_connection()
            pipe = client.pipeline(transaction=False)
            pipe.connection = connection  # the pipeline gives it back to the pool
            pipe.zadd(keys.sent, {turn_id: int(time.time() * 1000)})
            pipe.hset(keys.payloads, turn_id, payload)
            try:
                pipe.execute()
            except Exception as exc:
                # Redis answered no (a refused client, a full memory): nothing written.
                if not (refused(exc) or write_refusal(exc) is not None):
                    sent = True
                raise

    def again(exc: BaseException, intervals: Iterator[float], retries: int) -> float:
        if refused(exc) or getattr(exc, "refused", False):
            raise exc  # Redis answered and said no: no blip to wait out
        return next(intervals)

    try:
        retry_over_time(  # type: ignore[no-untyped-call]
            write,
            _BLIPS,
            errback=again,
            max_retries=policy["max_retries"] if app.conf.task_publish_retry else 0,
            interval_start=policy["interval_start"],
            interval_step=policy["interval_step"],
            interval_max=policy["interval_max"],
            timeout=app.conf.relevo_send_timeout_s,
        )
    except (*_BLIPS, *REFUSED) as exc:
        spent_s = time.monotonic() - started
        attempts = f"{tries} {'try' if tries == 1 else 'tries'} in {spent_s:.1f} s"
        # The result store's failure is named by `store_client`; the broker's, here.
        where = exc.url if isinstance(exc, FleetUnavailable) else redact_url(app.conf.broker_url)
        cause = (exc.__cause__ or exc) if isinstance(exc, FleetUnavailable) else exc
        if sent:
            during = (
                f"recording the turn ({attempts}; sent and not answered: Redis records it "
                "when it answers, and a worker sends it)"
            )
            raise TurnRecorded(
                where, cause, turn_id=turn_id, acknowledged=False, during=during
            ) from exc
        during = f"recording the turn ({attempts}; nothing was recorded: it will not run)"
        raise TurnNotSent(where, cause, turn_id=turn_id, during=during) from exc


def enqueue_turn(
    request: TurnRequest | dict[str, Any],
    *,
    app: Celery,
    limits: LimitsSettings | None = None,
) -> TurnHandle:
    """Validate the turn and its size here (a bad one never reaches a worker) and enqueue it.

    `limits` should be the workers' (`settings.limits`); the defaults otherwise. Raises
    `InputError` (naming the field) for a turn that is not valid, nothing sent; when the
    broker does not answer or refuses this client, `TurnNotSent` (it will not run) or
    `TurnRecorded` (it will run: keep its `turn_id`), both `FleetUnavailable`s.
    """
    turn = checked_turn(request, limits or LimitsSettings())
    return TurnHandle(turn.turn_id, send_turn(app, turn))


class Producer:
    """Sends turns to the fleet and hands back `AsyncTurnHandle`s; use with `async with`.

    `redis` is where the workers keep results (bytes replies, as `RedisSettings.connect`
    makes them); `limits` should be the workers'. What each call raises:

        enqueue     InputError (not a valid turn: nothing sent); TurnNotSent (it will
                    not run) or TurnRecorded (it will run: keep its turn_id)
        turn        InputError (not a turn id)
        handle.running, .known               FleetUnavailable
        handle.peek                          FleetUnavailable, Unreadable
        handle.result     UnknownTurn (at once), TurnTimeout, FleetUnavailable, Unreadable,
                          ValueError
        handle.events                        the same
        handle.stream                        the same, and StreamRestarted

    `FleetUnavailable` comes within seconds (`broker.SEND_TIMEOUT_S` to send, one read to read)
    and names the Redis; `Unreadable` names the turn and what this release could not read of
    it (a result or piece of text a newer release wrote, or a damaged one); `ValueError` is a
    negative `timeout_s`.
    """

    def __init__(
        self,
        app: Celery,
        redis: Redis,
        *,
        namespace: str = "relevo",
        limits: LimitsSettings | None = None,
    ) -> None:
        self.app = app
        self.redis = redis
        self.limits = limits or LimitsSettings()
        self.store = TurnStore(redis, namespace=namespace)
        self._publisher: ThreadPoolExecutor | None = None
        self._owned = False

    @property
    def chains(self) -> tuple[str, ...]:
        """The chains a turn sent here may name."""
        return tuple(self.app.conf.get("relevo_chains") or (DEFAULT_CHAIN,))

    @classmethod
    def from_settings(cls, settings: Settings) -> Producer:
        """A producer on the fleet `settings` describe; it owns its Celery app and client."""
        timeout_s = max(settings.redis.timeout_s, _READ_TIMEOUT_S)
        producer = cls(
            celery_app(settings),
            settings.redis.connect(timeout_s=timeout_s),
            namespace=settings.redis.namespace,
            limits=settings.limits,
        )
        producer._owned = True
        return producer

    async def enqueue(self, request: TurnRequest | dict[str, Any] | str | bytes) -> AsyncTurnHandle:
        """Check the turn (`InputError` before anything is sent) and send it; if the
        broker does not answer or refuses this client, `TurnNotSent` (it will not run) or
        `TurnRecorded` (it will run: keep its `turn_id`).

        A caller cancelled while the turn is being published does not stop the publish.
        """
        turn = checked_turn(request, self.limits)
        if self._publisher is None:
            self._publisher = ThreadPoolExecutor(_PUBLISH_THREADS, "relevo-publish")
        # ignore_result: otherwise Celery subscribes this long-lived process to each turn's
        # result channel and nothing here ever reads it (results come from the turn store).
        send = functools.partial(send_turn, self.app, turn, ignore_result=True)
        # The caller's context goes along (run_in_executor alone drops it): a
        # before_task_publish handler reads the caller's trace context there.
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._publisher, context.run, send)
        return AsyncTurnHandle(turn.turn_id, self.store, streaming=turn.stream)

    def turn(self, turn_id: str) -> AsyncTurnHandle:
        """A handle on a turn sent earlier (by any process); `InputError` if no turn has
        such an id."""
        if not is_turn_id(turn_id):
            # As parse_turn_request: name the field, never echo the value.
            raise InputError(f"turn_id: not a turn id ({TURN_ID_RULE})")
        return AsyncTurnHandle(turn_id, self.store)

    async def aclose(self) -> None:
        """Finish the publishes under way; close what `from_settings` opened."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            await asyncio.to_thread(publisher.shutdown)
        if self._owned:
            await asyncio.to_thread(self.app.close)
            await self.redis.aclose()

    async def __aenter__(self) -> Producer:
        await self.compare_fleet()
        return self

    async def compare_fleet(self) -> list[str]:
        """Warn at once (log `fleet.settings_differ`) when the live workers state other fleet
        settings than this producer's, or none is alive in its namespace; returns what
        differs. Never raises: Redis away (or heartbeats it may not read), it says nothing."""
        own = FleetShape.parse(self.app.conf.get("relevo_fleet"))
        if own is None:
            return []
        try:
            found = await read_heartbeats(self.redis, self.store.keys)
        except Exception as exc:  # advisory: Redis away, or an ACL that hides heartbeats
            log.debug("fleet.not_compared", error=type(exc).__name__)
            return []
        now_ms = int(time.time() * 1000)
        alive = [b for b in found.beats if b.alive(now_ms)]
        if not alive:
            log.warning(
                "fleet.no_workers",
                namespace=own.namespace,
                detail="no worker heartbeat in this namespace: turns wait until a worker "
                "of this namespace runs",
            )
            return ["namespace"]
        agreement = Agreement(own)
        differ: set[str] = set()
        for beat in alive:
            differ.update(
                agreement.check(FleetShape.parse(beat.fleet), "worker", where=beat.process)
            )
        return sorted(differ)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
