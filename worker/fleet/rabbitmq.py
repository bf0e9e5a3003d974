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
import base64
import json
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

from worker.fleet.errors import fleet_errors
from worker.fleet.fairqueue import (
    DEADLINE_HEADER,
    TENANT_HEADER,
    TOKENS_HEADER,
    FairKeys,
    enqueue_sync,
)

__all__ = ["BROKER_DOWN", "RabbitQueue", "outbox_key", "queue_depth", "rabbitmq_conf"]

log = structlog.get_logger("relevo.rabbitmq")
# What can go wrong between here and RabbitMQ: the socket, the protocol, a confirm not come.
BROKER_DOWN: tuple[type[BaseException], ...] = (
    OSError,
    OperationalError,
    amqp.exceptions.AMQPError,
    *pyamqp.Transport.connection_errors,
    *pyamqp.Transport.channel_errors,
)


def outbox_key(namespace: str) -> str:
    """The Redis list a dispatch round moves turns to, on their way to RabbitMQ."""
    return FairKeys(namespace).key("outbox")


def rabbitmq_conf(
    app: Celery,
    url: str,
    queue: str,
    *,
    fair_namespace: str | None,
    send_timeout_s: float,
) -> dict[str, Any]:
    """The Celery settings of a fleet whose broker is the RabbitMQ at `url`;
    `fair_namespace`: fair dispatch's namespace, None when it is off."""
    exchange = Exchange(queue, type="topic")  # type: ignore[no-untyped-call]
    fair = None if fair_namespace is None else _Fair(weakref.ref(app), fair_namespace, queue)
    return {
        "task_queues": [
            Queue(  # type: ignore[no-untyped-call]
                queue, exchange, routing_key=queue, queue_arguments={"x-queue-type": "quorum"}
            )
        ],
        "task_default_queue_type": "quorum",
        "task_default_exchange": queue,
        "task_default_exchange_type": "topic",
        "task_default_routing_key": queue,
        "worker_detect_quorum_queues": True,
        "broker_native_delayed_delivery_queue_type": "quorum",
        "broker_transport_options": {"confirm_publish": True},
        "broker_connection_timeout": send_timeout_s,
        "broker_transport": _transport(url, fair, send_timeout_s),
    }


@dataclass(frozen=True, slots=True)
class _Fair:
    """Where a channel queues a tenant's turn instead of publishing it."""

    app: weakref.ref[Celery]
    namespace: str
    queue: str


class _Channel(pyamqp.Channel):
    """py-amqp's channel: a tenant's turn for the fleet's queue goes to the fair queue, and
    a confirm is waited for no longer than a producer waits for the broker."""

    fair: _Fair | None = None
    confirm_timeout_s: float = 2.0

    def basic_publish(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if self._queued_fairly(msg, *args, **kwargs):
            return None
        return super().basic_publish(msg, *args, **kwargs)

    def basic_publish_confirm(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        if self._queued_fairly(msg, *args, **kwargs):
            return None
        if not kwargs.get("confirm_timeout"):
            kwargs["confirm_timeout"] = self.confirm_timeout_s
        return super().basic_publish_confirm(msg, *args, **kwargs)

    def _queued_fairly(
        self, msg: Any, exchange: str = "", routing_key: str = "", *_: Any, **__: Any
    ) -> bool:
        fair = self.fair
        headers = msg.properties.get("application_headers") or {}
        tenant = headers.get(TENANT_HEADER)
        if fair is None or tenant is None or routing_key != fair.queue:
            return False
        if msg.properties.get("priority"):
            return False
        app = fair.app()
        if app is None:
            return False
        backend = app.backend
        with fleet_errors(backend.url):  # the fair queue's Redis failed, not RabbitMQ
            queued = enqueue_sync(
                backend.client,
                fair.namespace,
                tenant=tenant,
                turn_id=headers["id"],
                deadline_ms=int(headers[DEADLINE_HEADER]),
                input_tokens=int(headers[TOKENS_HEADER]),
                message=_envelope(msg, exchange, routing_key),
            )
        return queued is not None  # None: not loaded yet, publish to RabbitMQ as it is


def _envelope(msg: Any, exchange: str, routing_key: str) -> str:
    """The message as the outbox keeps it, to be published as it was (`_message`)."""
    body = msg.body
    if isinstance(body, str):
        body = body.encode(msg.properties.get("content_encoding") or "utf-8")
    return json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "properties": msg.properties,
            "exchange": exchange,
            "routing_key": routing_key,
        },
        separators=(",", ":"),
    )


def _message(raw: bytes | str) -> tuple[amqp.Message, str, str]:
    data = json.loads(raw)
    message = amqp.Message(base64.b64decode(data["body"]), **data["properties"])
    return message, data["exchange"], data["routing_key"]


def _transport(url: str, fair: _Fair | None, confirm_timeout_s: float) -> type[pyamqp.Transport]:
    """kombu's py-amqp transport (TLS for `amqps://`) with `_Channel` bound to `fair`."""
    channel = type(
        "_FairChannel", (_Channel,), {"fair": fair, "confirm_timeout_s": confirm_timeout_s}
    )
    connection = type("_Connection", (pyamqp.Connection,), {"Channel": channel})
    base = pyamqp.SSLTransport if urlsplit(url).scheme == "amqps" else pyamqp.Transport
    return type("_Transport", (base,), {"Connection": connection})


class RabbitQueue:
    """The fleet's queue on RabbitMQ, seen from outside Celery: how many turns wait in it,
    and the fair queue's outbox published to it. Blocking calls run on a thread."""

    def __init__(self, url: str, queue: str, *, timeout_s: float = 2.0) -> None:
        self.url = url
        self.queue = queue
        self.timeout_s = timeout_s
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

    def publish_sync(self, raws: list[bytes | str]) -> int:
        """Publish outbox messages in order, each confirmed; returns how many went out (all,
        unless the broker failed: the rest are the caller's to keep)."""
        sent = 0
        try:
            with self._channel() as channel:
                for raw in raws:
                    message, exchange, routing_key = _message(raw)
                    channel.basic_publish(
                        message,
                        exchange=exchange,
                        routing_key=routing_key,
                        confirm_timeout=self.timeout_s,
                    )
                    sent += 1
        except BROKER_DOWN as exc:
            log.warning(
                "dispatch.broker_unreachable", error=type(exc).__name__, left=len(raws) - sent
            )
        return sent

    async def forward(self, redis: Redis, outbox: str, most: int) -> int:
        """Publish up to `most` turns of the outbox, oldest first; those the broker did not
        take go back where they were. Returns how many were published."""
        raws: list[bytes | str] | None = await redis.rpop(outbox, most)  # type: ignore[assignment]
        if not raws:
            return 0
        sent = 0
        try:
            sent = await asyncio.to_thread(self.publish_sync, raws)
        finally:
            # Whatever went wrong, the turns not published are not dropped here.
            if sent < len(raws):
                await redis.rpush(outbox, *reversed(raws[sent:]))
        return sent

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
