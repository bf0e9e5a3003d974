"""A failed tool reaches the model as an error, on each API the way its reference says.

A tool message with `is_error` goes to Anthropic as the tool_result's `is_error`, to
Converse as the toolResult's `status: "error"`, and to Gemini under the functionResponse's
`error` key; Chat Completions and the Responses API have no such field, so the attempt
names `is_error` as left out. Each over real HTTP against the simulated providers. A
queued turn carries the mark only once `[worker] oldest_release` says no relevo 0.1.0
worker (whose strict reader refuses the field) is left; the same setting moves the
left-out names from an attempt's `detail` to its own `left_out`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from pydantic_ai import Agent, ModelRetry
from structlog.testing import capture_logs

from tests.chainkit import KEY, model, run, settings
from tests.cloudkit import use_simulated_aws
from worker.adapters.base import Completion, ProviderCall
from worker.adapters.bedrock import BedrockAdapter
from worker.adapters.http import make_client
from worker.fleet.agreement import Agreement, FleetShape
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.turnstore import TurnKeys
from worker.frameworks import InProcess
from worker.frameworks.pydantic_ai import RelevoModel
from worker.settings import ProviderSettings, Settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, Tool, ToolCall, TurnRequest

WEATHER = Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CALL = ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})
FAILED = Message(role="tool", tool_call_id="call_1", content="timeout: no answer", is_error=True)
HISTORY = (
    Message(role="user", content="Weather in Oslo?"),
    Message(role="assistant", tool_calls=(CALL,)),
    FAILED,
)
REGION = "eu-west-1"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)


def asking(tenant: str = "acme") -> TurnRequest:
    return TurnRequest(tenant_id=tenant, messages=HISTORY, tools=(WEATHER,))


def one_model(sim: Simulator, provider: str, model_id: str, release: str = "0.1.0") -> Settings:
    vendor = {"oa": "openai", "gg": "google", "an": "anthropic"}[provider]
    models = {"m/one": model(vendor, (provider, model_id))}
    chain = ("m/one", "openai/alpha")
    return settings(sim.url, chain, models=models, worker={"oldest_release": release})


def test_only_a_tool_message_may_say_its_tool_failed() -> None:
    with pytest.raises(ValidationError, match="only tool messages carry is_error"):
        Message(role="user", content="hi", is_error=True)
    # Unset, the field is not written: a turn as relevo 0.1.0's workers read it.
    assert "is_error" not in Message(role="tool", tool_call_id="c", content="ok").model_dump()
    assert FAILED.model_dump()["is_error"] is True


async def test_anthropic_gets_is_error_on_the_tool_result(sim: Simulator) -> None:
    model_id = "claude-sonnet-4-5-toolerr"
    result = await run(one_model(sim, "an", model_id), asking())
    assert result.status is Status.OK, result.attempts
    [results] = [m for m in sim.requests(model_id)[-1].body["messages"] if m["role"] == "user"][1:]
    assert results["content"][0]["is_error"] is True
    assert results["content"][0]["tool_use_id"] == "call_1"
    assert result.attempts[0].detail is None


async def test_gemini_gets_the_error_key_of_the_function_response(sim: Simulator) -> None:
    model_id = "gemini-2.5-flash-toolerr"
    result = await run(one_model(sim, "gg", model_id), asking())
    assert result.status is Status.OK, result.attempts
    contents = sim.requests(model_id)[-1].body["contents"]
    [response] = [
        p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p
    ]
    assert response["response"] == {"error": "timeout: no answer"}
    assert response["id"] == "call_1"


@pytest.mark.parametrize("release", ["0.1.0", "0.2.0"])
async def test_openai_has_no_such_field_and_the_attempt_names_it(
    sim: Simulator, release: str
) -> None:
    """Chat Completions sends the error as the tool's content; the row names `is_error`:
    in its detail while relevo 0.1.0 may read the result, in its own `left_out` after."""
    model_id = f"gpt-4.1-toolerr-{release}"
    result = await run(one_model(sim, "oa", model_id, release), asking())
    assert result.status is Status.OK, result.attempts
    [tool] = [m for m in sim.requests(model_id)[-1].body["messages"] if m["role"] == "tool"]
    assert tool["content"] == "timeout: no answer"
    row = result.attempts[0]
    if release == "0.1.0":
        assert (row.detail, row.left_out) == ("left out: is_error", ())
        assert "left_out" not in row.model_dump()
    else:
        assert (row.detail, row.left_out) == (None, ("is_error",))


@pytest.fixture
async def bedrock(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[BedrockAdapter]:
    use_simulated_aws(monkeypatch, tmp_path)
    base_url = f"{sim.url}/bedrock-runtime/{REGION}"
    provider = ProviderSettings(kind="bedrock", region=REGION, base_url=base_url)
    async with make_client(max_connections=4) as http:
        yield BedrockAdapter(provider, http)


async def test_converse_gets_status_error_on_the_tool_result(
    sim: Simulator, bedrock: BedrockAdapter
) -> None:
    model_id = "anthropic.claude-toolerr-v1:0"
    call = ProviderCall(model_id, HISTORY, max_tokens=100, stream=False, tools=(WEATHER,))
    events = [e async for e in bedrock.send(call)]
    assert isinstance(events[-1], Completion)
    record = sim.requests(model_id)[-1]
    assert record.status == 200
    [block] = record.body["messages"][2]["content"]
    assert block["toolResult"]["status"] == "error"
    assert block["toolResult"]["content"] == [{"text": "timeout: no answer"}]


async def test_a_pydantic_ai_tool_that_asks_for_a_retry_reaches_claude_as_an_error(
    sim: Simulator,
) -> None:
    """A tool raising `ModelRetry` is a failed call (pydantic-ai's error outcomes): the
    model gets it back marked as an error, not as the tool's answer."""
    sim.reset()
    sim.set_faults("beta", Fault(reply_tool="lookup_order", tool_args={"order_id": 42}, times=1))
    agent: Agent[None, str] = Agent(instructions="You are the support agent.")

    @agent.tool_plain
    def lookup_order(order_id: int) -> str:
        """Find an order."""
        raise ModelRetry(f"order {order_id} is not in this shop")

    engine = InProcess.from_settings(settings(sim.url, ("anthropic/beta", "google/gamma")))
    try:
        result = await agent.run("Where is order 42?", model=RelevoModel(engine, tenant_id="acme"))
    finally:
        await engine.aclose()
    assert result.output.startswith("Answer from beta.")
    last = sim.requests("beta")[-1].body["messages"]
    [block] = [
        b
        for m in last
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert block["is_error"] is True
    assert "not in this shop" in str(block["content"])


@pytest.fixture
def sent_payload(sim: Simulator, redis_url: str, namespace: str) -> Iterator[Any]:
    """Enqueue a turn with nobody consuming, and read back what its message carried."""
    client = redis.Redis.from_url(redis_url)

    def send(release: str) -> dict[str, Any]:
        config = settings(
            sim.url,
            redis={"url": redis_url, "namespace": namespace},
            worker={"queue": namespace, "oldest_release": release},
            fairness={"enabled": False},
        )
        handle = enqueue_turn(asking(), app=make_app(config))
        turn_id = handle.turn_id
        raw = client.hget(TurnKeys(namespace).payloads, turn_id)
        assert isinstance(raw, bytes)
        return dict(json.loads(raw))

    yield send
    for key in client.scan_iter(match=f"*{namespace}*"):
        client.delete(key)
    client.close()


def test_a_queued_turn_carries_the_mark_once_no_0_1_0_worker_is_left(sent_payload: Any) -> None:
    old = sent_payload("0.1.0")["messages"][2]
    assert "is_error" not in old
    assert old["content"] == "timeout: no answer"  # the model still reads the error
    assert sent_payload("0.2.0")["messages"][2]["is_error"] is True


def test_a_live_process_older_than_oldest_release_is_warned_about_and_counted() -> None:
    counted: list[str] = []
    agreement = Agreement(FleetShape("redis", True, "ns"), on_differ=counted.append)
    with capture_logs() as events:
        assert agreement.check_release("0.1.0", "0.2.0", where="old@node:1") is True
        assert agreement.check_release("0.1.0", "0.2.0", where="old@node:1") is True
        assert agreement.check_release("0.2.0.dev3", "0.2.0", where="new@node:2") is False
        assert agreement.check_release("0.1.0", "0.1.0", where="old@node:1") is False
    assert counted == ["oldest_release", "oldest_release"]
    [warning] = [e for e in events if e["event"] == "fleet.older_release"]  # once a minute
    assert (warning["version"], warning["where"]) == ("0.1.0", "old@node:1")
