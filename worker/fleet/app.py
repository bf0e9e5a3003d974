"""Celery: the app a worker runs, and its one task, `RunTurn` (`relevo.run_turn`).

The task stays thin: it hands the payload to its app's `TurnRunner` and returns the
result as a dict. Nothing is lost: acknowledgement comes after the turn (late ack), a
worker that dies puts its turn back, and a turn delivered twice is run once (the
runner's claim and stored result). Start a worker with `relevo worker`, or
`celery -A worker.fleet.app worker -P threads` with `RELEVO_CONFIG` naming the chain
configuration.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import structlog
from celery import Celery, Task
from celery.signals import celeryd_init, worker_ready

from worker.errors import ConfigError
from worker.fleet.agreement import FLEET_HEADER
from worker.fleet.broker import TASK_NAME, celery_app
from worker.fleet.enqueue import send_turn
from worker.fleet.results import TurnResults
from worker.fleet.runner import INVALID_INPUT, TurnRunner
from worker.fleet.schema import SCHEMA_HEADER
from worker.fleet.startup import follow_parent, migrate_budget_keys, warn_if_not_persistent
from worker.observability import tracing
from worker.settings import Settings, environment, load_settings

__all__ = ["TASK_NAME", "RunTurn", "app", "make_app"]

log = structlog.get_logger("relevo.worker")


class RunTurn(Task):  # type: ignore[misc]
    """The fleet's one task: a turn payload in, its result (a dict) out.

    Each app made by `make_app` registers Celery's subclass of it for that app
    (`Celery.subclass_with_self`, as `@app.task` makes one: Celery keeps a task's app on
    its class), and finds its runner through its app (`runner`): several apps in one
    process (the embedded demo, tests) each run their own turns.
    """

    name = TASK_NAME
    acks_late = True
    reject_on_worker_lost = True
    # The runner saved the result in the turn store, where the result backend reads it
    # (`worker.fleet.results`); only a task that raised is Celery's to store.
    ignore_result = True
    store_errors_even_if_ignored = True

    def runner(self) -> TurnRunner:
        """The runner of this task's app (`make_app`)."""
        get: Callable[[], TurnRunner] = self.app.relevo_runner
        return get()

    def run(self, payload: Any) -> dict[str, Any]:
        # The producer's trace context and the turn's schema version came in the message
        # headers (None: tracing is off; an older producer's message).
        task_id = self.request.id
        result = self.runner().answer(
            payload,
            carrier=tracing.carried(self.request),
            version=getattr(self.request, SCHEMA_HEADER, None),
            task_id=task_id,
            fleet=getattr(self.request, FLEET_HEADER, None),
        )
        # Readers wait under the task's id. The turn store holds a result under its turn's
        # id, which `send_turn` makes the task's; not a payload that was not a turn, nor a
        # message sent with another task id.
        unsaved = result["reason"] == INVALID_INPUT or result["turn_id"] != task_id
        if unsaved and isinstance(self.backend, TurnResults):
            self.backend.keep(task_id, result)
        return result


def make_app(settings: Settings, *, runner: Callable[[], TurnRunner] | None = None) -> Celery:
    """A Celery app for `settings`, whose task runs on `runner()`."""
    app = celery_app(settings)
    get_runner = runner or _lazy_runner(settings)
    app.relevo_runner = get_runner
    app.register_task(app.subclass_with_self(RunTurn, keep_reduce=True)())

    def ready(sender: Any = None, **_: Any) -> None:
        # A worker of this app consuming: it also re-sends the turns the broker lost, and
        # dispatches the tenants' turns from the fair queue.
        if getattr(sender, "app", None) is not app:
            return
        try:
            process = get_runner().process
            process.start_sweeper(lambda turn: send_turn(app, turn))
            process.start_dispatcher()
        except Exception as exc:  # Celery would swallow it: say why there is none
            log.warning("sweep.not_started", error=str(exc))

    # Held by the app and connected weakly: a producer's app (the CLI's, a web app's) must
    # not outlive its process's teardown through a global signal receiver.
    app.relevo_on_ready = ready
    worker_ready.connect(ready)
    return app


def _lazy_runner(settings: Settings) -> Callable[[], TurnRunner]:
    """The process's runner, made on first use: importing or starting needs no Redis."""
    lock = threading.Lock()
    made: list[TurnRunner] = []

    def get() -> TurnRunner:
        with lock:
            if not made:
                made.append(TurnRunner(settings))
            return made[0]

    return get


def _app_from_env() -> Celery:
    path = environment.config_path()
    if path is None:
        # Every app is built from the whole configuration: the defaults and variables
        # of `Settings`, never a second reading of them here.
        raise ConfigError(f"{environment.CONFIG_VARIABLE} must name the chain configuration (TOML)")
    # The producers that import this module (a web app) hold no provider keys: a worker
    # started from it checks them as it starts (`starting`).
    settings = load_settings(path, require_secrets=False)
    app = make_app(settings)

    def starting(instance: Any, **_: Any) -> None:
        # Only `celery -A worker.fleet.app worker` starting this app: not an app made in-process.
        if getattr(instance, "app", None) is not app:
            return
        follow_parent()
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


app: Celery  # declared for readers and type checkers; `__getattr__` builds it
_made: list[Celery] = []
_making = threading.Lock()


def __getattr__(name: str) -> Celery:
    """`app`, built on first use: importing this module (the `relevo` command does, through
    `worker.fleet`) reads no configuration, so a bad `RELEVO_CONFIG` cannot stop
    `relevo --version`; `celery -A worker.fleet.app` and `from worker.fleet.app import app`
    build it, and fail on a bad one, as before."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _making:
        if not _made:
            _made.append(_app_from_env())
        return _made[0]
