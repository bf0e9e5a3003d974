"""Why the answering model stopped, on the turn's result and in its log line, over real HTTP.

A filtered answer is never a silent `ok`: withheld before any content the turn fails
(another model would be sent the same prompt), withheld after some it is degraded,
locked to that model, its partial text kept.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tests.chainkit import ID_OF, ORDER, fault, model, run, settings, turn
from worker.simulator import Fault, Simulator
from worker.types import Status, Tool, TurnRequest

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


KINDS = ("openai", "anthropic", "gemini")
AZURE = {"openai/azure": model("openai", ("az", "alpha-az"))}
# Each API's chain, and Azure OpenAI's: the served model first.
CHAINS = {**{k: ORDER[k] for k in KINDS}, "azure": ("openai/azure", "anthropic/beta")}
SERVED = {**{k: ID_OF[ORDER[k][0]] for k in KINDS}, "azure": "alpha-az"}


def _turn(*, stream: bool, max_tokens: int = 1024, tools: tuple[Tool, ...] = ()) -> TurnRequest:
    return turn(stream=stream, tools=tools).model_copy(update={"max_tokens": max_tokens})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", [*KINDS, "azure"])
async def test_every_api_reports_a_normalized_finish_reason(
    sim: Simulator, api: str, stream: bool
) -> None:
    config = settings(sim.url, CHAINS[api], models=AZURE)
    served = SERVED[api]
    done = await run(config, _turn(stream=stream))
    sim.set_faults(served, Fault(tokens=20))
    with capture_logs() as logs:
        cut = await run(config, _turn(stream=stream, max_tokens=5))
    sim.set_faults(served, Fault(reply_tool="lookup"))
    called = await run(config, _turn(stream=stream, tools=(Tool(name="lookup"),)))
    assert (done.finish_reason, cut.finish_reason, called.finish_reason) == (
        "stop",
        "length",
        "tool_calls",
    )
    assert cut.status is Status.OK, "a cut at the caller's max_tokens is the caller's choice"
    [line] = [e for e in logs if e["event"] == "turn.completed"]
    assert line["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", [*KINDS, "azure"])
async def test_a_prompt_filtered_before_any_content_fails_without_fallback(
    sim: Simulator, api: str, stream: bool
) -> None:
    sim.set_faults(SERVED[api], Fault(content_filter_after_tokens=0))
    result = await run(settings(sim.url, CHAINS[api], models=AZURE), _turn(stream=stream))
    assert result.status is Status.FAILED
    assert result.reason == "content_filter"
    assert result.finish_reason == "content_filter"
    assert result.step == 0
    assert sim.calls() == 1, "the backup would be sent the same prompt"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", [*KINDS, "azure"])
async def test_an_answer_filtered_after_content_is_degraded_and_keeps_its_part(
    sim: Simulator, api: str, stream: bool
) -> None:
    sim.set_faults(SERVED[api], Fault(content_filter_after_tokens=3))
    seen: list[str] = []
    result = await run(
        settings(sim.url, CHAINS[api], models=AZURE), _turn(stream=stream), on_text=seen.append
    )
    assert result.status is Status.DEGRADED, "a cut answer must not pass for a complete one"
    assert result.reason == "content_filter"
    assert result.finish_reason == "content_filter"
    assert result.reply is not None
    assert result.reply.text == f"Answer from {SERVED[api]}."
    assert "".join(seen) == (result.reply.text if stream else "")
    assert sim.calls() == 1, "locked to the model that wrote the part"


async def test_azure_refusing_the_prompt_with_400_content_filter_fails_without_fallback(
    sim: Simulator,
) -> None:
    sim.set_faults("alpha-az", fault("openai", "azure_prompt_filtered"))
    result = await run(settings(sim.url, CHAINS["azure"], models=AZURE), _turn(stream=False))
    assert result.status is Status.FAILED
    assert result.attempts[0].error_class == "invalid_request"
    assert "content management policy" in (result.error or "")
    assert sim.calls("beta") == 0
