"""RabbitMQ as the fleet's broker: a quorum queue, publisher confirms, the fair queue in front.

With `[broker] url = "amqp://…"` Celery publishes turns to RabbitMQ; results, the turn store
and the fair queue stay in Redis (`[redis] url`). The fleet's queue is a quorum queue
(replicated with Raft, on disk) bound to a topic exchange of its own name, which Celery's
native delayed delivery needs; every publish waits for the broker's confirm, so a publish
that returned is on a majority of the broker's nodes. Quorum queues have no global QoS:
Celery sees the queue's type and sets the prefetch per consumer.

With fair dispatch on, a turn's publish does not reach RabbitMQ: the channel queues the
message in its tenant's fair queue in Redis instead (`enqueue_sync`), as the Redis
transport's channel does. A dispatch round moves it to the outbox, a Redis list
(`{N}:fair:outbox`), and the same dispatcher publishes the outbox to RabbitMQ
(`RabbitQueue.forward`), keeping at most `[fairness] queue_depth` turns ready there.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import amqp
import structlog
from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.exceptions import OperationalError
from kombu.transport import pyamqp
from redis.asyncio import Redis

from worker.fleet.envelope import Undecodable, amqp_message, envelope, identify
from worker.fleet.errors import fleet_errors
from worker.fleet.fairqueue import FairKeys, FairTurn

__all__ = [
    "BROKER_DOWN",
    "MAX_MESSAGE_BYTES",
    "Forwarded",
    "RabbitQueue",
    "SetAside",
    "dead_letters_key",
    "held_delivery_s",
    "outbox_key",
    "queue_depth",
    "rabbitmq_conf",
]

log = structlog.get_logger("relevo.rabbitmq")
# What can go wrong between here and RabbitMQ: the socket, the protocol, a confirm not come.
BROKER_DOWN: tuple[type[BaseException], ...] = (
    OSError,
    OperationalError,
    amqp.exceptions.AMQPError,
    *pyamqp.Transport.connection_errors,
    *pyamqp.Transport.channel_errors,
)


# A channel error over one message (its size, a header the broker refuses): the broker
# closes the channel, and the next message may go out on a new one.
_REFUSED: tuple[type[amqp.exceptions.AMQPError], ...] = (
    amqp.exceptions.PreconditionFailed,
    amqp.exceptions.ContentTooLarge,
)
# The first RabbitMQ that honours a consumer's `x-consumer-timeout` argument.
_CONSUMER_TIMEOUT_ARGUMENT = (3, 11, 15)
_UNENCODABLE: tuple[type[Exception], ...] = (struct.error, TypeError, ValueError)
# RabbitMQ's default `consumer_timeout` (30 minutes).
CONSUMER_TIMEOUT_S = 1800.0
# RabbitMQ's own default `max_message_size` (128 MiB).
MAX_MESSAGE_BYTES = 128 * 1024 * 1024
_LIMIT_SETTING = "[broker] max_message_bytes"
# The transport options `_Channel` reads (`rabbitmq_conf`).
_FAIR = "relevo_fair"
_CONFIRM_TIMEOUT = "relevo_confirm_timeout_s"
# A confirm's wait when no options are at hand (a connection kombu has let go).
_CONFIRM_DEFAULT_S = 2.0


def outbox_key(namespace: str) -> str:
    """The Redis list a dispatch round moves turns to, on their way to RabbitMQ."""
    return FairKeys(namespace).key("outbox")


def held_delivery_s(turn_deadline_s: float) -> float:
    """The longest a worker holds a delivery unacknowledged: its turn's run, and a second
    delivery's wait for that run's result, each within the deadline and a margin."""
    return 2 * turn_deadline_s + 60


def dead_letters_key(namespace: str) -> str:
    """The Redis list of outbox entries set aside, newest first (kept for a look)."""
    return FairKeys(namespace).key("dead")


def rabbitmq_conf(
    app: Celery,
    url: str,
    queue: str,
    *,
    fair_namespace: str | None,
    send_timeout_s: float,
    held_s: float = CONSUMER_TIMEOUT_S,
) -> dict[str, Any]:
    """The Celery settings of a fleet whose broker is the RabbitMQ at `url`;
    `fair_namespace`: fair dispatch's namespace, None when it is off; `held_s`: the
    longest a worker may hold a delivery unacknowledged."""
    exchange = Exchange(queue, type="topic")  # type: ignore[no-untyped-call]
    # What the channel reads of its connection's options (py-amqp ignores keys it does
    # not know): how long a confirm is waited for, and where fair dispatch queues a turn.
    options: dict[str, Any] = {"confirm_publish": True, _CONFIRM_TIMEOUT: send_timeout_s}
    if fair_namespace is not None:
        options[_FAIR] = _Fair(weakref.ref(app), fair_namespace, queue)
    return {
        "task_queues": [
            Queue(  # type: ignore[no-untyped-call]
                queue,
                exchange,
                routing_key=queue,
                queue_arguments={"x-queue-type": "quorum"},
                # Per consumer, not per queue: a queue's arguments are fixed when it is
                # declared, and an existing queue declared with others refuses the worker.
                # RabbitMQ 3.11.15 and later honour it; older ones ignore it.
                consumer_arguments={"x-consumer-timeout": int(held_s * 1000)},
            )
        ],
        "task_default_queue_type": "quorum",
        "task_default_exchange": queue,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": queue,
        "worker_detect_quorum_queues": True,
        "broker_native_delayed_delivery_queue_type": "quorum",
        "broker_transport_options": options,
        "broker_connection_timeout": send_timeout_s,
        # TLS for `amqps://`, as kombu's own choice of transport does.
        "broker_transport": _SSLTransport if urlsplit(url).scheme == "amqps" else _Transport,
    }


@dataclass(frozen=True, slots=True)
class _Fair:
    """Where a channel queues a tenant's turn instead of publishing it."""

    app: weakref.ref[Celery]
    namespace: str
    queue: str


class _Channel(pyamqp.Channel):
    """py-amqp's channel: a tenant's turn for the fleet's queue goes to the fair queue, and
    a confirm is waited for no longer than a producer waits for the broker (both as its
    connection's transport options say: `rabbitmq_conf`)."""

    def _option(self, name: str) -> Any:
        # kombu hands its connection to py-amqp's (`client`), and takes it back on close.
        client = getattr(self.connection, "client", None)
        return None if client is None else client.transport_options.get(name)

    def basic_publish(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if self._queued_fairly(msg, *args, **kwargs):
            return None
        return super().basic_publish(msg, *args, **kwargs)

    def basic_publish_confirm(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if self._queued_fairly(msg, *args, **kwargs):
            return None
        if not kwargs.get("confirm_timeout"):
            kwargs["confirm_timeout"] = self._option(_CONFIRM_TIMEOUT) or _CONFIRM_DEFAULT_S
        return super().basic_publish_confirm(msg, *args, **kwargs)

    def _queued_fairly(
        self, msg: Any, exchange: str = "", routing_key: str = "", *_: Any, **__: Any
    ) -> bool:
        fair: _Fair | None = self._option(_FAIR)
        turn = FairTurn.read(msg.properties.get("application_headers") or {})
        if fair is None or turn is None or routing_key != fair.queue:
            return False
        if msg.properties.get("priority"):
            return False
        app = fair.app()
        if app is None:
            return False
        backend = app.backend
        with fleet_errors(backend.url):  # the fair queue's Redis failed, not RabbitMQ
            queued = turn.enqueue(
                backend.client, fair.namespace, envelope(msg, exchange, routing_key)
            )
        return queued is not None  # None: not loaded yet, publish to RabbitMQ as it is


class _Connection(pyamqp.Connection):
    Channel = _Channel


class _Transport(pyamqp.Transport):
    Connection = _Connection


class _SSLTransport(pyamqp.SSLTransport):
    Connection = _Connection


@dataclass(frozen=True, slots=True)
class SetAside:
    """An outbox entry no broker will take: why (`reason`, a word; `why`, a sentence), and
    whose turn, when the entry says."""

    raw: bytes | str
    reason: str
    why: str
    turn_id: str | None
    tenant: str | None

    @classmethod
    def of(cls, raw: bytes | str, reason: str, why: str) -> SetAside:
        return cls(raw, reason, why, *identify(raw))


@dataclass(slots=True)
class Forwarded:
    """What one publishing of the outbox did: turns sent, entries set aside, entries left
    for the next round (the broker failed)."""

    sent: int = 0
    set_aside: list[SetAside] = field(default_factory=list)
    left: list[bytes | str] = field(default_factory=list)


class RabbitQueue:
    """The fleet's queue on RabbitMQ, seen from outside Celery: how many turns wait in it,
    and the fair queue's outbox published to it. Blocking calls run on a thread."""

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        timeout_s: float = 2.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        """`max_message_bytes`: the largest message body the broker takes."""
        self.url = url
        self.queue = queue
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def _channel(self) -> Iterator[Any]:
        with self._lock:
            if self._connection is None:
                self._connection = Connection(  # type: ignore[no-untyped-call]
                    self.url,
                    connect_timeout=self.timeout_s,
                    transport_options={"confirm_publish": True},
                )
            try:
                yield self._connection.default_channel
            except BaseException:
                # A channel the broker closed (a passive declare of no queue) or a lost
                # connection: the next call starts afresh.
                connection, self._connection = self._connection, None
                connection.release()  # type: ignore[no-untyped-call]
                raise

    def version_sync(self) -> tuple[int, ...] | None:
        """The broker's version, as its connection announced it (None: it did not say)."""
        with self._channel() as channel:
            raw = channel.connection.server_properties.get("version")
        if isinstance(raw, bytes):
            raw = raw.decode(errors="replace")
        numbers = str(raw or "").split("+", 1)[0].split("-", 1)[0].split(".")
        try:
            return tuple(int(n) for n in numbers)
        except ValueError:
            return None

    def check_consumer_timeout(self, held_s: float) -> bool:
        """Warn, once at a worker's start, when the broker ignores the consumer timeout each
        worker asks for (before RabbitMQ 3.11.15): then its `consumer_timeout` must exceed
        `held_s`, which no client can read. False when it warned."""
        try:
            version = self.version_sync()
        except BROKER_DOWN as exc:
            log.warning("broker.version_unread", error=type(exc).__name__)
            return True
        if version is None or version >= _CONSUMER_TIMEOUT_ARGUMENT:
            return True
        log.warning(
            "broker.consumer_timeout_not_set",
            broker_version=".".join(map(str, version)),
            needed_s=held_s,
            detail="this RabbitMQ ignores the consumer timeout a worker asks for: set its "
            f"consumer_timeout above {held_s:.0f} s, or a turn held longer costs its "
            "worker a channel and a redelivery of the turns on it (docs/deploy.md)",
        )
        return False

    def ready_sync(self) -> int:
        """Turns in the queue that no worker has taken (0 while the queue does not exist).

        A passive declare: it reads the queue and creates nothing."""
        try:
            with self._channel() as channel:
                _, ready, _ = channel.queue_declare(self.queue, passive=True)
        except amqp.exceptions.NotFound:
            return 0
        return int(ready)

    async def ready(self) -> int:
        """`ready_sync`, off the event loop; 0 when the broker does not answer (the outbox
        then holds the turns back)."""
        try:
            return await asyncio.to_thread(self.ready_sync)
        except BROKER_DOWN as exc:
            log.warning("dispatch.broker_unreachable", error=type(exc).__name__)
            return 0

    def publish_sync(self, raws: list[bytes | str]) -> Forwarded:
        """Publish outbox entries in order, each confirmed. An entry no broker will take
        (not a message, over `max_message_bytes`, refused by the broker) is set aside and
        the rest go on; a broker that fails stops the publishing, the rest are `left`."""
        done = Forwarded()
        for at, raw in enumerate(raws):
            try:
                message, exchange, routing_key = amqp_message(raw, self.queue)
            except Undecodable as exc:
                done.set_aside.append(SetAside.of(raw, "undecodable", exc.why))
                continue
            size = len(message.body)
            if size > self.max_message_bytes:
                why = f"its {size}-byte message is over the broker's {self.max_message_bytes}"
                done.set_aside.append(SetAside.of(raw, "too_large", f"{why} ({_LIMIT_SETTING})"))
                continue
            try:
                with self._channel() as channel:
                    channel.basic_publish(
                        message,
                        exchange=exchange,
                        routing_key=routing_key,
                        confirm_timeout=self.timeout_s,
                    )
            except _REFUSED as exc:
                # The broker closed the channel over this message alone; the next one
                # goes out on a channel opened afresh.
                why = f"the broker refused it ({type(exc).__name__}: {exc.reply_text})"
                done.set_aside.append(SetAside.of(raw, "refused", why))
                continue
            except _UNENCODABLE as exc:
                # Properties no AMQP frame can carry (an integer too large, text where a
                # number goes): py-amqp fails before it writes anything.
                why = f"its properties cannot be sent ({type(exc).__name__})"
                done.set_aside.append(SetAside.of(raw, "undecodable", why))
                continue
            except BROKER_DOWN as exc:
                done.left = raws[at:]
                log.warning(
                    "dispatch.broker_unreachable", error=type(exc).__name__, left=len(done.left)
                )
                break
            done.sent += 1
        return done

    async def forward(self, redis: Redis, outbox: str, most: int) -> Forwarded:
        """Publish up to `most` turns of the outbox, oldest first; those the broker did not
        take go back where they were, those set aside are the caller's to answer."""
        raws: list[bytes | str] | None = await redis.rpop(outbox, most)  # type: ignore[assignment]
        if not raws:
            return Forwarded()
        done = Forwarded(left=raws)
        try:
            done = await asyncio.to_thread(self.publish_sync, raws)
        finally:
            # Whatever went wrong, the turns not published are not dropped here.
            if done.left:
                await redis.rpush(outbox, *reversed(done.left))
        return done

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.release()  # type: ignore[no-untyped-call]


async def queue_depth(url: str, queue: str, *, timeout_s: float = 2.0) -> int | None:
    """How many turns wait in the fleet's queue on the RabbitMQ at `url`, on a connection of
    its own; None when the broker does not answer or refuses this client."""
    rabbit = RabbitQueue(url, queue, timeout_s=timeout_s)
    try:
        return await asyncio.to_thread(rabbit.ready_sync)
    except BROKER_DOWN as exc:
        log.warning("broker.queue_unreadable", error=type(exc).__name__)
        return None
    finally:
        await asyncio.to_thread(rabbit.close)
