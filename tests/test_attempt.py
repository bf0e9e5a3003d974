"""One attempt's books and breaker word: what each attempt is charged adds up to the turn's
cost, and a probe the turn's deadline cuts off is the breaker's failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import breakers
from tests.chainkit import run, settings, turn
from worker.adapters import make_client
from worker.guard.redis_guard import open_guard
from worker.guard.stores import breaker_store
from worker.guard.testing import ScriptedGuard
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Status

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


CHAIN = ("openai/alpha", "anthropic/beta")


# Each way an attempt can end, on the primary (the backup answers when the turn moves on).
ENDINGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "answered": ({}, {}),
    "overloaded, not billed": ({"status": 529}, {}),
    "no first byte, billed": ({"stall_first_byte_s": 3.0}, {}),
    "streamed then broke": ({"error_after_tokens": 2}, {"stream": True}),
    "cut by the deadline": ({"stall_first_byte_s": 3.0}, {"deadline_s": 0.3}),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_attempts_charges_add_up_to_the_turns_cost(sim: Simulator, ending: str) -> None:
    fault, request = ENDINGS[ending]
    if fault:
        sim.set_faults("alpha", Fault(**fault))
    guard = ScriptedGuard()
    config = settings(sim.url, CHAIN, first_byte_timeout_s=0.5)
    result = await run(config, turn(**request), guard=guard)
    assert result.status is not Status.REJECTED
    assert sum(a.charged_micros or 0 for a in result.attempts) == result.cost_micros
    # And the settlements the guard was told add up to the same.
    assert sum(cost or 0 for _, _, _, cost in guard.concluded) == result.cost_micros
    billed = ending not in ("answered", "overloaded, not billed")
    assert (result.attempts[0].charged_micros is not None) is (billed or ending == "answered")


async def test_a_probe_cut_off_by_the_deadline_reopens_the_breaker_for_twice_as_long(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    config = settings(
        sim.url,
        CHAIN,
        first_byte_timeout_s=5.0,
        redis={"url": redis_url, "namespace": namespace},
        breakers={"consecutive_failures_threshold": 2, "break_s": 0.5, "probe_ttl_s": 30},
    )
    scope = "model:openai/alpha@oa"
    guard = open_guard(config)
    operators = breakers.Operators(breaker_store(config, guard.redis))
    try:
        async with make_client() as client:
            chain = Chain.from_settings(config, client, guard=guard)
            sim.set_faults("alpha", Fault(status=500))
            assert (await chain.run(turn())).effective_model == "anthropic/beta"
            first = await _breaker(operators, scope)
            assert first.state is breakers.BreakerState.OPEN
            await asyncio.sleep(first.retry_in_s + 0.05)
            # Half-open, and the primary now hangs past the turn's deadline.
            sim.set_faults("alpha", Fault(stall_first_byte_s=10.0))
            cut = await chain.run(turn(deadline_s=1.0))
            assert cut.status is Status.FAILED
            assert [a.error_class for a in cut.attempts] == ["interrupted"]
            after = await _breaker(operators, scope)
    finally:
        await guard.aclose()
    # Open again at once, the probe slot free, the break doubled: not half-open with
    # its slot held until `probe_ttl_s`, probing a hanging model every time it lapses.
    assert after.state is breakers.BreakerState.OPEN
    assert after.probe_holders == ()
    assert after.retry_in_s > first.retry_in_s + 0.2


async def _breaker(operators: breakers.Operators, scope: str) -> breakers.ScopeReport:
    report = await operators.report()
    return next(s for s in report.scopes if s.scope == scope)
