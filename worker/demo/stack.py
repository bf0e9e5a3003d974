"""The fleet the demo drives: embedded in this process, or a real one (`worker.demo.remote`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from celery import Celery

from worker.demo.plan import demo_settings
from worker.fleet.testing import stub_fleet
from worker.settings import Settings, environment
from worker.simulator import Simulator

__all__ = ["Fleet", "embedded_fleet"]


@dataclass(frozen=True, slots=True)
class Fleet:
    """What the demo drives: where to send turns, the simulator, the settings, a description."""

    mode: str
    app: Celery
    sim: Simulator
    settings: Settings
    header: str


@contextmanager
def embedded_fleet(concurrency: int) -> Iterator[Fleet]:
    """Redis, simulated providers and a Celery worker, all in this process.

    Ignores RELEVO_* environment variables: nothing may point it elsewhere.
    """
    environment.forget_ours()
    header = (
        f"embedded: Redis (fakeredis) and a Celery worker (threads x{concurrency}) "
        "in this process, simulated providers"
    )
    with Simulator() as sim, stub_fleet(demo_settings(sim.url), concurrency=concurrency) as fleet:
        yield Fleet("embedded", fleet.app, sim, fleet.settings, header)
