"""`max_in_flight` on a fleet of real worker processes, when one of them dies holding leases:
the dead process's leases end with its heartbeat, and the turns the broker gives back
take a lease like any other, so the tenant never runs more than its bound."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.conftest import WorkerToml
from tests.test_celery_fleet import request, start_worker
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.handles import TurnHandle
from worker.fleet.turnstore import TurnKeys
from worker.settings import load_settings
from worker.simulator import Fault, Simulator

__all__ = ["start_worker"]

pytestmark = pytest.mark.slow

# The lease a dispatch takes lasts the turn deadline plus margins (10 + 10 + 1 s); the
# broker gives an unacknowledged turn back after 25 s: a dead worker's turns come back
# after their dispatch leases ran out.
SECTIONS = """
[retry]
base_delay_s = 0.01

[worker]
queue = "{namespace}"
visibility_timeout_s = 25
restore_interval_s = 1

[fairness]
default_max_in_flight = 2

[budgets]
hold_ttl_s = 10
"""
TURN_S = 1.5
BOUND = 2


@pytest.fixture
def config(worker_toml: WorkerToml) -> Path:
    return worker_toml(SECTIONS)


def _calls_running(sim: Simulator) -> int:
    return sum(1 for r in sim.requests("alpha") if r.outcome is None)


def test_max_in_flight_holds_fleet_wide_after_a_worker_dies_holding_leases(
    config: Path,
    sim: Simulator,
    redis_url: str,
    namespace: str,
    start_worker: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    sim.reset()
    sim.set_faults("alpha", Fault(latency_s=TURN_S, status=None))
    doomed = start_worker("doomed")
    app = make_app(load_settings(config, require_secrets=False))
    handles: list[TurnHandle] = []
    stop = threading.Event()
    counter = iter(range(10_000))
    keys = TurnKeys(namespace)

    def feed() -> None:
        """Keeps the tenant's queue a few turns deep (each turn's queue deadline is its
        10 s deadline: a backlog sent at once would outwait it)."""
        with redis.Redis.from_url(redis_url) as client:
            while not stop.is_set():
                waiting = sum(1 for h in handles if not client.exists(keys.result(h.turn_id)))
                if waiting < 2 * BOUND + 2:
                    handles.append(enqueue_turn(request(next(counter)), app=app))
                time.sleep(0.1)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        until = time.monotonic() + 30
        while _calls_running(sim) < BOUND:
            assert time.monotonic() < until, "the first worker never ran two turns"
            time.sleep(0.05)
        start_worker("survivor")
        with redis.Redis.from_url(redis_url) as client:
            # Killed while it runs turns it holds leases for (its claims name it).
            until = time.monotonic() + 20
            while True:
                holders = [client.get(keys.claim(h.turn_id)) for h in list(handles)]
                mine = [h for h in holders if h is not None and h.endswith(b":%d" % doomed.pid)]
                if len(mine) >= 1 and _calls_running(sim) >= 1:
                    break
                assert time.monotonic() < until, "the first worker ran nothing to be killed in"
                time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        # The dead worker's own calls end at the simulator within a turn's time.
        time.sleep(TURN_S + 0.5)
        most = 0
        until = time.monotonic() + 35  # past the broker giving the dead worker's turns back
        while time.monotonic() < until:
            most = max(most, _calls_running(sim))
            time.sleep(0.05)
    finally:
        stop.set()
        feeder.join(timeout=10)
    assert most <= BOUND, f"{most} turns of one tenant ran at once, its bound is {BOUND}"
    # Nothing lost: every turn is answered.
    results = [h.get(timeout_s=60) for h in handles]
    assert len(results) == len(handles)
    assert sum(1 for r in results if r.status.value == "ok") >= len(results) // 2
