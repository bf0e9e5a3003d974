"""A tenant trying to pay less than the provider bills: calls the provider answered but that
broke on the way back, thinking a cut Gemini stream reported before it broke, answers
written unseen before a first-byte timeout, and a lost hedge that was not streamed.

Each runs a turn through `TurnRunner` on real Redis and the simulator over HTTP, and checks
what the ledger charged against what the simulated provider bills for the call.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aredis

from budgets.ledger import Ledger
from tests import chainkit
from worker.fleet.runner import TurnRunner
from worker.settings import Settings
from worker.simulator import Fault, Simulator
from worker.simulator.wire import estimate_tokens

OPENAI = ("openai/alpha", "anthropic/beta")  # $2 / $8 per million tokens
GEMINI = ("google/gamma", "openai/alpha")  # $1 / $4


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", chainkit.KEY)


@pytest.fixture
def runner_of(redis_url: str, namespace: str, sim: Simulator) -> Iterator[Any]:
    sim.reset()
    runners: list[TurnRunner] = []

    def make(chain: tuple[str, ...], **sections: Any) -> tuple[TurnRunner, Settings]:
        redis = {"url": redis_url, "namespace": namespace}
        config = chainkit.settings(sim.url, chain, redis=redis, **sections)
        runners.append(TurnRunner(config))
        return runners[-1], config

    yield make
    for runner in runners:
        runner.close()


def spent(redis_url: str, namespace: str) -> int:
    async def read() -> int:
        client = aredis.from_url(redis_url)
        try:
            return (await Ledger(client, namespace=namespace).report("acme")).day.spent_micros
        finally:
            await client.aclose()

    return asyncio.run(read())


def payload(**fields: Any) -> dict[str, Any]:
    return {
        "turn_id": uuid.uuid4().hex,
        "tenant_id": "acme",
        "messages": [
            {"role": "system", "content": "You are the support agent."},
            {"role": "user", "content": "Where is my order?"},
        ],
        "deadline_s": 10,
        **fields,
    }


def prompt_tokens(sim: Simulator, model: str) -> int:
    """The prompt tokens the simulator bills the last call of `model` (OpenAI's shape)."""
    return estimate_tokens(json.dumps(sim.requests(model)[-1].body["messages"]))


def test_an_answer_not_streamed_that_breaks_on_the_way_back_is_charged_what_it_billed(
    runner_of: Any, sim: Simulator, redis_url: str, namespace: str
) -> None:
    # The provider wrote all 3,000 tokens before sending a byte, then the body broke
    # half-way: it bills every one of them, twice (the retry breaks too).
    runner, _ = runner_of(OPENAI)
    sim.set_faults("alpha", Fault(tokens=3000, error_after_tokens=1, times=2))
    result = runner.answer(payload(max_tokens=4000))
    cut = [a for a in result["attempts"] if a["model"] == "openai/alpha"]
    billed = prompt_tokens(sim, "alpha") * 2 + 3000 * 8
    charges = [a["charged_micros"] for a in cut]
    print(f"each torn answer: billed {billed} µ$, charged {charges}")
    assert len(cut) == 2
    assert sim.calls("alpha", "dropped") == 2
    assert all(c is not None and c >= billed for c in charges)
    assert sum(a["charged_micros"] or 0 for a in result["attempts"]) == result["cost_micros"]
    assert spent(redis_url, namespace) == result["cost_micros"]


def test_a_stream_that_breaks_after_its_status_and_before_content_is_charged(
    runner_of: Any, sim: Simulator, redis_url: str, namespace: str
) -> None:
    # The model took the prompt and began its stream: the provider bills the prompt at
    # least. Nothing was streamed to count: the expected hold, then the fallback answers.
    runner, _ = runner_of(OPENAI)
    sim.set_faults("alpha", Fault(error_after_tokens=0, drop=True, times=2))
    result = runner.answer(payload(stream=True, max_tokens=4000))
    cut = [a for a in result["attempts"] if a["model"] == "openai/alpha"]
    prompt = prompt_tokens(sim, "alpha") * 2
    print(f"each stream broken before content: prompt {prompt} µ$, charged", cut)
    assert result["status"] == "ok"
    assert sim.calls("alpha", "dropped") == 2
    assert all(a["charged_micros"] is not None and a["charged_micros"] >= prompt for a in cut)
    assert sum(a["charged_micros"] or 0 for a in result["attempts"]) == result["cost_micros"]
    assert spent(redis_url, namespace) == result["cost_micros"]


@pytest.mark.parametrize(
    ("cut", "fault", "deadline_s"),
    [
        (
            "dropped",
            Fault(tokens=3000, reasoning_tokens=5000, error_after_tokens=100, drop=True),
            10,
        ),
        (
            "deadline",
            Fault(tokens=3000, reasoning_tokens=5000, stall_after_tokens=100, stall_after_s=5),
            2,
        ),
    ],
)
def test_a_cut_gemini_stream_is_charged_the_thinking_it_reported(
    runner_of: Any,
    sim: Simulator,
    *,
    redis_url: str,
    namespace: str,
    cut: str,
    fault: Fault,
    deadline_s: float,
) -> None:
    # Gemini 2.5 thinks unasked (no thinking budget sent) and reports it in each chunk's
    # usageMetadata before the answer: 5,000 thinking tokens, then 100 of the answer, then
    # the cut. The provider bills them all; the stream's text counts only the 100.
    runner, _ = runner_of(GEMINI, first_byte_timeout_s=3)
    sim.set_faults("gamma", fault)
    result = runner.answer(payload(stream=True, max_tokens=4000, deadline_s=deadline_s))
    (attempt,) = result["attempts"]
    output_billed = (5000 + 100) * 4
    print(f"gemini {cut}: output billed {output_billed} µ$, charged {attempt['charged_micros']}")
    assert attempt["model"] == "google/gamma"
    assert attempt["charged_micros"] >= output_billed
    assert result["cost_micros"] == attempt["charged_micros"]
    assert spent(redis_url, namespace) == result["cost_micros"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_lost_hedge_is_charged_its_worst_case_unless_it_streamed(
    runner_of: Any, sim: Simulator, *, redis_url: str, namespace: str, stream: bool
) -> None:
    # The primary writes a whole 3,000-token answer before sending it; its hedge sends
    # content first and the primary is cut. The provider bills the answer it wrote all the
    # same; the tenant asked for no stream, and nothing shows how far the primary got.
    hedging = {"enabled": True, "fallback_s": 0.3, "floor_s": 0.05, "budget_share": 1.0}
    runner, _ = runner_of(OPENAI, hedging=hedging, first_byte_timeout_s=5)
    for _ in range(3):  # each answered attempt earns the fleet's hedge budget its share
        assert runner.answer(payload())["status"] == "ok"
    time.sleep(1.0)  # the evidence is written after each turn, on its own pipeline
    before = spent(redis_url, namespace)
    # Streamed, the primary sends nothing for 2 s: it has written nothing, and is charged
    # its prompt.
    sim.set_faults("alpha", Fault(tokens=3000, stall_first_byte_s=2))
    result = runner.answer(payload(max_tokens=4000, stream=stream))
    lost, won = result["attempts"]
    prompt = prompt_tokens(sim, "alpha") * 2
    billed = prompt + (0 if stream else 3000 * 8)
    print(f"lost hedge, stream {stream}: billed {billed} µ$, charged {lost['charged_micros']}")
    assert lost["outcome"] == "hedge_lost"
    assert won["outcome"] == "ok"
    assert lost["charged_micros"] >= billed
    if stream:
        assert lost["charged_micros"] < 10 * prompt  # the prompt (as estimated), no output
    assert lost["charged_micros"] + won["charged_micros"] == result["cost_micros"]
    assert spent(redis_url, namespace) - before == result["cost_micros"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_first_byte_timeout_that_may_hide_a_written_answer_is_charged_its_worst_case(
    runner_of: Any, sim: Simulator, *, redis_url: str, namespace: str, stream: bool
) -> None:
    # Five short answers make the expected hold a few tokens. Then the primary takes longer
    # than its first-byte timeout: writing a whole 3,000-token answer before sending any
    # (not streamed), or thinking 3,000 tokens before its first (a reasoning model).
    # The provider bills them; the expected hold would charge a few tokens.
    budgets = {"evidence_min_samples": 3, "evidence_refresh_s": 0.2}
    models = {"openai/alpha": chainkit.model("openai", ("oa", "alpha"), prices=(2, 8))}
    if stream:
        models["openai/alpha"]["reasoning"] = True
    runner, _ = runner_of(OPENAI, budgets=budgets, models=models, first_byte_timeout_s=1)
    for _ in range(5):
        assert runner.answer(payload(max_tokens=4000))["status"] == "ok"
    for _ in range(2):  # a turn after the refresh interval reads the evidence again
        time.sleep(0.5)
        assert runner.answer(payload(max_tokens=4000))["status"] == "ok"
    before = spent(redis_url, namespace)
    hidden = {"reasoning_tokens": 3000} if stream else {"tokens": 3000}
    sim.set_faults("alpha", Fault(stall_first_byte_s=3, **hidden))
    result = runner.answer(payload(max_tokens=4000, stream=stream))
    timed_out, answered = result["attempts"]
    billed = prompt_tokens(sim, "alpha") * 2 + 3000 * 8
    print(f"first-byte timeout, stream {stream}: billed {billed}, charged", timed_out)
    assert timed_out["error_class"] == "first_byte_timeout"
    assert answered["model"] == "anthropic/beta"
    assert timed_out["charged_micros"] >= billed
    assert spent(redis_url, namespace) - before == result["cost_micros"]
