"""Budgets as the chain meets them on a real Redis: reservations sized by evidence, turns
that wait for holds instead of degrading, reasons that say which, the overdraft bound,
and calls the provider may bill charged even though they failed.

Each test runs real turns (`Chain` + `open_guard`) against the simulated providers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

import budgets
from tests.chainkit import settings
from tests.fleetkit import make_request
from tests.netkit import free_port
from worker.adapters import make_client
from worker.guard.redis_guard import RedisGuard, open_guard
from worker.guard.sizing import OutputSizer
from worker.settings import RedisSettings, Settings
from worker.simulator import Fault, Simulator
from worker.turn.capability import Fit, fit_turn
from worker.turn.chain import Chain
from worker.types import Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PRIMARY, BACKUP = "openai/alpha", "openai/alpha-mini"
TOKENS = 6  # the simulator's answers here: far below max_tokens
# The simulator counts an OpenAI prompt as its JSON over 4: about twice relevo's estimate
# for these short messages. The reservations' input margin covers that.
MARGIN_PCT = 150


def config(
    sim: Simulator, redis_url: str, namespace: str, *, deadline_s: float = 10.0, **plan: Any
) -> Settings:
    plan.setdefault("evidence_min_samples", 5)
    plan.setdefault("evidence_refresh_s", 0.01)
    plan.setdefault("input_margin_pct", MARGIN_PCT)
    return settings(
        sim.url,
        (PRIMARY, BACKUP),
        first_byte_timeout_s=2.0,
        deadline_s=deadline_s,
        redis={"url": redis_url, "namespace": namespace},
        budgets=plan,
    )


def reservation(sim: Simulator, model: str, output_tokens: int) -> int:
    """What one `request()` attempt on `model` reserves for `output_tokens` of answer:
    relevo's input estimate padded by the margin, rounded up."""
    prices = settings(sim.url).models[model]
    fit = fit_turn(request(), prices)
    assert isinstance(fit, Fit)
    padded = -(-fit.input_tokens * (100 + MARGIN_PCT) // 100)
    return budgets.cost_micros(
        padded, output_tokens, prices.input_micros_per_mtok, prices.output_micros_per_mtok
    )


def billed(sim: Simulator, result: TurnResult) -> int:
    """What the provider billed for the answer: its reported usage at the model's prices."""
    assert result.effective_model is not None
    prices = settings(sim.url).models[result.effective_model]
    usage = result.usage
    return budgets.cost_micros(
        usage.input_tokens,
        usage.output_tokens,
        prices.input_micros_per_mtok,
        prices.output_micros_per_mtok,
    )


async def run_all(
    chain: Chain, requests: Sequence[TurnRequest], *, spread_s: float = 0.0
) -> list[TurnResult]:
    async def one(i: int, request: TurnRequest) -> TurnResult:
        await asyncio.sleep(i * spread_s)
        return await chain.run(request)

    return await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))


async def with_chain(config: Settings, body: Any) -> Any:
    guard = open_guard(config)
    try:
        async with make_client() as client:
            return await body(Chain.from_settings(config, client, guard=guard), guard)
    finally:
        await guard.aclose()


def request() -> TurnRequest:
    return make_request(max_tokens=256)


def requests(n: int) -> list[TurnRequest]:
    return [request() for _ in range(n)]


async def test_a_reservation_holds_what_the_model_answers_once_enough_answers_are_known(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    sim.set_faults("alpha", Fault(tokens=TOKENS))
    settings_ = config(sim, redis_url, namespace)

    async def body(chain: Chain, guard: RedisGuard) -> tuple[int, int, int, int, int]:
        ledger = guard.ledger
        # Before any evidence: a turn in flight holds its worst case.
        sim.set_faults("alpha", Fault(tokens=TOKENS, latency_s=0.4))
        first = asyncio.create_task(chain.run(request()))
        await asyncio.sleep(0.2)
        before = (await ledger.report("acme")).reserved_micros
        await first
        sim.set_faults("alpha", Fault(tokens=TOKENS))
        for each in requests(5):
            assert (await chain.run(each)).status is Status.OK
        assert guard.sizer is not None
        await guard.sizer.refresh(PRIMARY)
        sim.set_faults("alpha", Fault(tokens=TOKENS, latency_s=0.4))
        last = asyncio.create_task(chain.run(request()))
        await asyncio.sleep(0.2)
        report = await ledger.report("acme")
        assert (await last).status is Status.OK
        after = (await ledger.report("acme")).day.spent_micros
        one = billed(sim, await last)
        return before, report.reserved_micros, report.reserved_worst_micros, after, one

    before, held, worst_held, spent, one = await with_chain(settings_, body)
    worst, expected = reservation(sim, PRIMARY, 256), reservation(sim, PRIMARY, TOKENS)
    assert before == worst
    assert (held, worst_held) == (expected, worst)
    assert spent == 7 * one  # every answer settled to what its usage says
    assert one <= expected < worst


async def test_a_turn_waits_for_holds_to_settle_instead_of_degrading(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    # Room for one worst case at a time (overdraft 0): the others wait their turn.
    worst = reservation(sim, PRIMARY, 256)
    settings_ = config(sim, redis_url, namespace, reserve_percentile=None)
    sim.set_faults("alpha", Fault(tokens=TOKENS, latency_s=0.2))

    async def body(chain: Chain, guard: RedisGuard) -> list[TurnResult]:
        await guard.ledger.set_limits("acme", worst + worst // 2, 10 * worst)
        return await run_all(chain, requests(3))

    results = await with_chain(settings_, body)
    assert [r.status for r in results] == [Status.OK] * 3
    assert sim.calls("alpha") == 3


async def test_a_turn_stops_waiting_when_a_call_could_no_longer_answer_before_its_deadline(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    # The first turn holds the budget for 2.5 s of its 3; the second, had it been granted
    # then, would have 0.4 s left for a call whose first byte may take 2 s: billed, unanswered.
    worst = reservation(sim, PRIMARY, 256)
    settings_ = config(sim, redis_url, namespace, deadline_s=3.0, reserve_percentile=None)
    sim.set_faults("alpha", Fault(tokens=TOKENS, latency_s=2.5))

    async def body(chain: Chain, guard: RedisGuard) -> list[TurnResult]:
        await guard.ledger.set_limits("acme", worst + worst // 2, 10 * worst)
        return await run_all(chain, requests(2), spread_s=0.1)

    first, second = await with_chain(settings_, body)
    assert first.status is Status.OK
    assert (second.status, second.reason, second.cost_micros) == (
        Status.DEGRADED,
        "tenant_budget_held",
        0,
    )
    assert sim.calls("alpha") == 1


async def test_a_refusal_says_held_when_holds_are_in_the_way_and_exhausted_when_spend_is(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    worst = reservation(sim, PRIMARY, 256)
    settings_ = config(sim, redis_url, namespace, reserve_percentile=None, held_wait_s=0)
    sim.set_faults("alpha", Fault(tokens=TOKENS, latency_s=0.3))

    async def body(chain: Chain, guard: RedisGuard) -> tuple[list[TurnResult], TurnResult]:
        await guard.ledger.set_limits("acme", worst + worst // 2, 10 * worst)
        together = await run_all(chain, requests(2), spread_s=0.1)
        # Spend the rest: what is left is less than one worst case.
        await guard.ledger.settle("acme", "elsewhere", worst, provider="oa")
        return together, await chain.run(request())

    (first, second), late = await with_chain(settings_, body)
    assert first.status is Status.OK
    assert (second.status, second.reason) == (Status.DEGRADED, "tenant_budget_held")
    assert (late.status, late.reason) == (Status.DEGRADED, "tenant_budget_exhausted")
    assert sim.calls("alpha") == 1


async def test_spend_stays_within_the_limit_plus_the_overdraft_when_answers_run_long(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    # The evidence says 1 token; every answer then writes all 256: each turn's worst case.
    worst, expected = reservation(sim, PRIMARY, 256), reservation(sim, PRIMARY, 1)
    limit, overdraft = 10 * worst, 3 * worst
    settings_ = config(sim, redis_url, namespace, held_wait_s=5)
    sim.set_faults("alpha", Fault(tokens=256, latency_s=0.2))

    async def body(chain: Chain, guard: RedisGuard) -> list[TurnResult]:
        await guard.ledger.set_limits("acme", limit, 100 * worst, overdraft_micros=overdraft)
        assert guard.sizer is not None
        for _ in range(5):
            await guard.sizer.evidence.record(PRIMARY, 1)
        await guard.sizer.refresh(PRIMARY)
        return await run_all(chain, requests(40))

    results = await with_chain(settings_, body)
    spent = sum(r.cost_micros for r in results)
    answered = [r for r in results if r.status is Status.OK]
    assert limit < spent <= limit + overdraft  # the overdraft was used, never passed
    # The expected costs alone would have let 10 * worst / expected (over 300) turns in.
    assert len(answered) == (limit + overdraft) // worst < 10 * worst // expected


@pytest.mark.parametrize(
    "case",
    [
        # Never a byte in time: the provider may bill the call all the same.
        (Fault(stall_first_byte_s=3.0), "first_byte_timeout", True),
        # An error response: no provider bills one.
        (Fault(status=500), "server_error", False),
    ],
    ids=["timeout", "error-response"],
)
async def test_a_failed_call_is_charged_at_its_reservation_when_the_provider_may_bill_it(
    sim: Simulator, redis_url: str, namespace: str, case: tuple[Fault, str, bool]
) -> None:
    fault, error_class, billed_by_provider = case
    settings_ = config(sim, redis_url, namespace, reserve_percentile=None)
    sim.set_faults("alpha", fault)
    sim.set_faults("alpha-mini", Fault(tokens=TOKENS))

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        result = await chain.run(request())
        return result, (await guard.ledger.report("acme")).day.spent_micros

    result, spent = await with_chain(settings_, body)
    assert (result.status, result.effective_model) == (Status.OK, BACKUP)
    assert result.attempts[0].error_class == error_class
    failed = reservation(sim, PRIMARY, 256) if billed_by_provider else 0
    assert spent == result.cost_micros == failed + billed(sim, result)


# -- the evidence and the sizer on their own ---------------------------------------------------


def test_the_percentile_is_a_value_that_was_seen() -> None:
    values = list(range(1, 101))
    assert budgets.percentile(values, 99) == 99
    assert budgets.percentile(values, 100) == 100
    assert budgets.percentile([7], 50) == 7
    assert budgets.percentile([3, 1, 2], 50) == 2
    with pytest.raises(ValueError, match="no values"):
        budgets.percentile([], 99)
    with pytest.raises(ValueError, match="pct"):
        budgets.percentile([1], 0)


async def test_the_evidence_keeps_the_last_samples_of_each_model(
    redis_url: str, namespace: str
) -> None:
    client = RedisSettings(url=redis_url, namespace=namespace).connect()
    try:
        evidence = budgets.OutputEvidence(client, namespace=namespace, samples=10)
        for tokens in [1000] * 5 + list(range(1, 11)):
            await evidence.record(PRIMARY, tokens)
        found = await evidence.percentiles([PRIMARY, BACKUP], 100, min_samples=10)
        assert found == {PRIMARY: 10, BACKUP: None}  # the old 1,000s were trimmed away
        assert (await evidence.percentiles([PRIMARY], 100, min_samples=11))[PRIMARY] is None
        with pytest.raises(budgets.InvalidAmountError):
            await evidence.record(PRIMARY, -1)
    finally:
        await client.aclose()


async def test_the_sizer_reserves_max_tokens_until_redis_can_say_and_never_waits_for_it() -> None:
    dead = RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2).connect()
    sizer = OutputSizer(budgets.OutputEvidence(dead), percentile=99, min_samples=1, refresh_s=60)
    try:
        assert sizer.tokens(PRIMARY, 256) == 256  # asked in the background
        await asyncio.sleep(0.5)
        assert sizer.tokens(PRIMARY, 256) == 256
        assert not sizer._refreshing  # one attempt per refresh_s, not one per turn
    finally:
        await sizer.aclose()
        await dead.aclose()
