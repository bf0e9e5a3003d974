"""A call cut after content is charged what the provider bills for it: its input and the
output it streamed, never the small expected hold that short answers taught the fleet.

Each test first runs eight short turns so that the model's evidence (p99 of 6 output
tokens) makes its expected hold tiny, then cuts a long answer: a dropped stream, the
turn's deadline, the provider's total timeout, a cancel. Real Redis, real turns
(`Chain` + `open_guard`) against the simulated providers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import budgets
from tests.chainkit import model, settings
from tests.fleetkit import make_request
from worker.adapters import make_client
from worker.guard.redis_guard import RedisGuard, open_guard
from worker.settings import Settings
from worker.simulator import Fault, Simulator
from worker.turn.capability import Fit, fit_turn
from worker.turn.chain import Chain
from worker.turn.pricing import reservation_micros
from worker.types import Status, TurnRequest, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PRIMARY, BACKUP = "openai/alpha", "openai/alpha-mini"
MAX_TOKENS = 4000
SHORT = 6  # the short answers that size the expected hold
MARGIN_PCT = 150  # the simulator counts a short prompt as about twice relevo's estimate
PRICES = (2, 8)  # openai/alpha, dollars (so micro-dollars per token) in and out


def config(
    sim: Simulator,
    redis_url: str,
    namespace: str,
    *,
    total_timeout_s: float = 5.0,
    reasoning: bool = False,
) -> Settings:
    made = settings(
        sim.url,
        (PRIMARY, BACKUP),
        models={PRIMARY: model("openai", ("oa", "alpha"), prices=PRICES, reasoning=reasoning)},
        first_byte_timeout_s=2.0,
        deadline_s=30.0,
        redis={"url": redis_url, "namespace": namespace},
        budgets={
            "evidence_min_samples": 5,
            "evidence_refresh_s": 0.01,
            "input_margin_pct": MARGIN_PCT,
        },
    )
    providers = {
        name: p.model_copy(update={"total_timeout_s": total_timeout_s})
        for name, p in made.providers.items()
    }
    return made.model_copy(update={"providers": providers})


def request(**changes: Any) -> TurnRequest:
    return make_request(max_tokens=MAX_TOKENS).model_copy(update={"stream": True, **changes})


def reserved(settings_: Settings, output_tokens: int) -> int:
    """What an attempt of `request()` on the primary reserves for `output_tokens`."""
    fit = fit_turn(request(), settings_.models[PRIMARY])
    assert isinstance(fit, Fit)
    prices = settings_.models[PRIMARY]
    return reservation_micros(fit.input_tokens, output_tokens, prices, input_margin_pct=MARGIN_PCT)


def provider_bill(sim: Simulator, output_tokens: int) -> int:
    """What the provider bills at least for the last call: the prompt as the simulator
    counts it (its JSON over four) and `output_tokens` it sent."""
    body = sim.requests("alpha")[-1].body
    prompt = max(1, len(json.dumps(body.get("messages"))) // 4)
    return budgets.cost_micros(prompt, output_tokens, PRICES[0] * 10**6, PRICES[1] * 10**6)


async def learn_short_answers(chain: Chain, guard: RedisGuard, sim: Simulator) -> None:
    """Eight short answers: the fleet's p99 for the model becomes SHORT tokens."""
    sim.set_faults("alpha", Fault(tokens=SHORT))
    for _ in range(8):
        assert (await chain.run(request())).status is Status.OK
    assert guard.sizer is not None
    await guard.sizer.refresh(PRIMARY)
    assert guard.output_tokens(PRIMARY, MAX_TOKENS) == SHORT


async def with_chain(
    settings_: Settings, sim: Simulator, body: Callable[[Chain, RedisGuard], Awaitable[Any]]
) -> Any:
    guard = open_guard(settings_)
    try:
        async with make_client() as client:
            chain = Chain.from_settings(settings_, client, guard=guard)
            await learn_short_answers(chain, guard, sim)
            return await body(chain, guard)
    finally:
        await guard.aclose()


async def spent(guard: RedisGuard) -> int:
    return (await guard.ledger.report("acme")).day.spent_micros


def check_books(result: TurnResult, spend: int) -> None:
    assert sum(a.charged_micros or 0 for a in result.attempts) == result.cost_micros == spend


async def test_a_stream_dropped_after_content_is_charged_the_output_it_streamed(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    settings_ = config(sim, redis_url, namespace)

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=3900, error_after_tokens=3000, drop=True))
        result = await chain.run(request())
        return result, await spent(guard) - before

    result, spend = await with_chain(settings_, sim, body)
    assert result.status is Status.FAILED  # locked to the model once content streamed
    [cut] = result.attempts
    check_books(result, spend)
    assert cut.charged_micros is not None
    # Not the expected hold (six tokens' worth): at least what the provider bills.
    assert cut.charged_micros > 20 * reserved(settings_, SHORT)
    assert provider_bill(sim, 3000) <= cut.charged_micros <= reserved(settings_, MAX_TOKENS)
    print(
        f"charged {cut.charged_micros} µ$; the provider bills at least "
        f"{provider_bill(sim, 3000)}; expected hold {reserved(settings_, SHORT)}, "
        f"worst case {reserved(settings_, MAX_TOKENS)}"
    )


async def test_a_turn_cut_by_its_deadline_is_charged_the_output_it_streamed(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    settings_ = config(sim, redis_url, namespace)
    pieces: list[str] = []

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=3900, token_interval_s=0.002))
        result = await chain.run(request(deadline_s=1.5), on_text=pieces.append)
        return result, await spent(guard) - before

    result, spend = await with_chain(settings_, sim, body)
    assert (result.status, result.reason) == (Status.FAILED, "deadline_exceeded")
    [cut] = result.attempts
    check_books(result, spend)
    assert len(pieces) > 100
    assert cut.charged_micros is not None
    assert provider_bill(sim, len(pieces)) <= cut.charged_micros < reserved(settings_, MAX_TOKENS)


async def test_a_call_cut_by_its_total_timeout_is_charged_the_output_it_streamed(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    settings_ = config(sim, redis_url, namespace, total_timeout_s=1.5)
    pieces: list[str] = []

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=3900, token_interval_s=0.002))
        result = await chain.run(request(), on_text=pieces.append)
        return result, await spent(guard) - before

    result, spend = await with_chain(settings_, sim, body)
    assert result.status is Status.FAILED
    [cut] = result.attempts
    assert cut.error_class == "response_timeout"
    check_books(result, spend)
    assert len(pieces) > 100
    assert cut.charged_micros is not None
    assert provider_bill(sim, len(pieces)) <= cut.charged_micros < reserved(settings_, MAX_TOKENS)


async def test_a_turn_cancelled_while_streaming_is_charged_the_output_it_streamed(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    settings_ = config(sim, redis_url, namespace)
    pieces: list[str] = []

    async def body(chain: Chain, guard: RedisGuard) -> int:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=3900, token_interval_s=0.002))
        task = asyncio.create_task(chain.run(request(), on_text=pieces.append))
        for _ in range(500):
            if len(pieces) >= 300:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await spent(guard) - before

    spend = await with_chain(settings_, sim, body)
    assert len(pieces) >= 300
    assert provider_bill(sim, len(pieces)) <= spend < reserved(settings_, MAX_TOKENS)


async def test_a_reasoning_model_cut_after_content_is_charged_its_worst_case(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    """Its thinking was billed but never streamed: nothing counts it."""
    settings_ = config(sim, redis_url, namespace, reasoning=True)

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=400, error_after_tokens=300, drop=True))
        result = await chain.run(request())
        return result, await spent(guard) - before

    result, spend = await with_chain(settings_, sim, body)
    check_books(result, spend)
    assert result.attempts[0].charged_micros == reserved(settings_, MAX_TOKENS)


@pytest.mark.parametrize(
    ("stream", "charged_as"),
    [(False, "worst"), (True, "expected")],
    ids=["not-streamed: worst case", "streamed, no byte yet: expected hold"],
)
async def test_a_call_cut_before_any_content_is_charged_by_what_may_be_unseen(
    sim: Simulator, redis_url: str, namespace: str, stream: bool, charged_as: str
) -> None:
    """Cut by the turn's deadline with nothing shown: an answer that is not streamed may
    be written whole all the same (nothing counts it: the worst case); a stream with no
    byte yet has written nothing (its expected hold)."""
    settings_ = config(sim, redis_url, namespace)

    async def body(chain: Chain, guard: RedisGuard) -> tuple[TurnResult, int]:
        before = await spent(guard)
        sim.set_faults("alpha", Fault(tokens=3900, latency_s=3.0))
        result = await chain.run(request(stream=stream, deadline_s=1.0))
        return result, await spent(guard) - before

    result, spend = await with_chain(settings_, sim, body)
    assert (result.status, result.reason) == (Status.FAILED, "deadline_exceeded")
    check_books(result, spend)
    expected = {"worst": MAX_TOKENS, "expected": SHORT}[charged_as]
    assert result.attempts[0].charged_micros == reserved(settings_, expected)
