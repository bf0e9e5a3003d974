"""A provider that says "retry now" (`Retry-After: 0`, or a date already past) is tried
again on the next turn: its pair cools down for the shortest time, never the 30 s default.

Real turns over HTTP to the simulator, the cooldown kept in the real Redis.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

import breakers
from tests.chainkit import settings, turn
from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Status

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PRIMARY, BACKUP = "openai/alpha", "anthropic/beta"


def _past_date() -> str:
    return format_datetime(datetime.now(UTC) - timedelta(minutes=5), usegmt=True)


@pytest.mark.parametrize("retry_after", ["0", "date in the past"])
async def test_a_pair_told_to_retry_now_is_called_by_the_next_turn(
    sim: Simulator, redis_url: str, namespace: str, retry_after: str
) -> None:
    hint = _past_date() if retry_after == "date in the past" else retry_after
    config = settings(sim.url, (PRIMARY, BACKUP), redis={"url": redis_url, "namespace": namespace})
    guard = open_guard(config)
    redis = breakers.connect(redis_url, timeout_s=2.0)
    try:
        async with make_client() as client:
            chain = Chain.from_settings(config, client, guard=guard)
            sim.set_faults("alpha", Fault(status=429, headers={"retry-after": hint}))
            first = await chain.run(turn())
            assert (first.status, first.effective_model) == (Status.OK, BACKUP)
            assert first.attempts[0].error_class == "rate_limited"
            fleet = breakers.FleetBreakers(redis, namespace=namespace)
            pair = breakers.Pair("oa", "alpha")
            assert (await fleet.check([], [pair])).cooldowns[pair] <= 0.001

            sim.set_faults("alpha")
            second = await chain.run(turn())
            assert (second.status, second.effective_model, second.step) == (
                Status.OK,
                PRIMARY,
                0,
            )
    finally:
        await redis.aclose()
        await guard.aclose()
