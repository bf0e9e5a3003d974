"""Which breaker a failure trips: an overloaded model its own, a broken vendor the vendor's."""

from __future__ import annotations

import pytest

from tests.chainkit import KEY, run, settings, turn
from worker.guard.redis_guard import open_guard
from worker.simulator import Fault, Simulator

BREAKERS = {"min_calls_in_window": 3, "consecutive_failures_threshold": 3, "break_s": 60}
CHAIN = ("openai/alpha", "openai/alpha-mini", "anthropic/beta")


@pytest.mark.parametrize(
    "case",
    [(Fault(status=529), None), (Fault(status=500), "vendor_breaker_open")],
    ids=["overloaded-model", "broken-vendor"],
)
async def test_only_vendor_wide_failures_skip_the_vendors_other_models(
    sim: Simulator,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[Fault, str | None],
) -> None:
    fault, second_skip = case
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    sim.set_faults("alpha", fault)
    config = settings(
        sim.url,
        CHAIN,
        redis={"url": redis_url, "namespace": namespace},
        breakers=BREAKERS,
        retry={"retries_per_model": 0},
    )
    guard = open_guard(config)
    try:
        for _ in range(3):
            await run(config, turn(), guard=guard)
        result = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    skips = [a.error_class for a in result.attempts if a.outcome == "skipped"]
    if second_skip is None:
        # The overloaded model is skipped; its smaller sibling still answers.
        assert skips == ["breaker_open"]
        assert result.effective_model == "openai/alpha-mini"
        assert sim.calls("alpha") == 3
    else:
        assert skips == ["vendor_breaker_open", "vendor_breaker_open"]
        assert result.effective_model == "anthropic/beta"
        assert sim.calls("alpha") <= 3
