"""The fleet's Celery app: broker transport (Redis, or RabbitMQ), result backend, settings.

`celery_app(settings)` is an app with no task of its own: enough to publish a turn by
its task's name (`worker.fleet.enqueue`). `worker.fleet.app.make_app` adds the task and
what a worker does as it starts. Producers and workers configure the app here, once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import redis
import structlog
from celery import Celery
from kombu import serialization
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Message as VirtualMessage
from kombu.utils.json import dumps, loads

from worker.fleet.agreement import FleetShape
from worker.fleet.envelope import compact, redis_message
from worker.fleet.errors import fleet_errors
from worker.fleet.fairqueue import FairTurn
from worker.fleet.rabbitmq import held_delivery_s, rabbitmq_conf
from worker.fleet.results import result_backend
from worker.observability import tracing
from worker.settings import Settings

__all__ = [
    "SEND_TIMEOUT_S",
    "TASK_NAME",
    "celery_app",
    "store_client",
]

log = structlog.get_logger("relevo.broker")
# The one task every turn is published to (`worker.fleet.app.RunTurn`).
TASK_NAME = "relevo.run_turn"
# The broker transport options that turn the fair queue on, and name the fleet's queue.
FAIR_NAMESPACE = "relevo_fair_namespace"
FAIR_QUEUE = "relevo_fair_queue"
# A producer gives up on a broker that does not answer within this, or the store's own
# timeout if longer (kombu's default: 6 s of retries, then the caller's traceback).
SEND_TIMEOUT_S = 2.0
# After a failed publish or result read: two quick tries more, not Celery's defaults
# (the result store's retries alone last about 20 s).
_QUICK_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# Celery's JSON, with non-ASCII text as UTF-8: kombu's own escapes each such character
# (`\u4e2d`, six bytes for three), which doubles a CJK turn on the wire and against the
# broker's size limit. The content type stays JSON: every release's worker reads it.
COMPACT_JSON = "relevo_json"
serialization.register(  # type: ignore[no-untyped-call]
    COMPACT_JSON,
    compact,
    loads,
    content_type="application/json",
    content_encoding="utf-8",
)
serialization.registry.type_to_name["application/json"] = "json"  # what errors name


def celery_app(settings: Settings) -> Celery:
    """A Celery app on the fleet `settings` describe, with no task."""
    redis, broker, fairness = settings.redis, settings.broker, settings.fairness
    broker_url = broker.url or redis.url
    app = Celery("relevo", broker=broker_url, backend=redis.url, set_as_current=False)
    app.backend_cls = result_backend(redis.url)
    queue = settings.worker.queue
    send_timeout_s = max(redis.timeout_s, SEND_TIMEOUT_S)
    results: dict[str, Any] = {"retry_policy": _QUICK_RETRY}
    if redis.sentinel_master is not None:
        results["master_name"] = redis.sentinel_master
    if broker.url is not None:
        held_s = held_delivery_s(settings.turn_deadline_s)
        fair_namespace = redis.namespace if fairness.enabled else None
        app.conf.update(
            rabbitmq_conf(
                app,
                broker.url,
                queue,
                fair_namespace=fair_namespace,
                send_timeout_s=send_timeout_s,
                held_s=held_s,
            )
        )
    else:
        app.conf.update(
            broker_transport_options=_redis_transport(settings, send_timeout_s),
            broker_transport=_broker_transport(redis.url),
        )
    app.conf.update(
        # JSON only: with pickle, anyone who can write to the broker runs code on workers.
        task_serializer=COMPACT_JSON,
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A lost broker connection leaves the turns running: each saves its result, and the
        # delivery the broker hands out again finds it (docs/deploy.md, "Shutting down").
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Off: under the threads pool a cold shutdown (a second Ctrl-C, SIGQUIT) already
        # waits for the turns under way, and a soft one sleeps out its whole timeout first
        # (docs/design/worker-pool.md, "Shutdown and a lost broker connection").
        worker_soft_shutdown_timeout=0.0,
        result_backend_transport_options=results,
        task_publish_retry_policy=_QUICK_RETRY,
        task_default_queue=queue,
        # The result store's client too (Celery's default read timeout: 120 s).
        redis_socket_connect_timeout=send_timeout_s,
        redis_socket_timeout=send_timeout_s,
        broker_connection_retry_on_startup=True,
        result_expires=settings.worker.result_ttl_s,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        # Where `send_turn` records the turns it sends (`TurnKeys.sent`), and how long.
        relevo_namespace=redis.namespace,
        # How long `send_turn` tries to reach the broker, and the largest turn it takes.
        relevo_send_timeout_s=send_timeout_s,
        relevo_max_message_bytes=broker.max_message_bytes,
        # Whether a turn's message may carry what relevo 0.1.0's workers refuse (`payload`).
        relevo_oldest_release=settings.worker.oldest_release,
        # The chains a turn may name (`enqueue._payload` refuses another at once).
        relevo_chains=settings.chain_names,
        # What every turn's message states of the fleet it was sent to (`agreement`).
        relevo_fleet=FleetShape(
            "rabbitmq" if broker.url else "redis", fairness.enabled, redis.namespace
        ).header(),
        # A channel the broker closes (a delivery held past RabbitMQ's consumer timeout,
        # a message it refuses) is opened again: Celery's default ends the whole node.
        broker_channel_error_retry=True,
    )
    # Both sides make the app: a producer's sends and a worker's turns join one trace.
    if tracing.configure_tracing(settings.observability):
        tracing.trace_celery(TASK_NAME)
    return app


def _redis_transport(settings: Settings, send_timeout_s: float) -> dict[str, Any]:
    """kombu's Redis transport options: redelivery after the visibility timeout, the fair
    queue, timeouts."""
    redis = settings.redis
    transport: dict[str, Any] = {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_restore_interval": settings.worker.restore_interval_s,
        "unacked_restore_throttle": 1,
    }
    if settings.fairness.enabled:
        # The channel queues this app's turns for their tenants (`_Channel._put`).
        transport[FAIR_NAMESPACE] = redis.namespace
        transport[FAIR_QUEUE] = settings.worker.queue
    # Without a read timeout, a publish to a broker that hangs (or vanished without closing
    # the connection) waits for ever.
    transport["socket_connect_timeout"] = transport["socket_timeout"] = send_timeout_s
    if redis.sentinel_master is not None:
        # Celery reads the same sentinel:// URL; the primary's name comes apart.
        transport["master_name"] = redis.sentinel_master
    return transport


@contextmanager
def store_client(app: Celery, channel: Any) -> Iterator[Any]:
    """A blocking client on the fleet's Redis: the broker channel's own when the broker is
    Redis (one server, the connection the publish then uses), else the result store's,
    whose failures name that Redis (`FleetUnavailable`), not the broker."""
    if isinstance(channel, kombu_redis.Channel):
        with channel.conn_or_acquire() as client:
            yield client
    else:
        backend = app.backend
        with fleet_errors(backend.url):
            yield backend.client


class _Message(VirtualMessage):
    """A delivery from the Redis broker's queue, in the RabbitMQ outbox's format too: a
    producer on RabbitMQ queued it in the fair queue, a dispatcher on Redis moved it here."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        super().__init__(redis_message(payload), channel=channel, **kwargs)  # type: ignore[no-untyped-call]


class _Channel(kombu_redis.Channel):
    """kombu's Redis channel, with one client per pool and a teardown that survives.

    kombu makes a new `redis.Redis` for each delivery's unacked record and each
    ack, and redis-py 8 takes about 60 us to build one: two per turn, in the
    consumer thread every turn passes through. A client holds no connection of
    its own (each command takes one from the pool), so threads may share it.
    """

    _shared: Any = None
    Message = _Message

    def _brpop_read(self, **options: Any) -> Any:
        # An item that is not even JSON, popped from the queue: kombu's own read would
        # raise out of the consumer and end the whole worker. Dropped, and said so.
        try:
            return super()._brpop_read(**options)  # type: ignore[no-untyped-call]
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.error("broker.message_unreadable", error=type(exc).__name__)
            return True

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        shared = self._shared
        # A reconnect replaces the pool: the client must follow it.
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared = super()._create_client()  # type: ignore[no-untyped-call]
        return shared

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        # A turn for the fleet's queue waits in its tenant's fair queue instead, as the
        # very message kombu would have queued: dispatch moves it on, unchanged.
        if self.connection is None:
            # A publish kombu retries after a stall can land on the channel the failure
            # closed: a connection error is what its retry and the caller's send expect
            # (the turn is recorded: `TurnRecorded`), not an AttributeError.
            raise redis.ConnectionError("the broker channel is closed")
        options = self.connection.client.transport_options
        turn = FairTurn.read(message.get("headers") or {})
        if (
            turn is None
            or queue != options.get(FAIR_QUEUE)
            or self._get_message_priority(message)  # type: ignore[no-untyped-call]
            or "_publish_batch" in kwargs
        ):
            super()._put(queue, message, **kwargs)  # type: ignore[no-untyped-call]
            return
        with self.conn_or_acquire() as client:
            queued = turn.enqueue(
                client,
                options[FAIR_NAMESPACE],
                dumps(message),  # type: ignore[no-untyped-call]
            )
        if queued is None:  # the fair queue's script is not loaded yet (`enqueue_sync`)
            super()._put(queue, message, **kwargs)  # type: ignore[no-untyped-call]

    def _connparams(self, asynchronous: bool = False) -> Any:
        # After a lost connection Celery closes the kombu connection twice: the first close
        # detaches the transport, the second closes the channel again and tries to put back
        # its deliveries, which needs a client. kombu then fails with an AttributeError that
        # nothing catches, and the whole worker process dies with the turns it was running.
        # A connection error is what kombu's teardown expects and ignores; the deliveries stay
        # in the unacked set and come back after the visibility timeout.
        if self.connection.client is None:
            raise redis.ConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]


class _SentinelChannel(_Channel, kombu_redis.SentinelChannel):
    """The same channel, through Redis Sentinel."""


class _Transport(kombu_redis.Transport):
    Channel = _Channel


class _SentinelTransport(kombu_redis.SentinelTransport):
    Channel = _SentinelChannel


_TRANSPORTS: dict[str, type[kombu_redis.Transport]] = {
    "redis": _Transport,
    "rediss": _Transport,
    "sentinel": _SentinelTransport,
}


def _broker_transport(url: str) -> type[kombu_redis.Transport] | None:
    """kombu's Redis transport with our channel, for the URLs that transport serves."""
    return _TRANSPORTS.get(urlsplit(url).scheme)
