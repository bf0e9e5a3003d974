"""The engines a framework's model runs turns on: a chain here, or the fleet's workers.

Both speak real HTTP to the simulator; the fleet one runs a real Celery worker on an
in-process Redis. `answer` is what reaches the agent: a reply, or `TurnNotAnswered`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.chainkit import KEY, settings, turn
from worker.adapters import make_client
from worker.fleet import Producer
from worker.fleet.testing import stub_fleet
from worker.frameworks import Engine, InProcess, ThroughFleet, TurnNotAnswered, answer
from worker.guard import Availability
from worker.guard.testing import ScriptedGuard
from worker.simulator import Fault, Simulator
from worker.turn import Chain
from worker.types import Reply, Status, TurnRequest, TurnResult


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    os.environ["RELEVO_TEST_KEY"] = KEY
    with Simulator() as sim:
        yield sim


async def _streamed(engine: Engine, request: TurnRequest) -> tuple[list[str], TurnResult]:
    pieces: list[str] = []
    result: TurnResult | None = None
    async for item in engine.stream(request):
        assert result is None, "the result comes last"
        if isinstance(item, str):
            pieces.append(item)
        else:
            result = item
    assert result is not None
    return pieces, result


async def test_in_process_runs_and_streams_through_the_chain(simulator: Simulator) -> None:
    simulator.set_faults("alpha", Fault(status=503))
    engine = InProcess.from_settings(settings(simulator.url))
    try:
        ran = await engine.run(turn())
        pieces, streamed = await _streamed(engine, turn(stream=True))
    finally:
        await engine.aclose()
    assert ran.status is Status.OK
    assert ran.effective_model == "anthropic/beta"  # the primary is down: the backup
    assert streamed.reply is not None
    assert len(pieces) > 1
    assert "".join(pieces) == streamed.reply.text


async def test_a_stream_left_early_cancels_the_turn(simulator: Simulator) -> None:
    engine = InProcess.from_settings(settings(simulator.url))
    try:
        stream = engine.stream(turn(stream=True))
        first = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        again = await engine.run(turn())
    finally:
        await engine.aclose()
    assert isinstance(first, str)
    assert again.status is Status.OK


def _result(
    status: Status, *, reply: Reply | None = None, message: str | None = None
) -> TurnResult:
    return TurnResult(
        turn_id="t1",
        tenant_id="acme",
        status=status,
        reason="tenant_budget_exhausted" if status is not Status.OK else None,
        primary_model="openai/alpha",
        reply=reply,
        degradation_message=message,
    )


def test_answer_gives_a_reply_or_says_why_there_is_none() -> None:
    reply = Reply(text="hello")
    assert answer(_result(Status.OK, reply=reply)) is reply
    assert answer(_result(Status.DEGRADED, reply=reply)) is reply  # a stand-in's answer
    degraded = _result(Status.DEGRADED, message="The assistant is paused for today.")
    assert answer(degraded, "message").text == "The assistant is paused for today."
    for result, on_degraded in [
        (degraded, "raise"),
        (_result(Status.DEGRADED), "message"),  # no message to give: never an empty answer
        (_result(Status.REJECTED), "message"),
        (_result(Status.FAILED, reply=reply), "message"),
    ]:
        with pytest.raises(TurnNotAnswered) as caught:
            answer(result, on_degraded)  # type: ignore[arg-type]
        assert caught.value.result is result
        assert str(caught.value) == f"turn t1 {result.status}: {result.reason or 'no reply'}"


async def test_a_degraded_turn_reaches_the_agent_as_configured(simulator: Simulator) -> None:
    config = settings(simulator.url)
    guard = ScriptedGuard({"alpha": Availability.OPEN}, refuse={"an": "tenant_budget_exhausted"})
    async with make_client() as client:
        result = await InProcess(Chain.from_settings(config, client, guard=guard)).run(turn())
    assert result.status is Status.DEGRADED
    assert result.degradation_message
    assert answer(result, "message").text == result.degradation_message
    with pytest.raises(TurnNotAnswered, match="tenant_budget_exhausted"):
        answer(result)


@pytest.mark.slow
async def test_through_the_fleet_runs_and_streams_on_a_worker(simulator: Simulator) -> None:
    simulator.set_faults("alpha", Fault(status=503))
    with stub_fleet(settings(simulator.url), concurrency=2) as fleet:
        engine = ThroughFleet(Producer.from_settings(fleet.settings), timeout_s=20)
        try:
            ran = await engine.run(turn())
            pieces, streamed = await _streamed(engine, turn(stream=True))
        finally:
            await engine.aclose()
    assert ran.status is Status.OK
    assert ran.effective_model == "anthropic/beta"
    assert streamed.reply is not None
    assert "".join(pieces) == streamed.reply.text
