"""The testing helpers users get: a whole fleet in-process, and a scripted guard.

A user's code that enqueues turns is tested here the way the helpers' docstrings say,
with no Redis server: `stub_fleet` runs fakeredis over TCP and a real Celery worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.chainkit import KEY, run, settings, turn
from worker.fleet import enqueue_turn
from worker.fleet.testing import stub_fleet
from worker.guard import Availability
from worker.guard.testing import ScriptedGuard
from worker.simulator import Fault, Simulator
from worker.types import Status

pytestmark = pytest.mark.slow


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    os.environ["RELEVO_TEST_KEY"] = KEY
    with Simulator() as sim:
        yield sim


def test_enqueued_turns_run_on_the_stub_fleet(simulator: Simulator) -> None:
    simulator.set_faults("alpha", Fault(status=503, times=2))
    with stub_fleet(settings(simulator.url), concurrency=4) as fleet:
        assert fleet.settings.redis.url != "redis://127.0.0.1:6379/0"
        handles = [enqueue_turn(turn(), app=fleet.app) for _ in range(3)]
        results = [h.get(timeout_s=20) for h in handles]
    assert [r.status for r in results] == [Status.OK] * 3
    # Two turns met the overloaded primary and fell back; the third was answered by it.
    assert sorted(r.step for r in results) == [0, 1, 1]
    assert {r.turn_id for r in results} == {h.turn_id for h in handles}


async def test_the_scripted_guard_scripts_the_fleet_view(simulator: Simulator) -> None:
    guard = ScriptedGuard({"alpha": Availability.OPEN}, refuse={"an": "tenant_budget_exhausted"})
    result = await run(settings(simulator.url), turn(), guard=guard)
    # alpha's breaker is open (skipped, no call); beta's provider refuses the money.
    assert result.status is Status.DEGRADED
    assert [a.model for a in result.attempts] == ["openai/alpha", "anthropic/beta"]
    assert [c.provider for c in guard.reserved] == ["oa", "an"]
    assert simulator.calls("alpha") == 0
