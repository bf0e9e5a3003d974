"""Celery: the app and its one task, `relevo.run_turn`.

The task stays thin: it hands the payload to the process's `TurnRunner` and
returns the result as a dict. Nothing is lost: acknowledgement comes after the
turn (late ack), a worker that dies puts its turn back, and a turn delivered
twice is run once (the runner's claim and stored result). Start a worker with
`relevo worker`, or `celery -A worker.fleet.app worker -P threads` with
`RELEVO_CONFIG` naming the chain configuration.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
import structlog
from celery import Celery
from celery.signals import celeryd_init, worker_ready
from kombu.transport import redis as kombu_redis

from worker.errors import ConfigError
from worker.fleet.results import TurnResults, result_backend
from worker.fleet.runner import INVALID_INPUT, TurnRunner
from worker.fleet.sending import TASK_NAME, send_turn
from worker.fleet.startup import follow_parent, migrate_budget_keys, warn_if_not_persistent
from worker.observability import tracing
from worker.settings import RedisSettings, Settings, load_settings

__all__ = ["TASK_NAME", "app", "make_app"]

log = structlog.get_logger("relevo.worker")


def make_app(
    settings: Settings | None = None,
    *,
    runner: Callable[[], TurnRunner] | None = None,
) -> Celery:
    """A Celery app for `settings` (or the environment), whose task runs on `runner()`."""
    redis = settings.redis if settings else _redis_from_env()
    app = Celery("relevo", broker=redis.url, backend=redis.url, set_as_current=False)
    app.backend_cls = result_backend(redis.url)
    visibility_s = settings.visibility_timeout_s if settings else 2 * 3600 + 60
    restore_s = settings.worker.restore_interval_s if settings else 10.0
    transport: dict[str, Any] = {
        "visibility_timeout": visibility_s,
        "unacked_restore_interval": restore_s,
        "unacked_restore_throttle": 1,
    }
    results: dict[str, Any] = {}
    if redis.sentinel_master is not None:
        # Celery reads the same sentinel:// URL; the primary's name comes apart.
        transport["master_name"] = results["master_name"] = redis.sentinel_master
    app.conf.update(
        # JSON only: with pickle, anyone who can write to the broker runs code on workers.
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport,
        result_backend_transport_options=results,
        broker_connection_retry_on_startup=True,
        broker_transport=_broker_transport(redis.url),
        result_expires=settings.worker.result_ttl_s if settings else 86_400,
        task_default_queue=settings.worker.queue if settings else "relevo",
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        # Where `send_turn` records the turns it sends (`TurnKeys.sent`), and how long.
        relevo_namespace=redis.namespace,
    )
    # Both sides make the app: a producer's sends and a worker's turns join one trace.
    if settings is not None and tracing.configure_tracing(settings.observability):
        tracing.trace_celery(TASK_NAME)
    get_runner = runner or _lazy_runner(settings)

    # shared=False: each app runs its own runner, even with several apps in one process.
    # ignore_result: the runner saved the result in the turn store, where the result
    # backend reads it (`worker.fleet.results`); only a task that raised is Celery's to store.
    @app.task(  # type: ignore[untyped-decorator]
        name=TASK_NAME,
        acks_late=True,
        reject_on_worker_lost=True,
        shared=False,
        ignore_result=True,
        store_errors_even_if_ignored=True,
    )
    def run_turn(payload: Any) -> dict[str, Any]:
        # The producer's trace context came in the message headers (None: tracing is off).
        result = get_runner().run(payload, carrier=tracing.carried(run_turn.request))
        # Readers wait under the task's id. The turn store holds a result under its turn's
        # id, which `send_turn` makes the task's; not a payload that was not a turn, nor a
        # message sent with another task id.
        task_id = run_turn.request.id
        unsaved = result["reason"] == INVALID_INPUT or result["turn_id"] != task_id
        if unsaved and isinstance(run_turn.backend, TurnResults):
            run_turn.backend.keep(task_id, result)
        return result

    def ready(sender: Any = None, **_: Any) -> None:
        # A worker of this app consuming: it also re-sends the turns the broker lost.
        if getattr(sender, "app", None) is not app:
            return
        try:
            get_runner().start_sweeper(lambda turn: send_turn(app, turn))
        except Exception as exc:  # Celery would swallow it: say why there is no sweeper
            log.warning("sweep.not_started", error=str(exc))

    # Held by the app and connected weakly: a producer's app (the CLI's, a web app's) must
    # not outlive its process's teardown through a global signal receiver.
    app.relevo_on_ready = ready
    worker_ready.connect(ready)
    return app


class _Channel(kombu_redis.Channel):
    """kombu's Redis channel, with one client per pool and a teardown that survives.

    kombu makes a new `redis.Redis` for each delivery's unacked record and each
    ack, and redis-py 8 takes about 60 us to build one: two per turn, in the
    consumer thread every turn passes through. A client holds no connection of
    its own (each command takes one from the pool), so threads may share it.
    """

    _shared: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        shared = self._shared
        # A reconnect replaces the pool: the client must follow it.
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared = super()._create_client()  # type: ignore[no-untyped-call]
        return shared

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


def _redis_from_env() -> RedisSettings:
    return RedisSettings(
        url=os.environ.get("RELEVO_REDIS__URL", RedisSettings().url),
        namespace=os.environ.get("RELEVO_REDIS__NAMESPACE", RedisSettings().namespace),
        sentinel_master=os.environ.get("RELEVO_REDIS__SENTINEL_MASTER") or None,
    )


def _lazy_runner(settings: Settings | None) -> Callable[[], TurnRunner]:
    """The process's runner, made on first use: importing or starting needs no Redis."""
    lock = threading.Lock()
    made: list[TurnRunner] = []

    def get() -> TurnRunner:
        with lock:
            if not made:
                made.append(TurnRunner(settings or _settings_from_env()))
            return made[0]

    return get


def _settings_from_env() -> Settings:
    path = os.environ.get("RELEVO_CONFIG")
    if not path:
        raise RuntimeError("RELEVO_CONFIG must name the chain configuration (TOML) to run turns")
    return load_settings(path)


def _app_from_env() -> Celery:
    path = os.environ.get("RELEVO_CONFIG")
    # The producers that import this module (a web app) hold no provider keys: a worker
    # started from it checks them as it starts (`starting`).
    settings = load_settings(path, require_secrets=False) if path else None
    app = make_app(settings)

    def starting(instance: Any, **_: Any) -> None:
        # Only `celery -A worker.fleet.app worker` starting this app: not an app made in-process.
        if getattr(instance, "app", None) is not app:
            return
        follow_parent()
        if settings is not None:
            try:
                settings.check_secrets()
            except ConfigError as exc:
                # Celery logs and swallows a receiver's exception: only an exit stops it.
                raise SystemExit(f"relevo: {exc}") from None
            from worker.observability.logs import configure_from_settings

            # Celery redirects `sys.stderr` into its logger, which would prefix each JSON line.
            configure_from_settings(settings, stream=sys.__stderr__ or sys.stderr)
            warn_if_not_persistent(settings.redis)
            migrate_budget_keys(settings.redis)

    celeryd_init.connect(starting, weak=False)
    return app


app = _app_from_env()
