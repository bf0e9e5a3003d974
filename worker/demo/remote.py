"""`relevo demo --redis URL`: the demo against a real Redis server and a separate worker.

The worker runs elsewhere, started with the same configuration file; the demo
serves the simulated providers at the address that file names (so it can
inject their faults), resets the file's Redis namespace, purges the demo's
queue, and waits for a worker to answer one turn before it begins.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from celery import Celery
from pydantic import ValidationError

from worker.demo.drive import Monitor
from worker.demo.plan import TENANTS, make_request
from worker.demo.stack import Fleet
from worker.errors import STORE_DOWN, ConfigError
from worker.observability.redact import redact_url
from worker.settings import RedisSettings, Settings, load_settings
from worker.simulator import Simulator

__all__ = ["remote_fleet"]

_FIRST_WAIT_S = 5.0
_MORE_WAIT_S = 60.0


@contextmanager
def remote_fleet(redis_url: str, config: Path) -> Iterator[Fleet]:
    """The fleet on `redis_url`; `ConfigError` when no worker answers in time."""
    settings = _settings_for(config, redis_url)
    host, port = _sim_address(settings, config)
    sim = Simulator(host=host, port=port)
    try:
        sim.start()
    except RuntimeError as exc:
        raise ConfigError(f"cannot serve the simulated providers on {host}:{port}: {exc}") from None
    try:
        _reset_namespace(settings)
        from worker.fleet.app import make_app

        app = make_app(settings)
        app.control.purge()
        if not _await_worker(app, _worker_command(config, redis_url)):
            app.control.purge()
            raise ConfigError(f"no worker answered on Redis at {redact_url(redis_url)}")
        header = (
            f"Redis at {redact_url(redis_url)}, a separate worker, simulated providers at {sim.url}"
        )
        yield Fleet("redis", app, sim, settings, header)
    finally:
        sim.stop()


def _settings_for(config: Path, redis_url: str) -> Settings:
    settings = load_settings(config)
    try:
        redis = RedisSettings(**(settings.redis.model_dump() | {"url": redis_url}))
    except ValidationError:
        raise ConfigError(f"--redis: not a Redis URL: {redact_url(redis_url)}") from None
    return settings.model_copy(update={"redis": redis})


def _sim_address(settings: Settings, config: Path) -> tuple[str, int]:
    """The one host:port every simulated provider of the configuration is served at."""
    addresses = {
        (url.hostname or "", url.port)
        for url in (urlsplit(p.base_url) for p in settings.providers.values())
    }
    if len(addresses) != 1:
        raise ConfigError(
            f"{config}: every provider's base_url must name the same host and port "
            "(the simulated providers the demo serves)"
        )
    host, port = addresses.pop()
    if port is None:
        raise ConfigError(f"{config}: the providers' base_url must name a port")
    return host, port


def _reset_namespace(settings: Settings) -> None:
    """Start from a clean slate: no breaker, budget or turn left from an earlier run."""
    monitor = Monitor(settings, TENANTS)
    try:
        monitor.reset()
    except STORE_DOWN as exc:
        url = redact_url(settings.redis.url)
        raise ConfigError(f"cannot reach Redis at {url}: {type(exc).__name__}: {exc}") from None
    finally:
        monitor.close()


def _worker_command(config: Path, redis_url: str) -> str:
    command = f"relevo worker --config {shlex.quote(str(config))}"
    if redis_url != load_settings(config).redis.url:
        command = f"RELEVO_REDIS__URL={shlex.quote(redact_url(redis_url))} {command}"
    return command


def _await_worker(app: Celery, command: str) -> bool:
    """Send one turn and wait for a worker to answer it; say how to start one meanwhile."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from worker.fleet.enqueue import enqueue_turn

    probe = make_request(0).model_copy(update={"tenant_id": "demo-probe"})
    handle = enqueue_turn(probe, app=app)
    try:
        handle.get(timeout_s=_FIRST_WAIT_S)
        return True
    except CeleryTimeout:
        pass
    print(
        f"relevo demo: no worker answered within {_FIRST_WAIT_S:g} s. Start one with the "
        f"same configuration, in another terminal:\n\n    {command}\n\n"
        f"Waiting up to {_MORE_WAIT_S:g} s more (Ctrl-C to give up)...",
        file=sys.stderr,
        flush=True,
    )
    try:
        handle.get(timeout_s=_MORE_WAIT_S)
    except CeleryTimeout:
        return False
    return True
