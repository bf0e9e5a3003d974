"""Multi-turn tool use on every provider: what a provider wants back comes back, over HTTP.

The simulated Gemini signs its calls and refuses a tool loop that drops a signature, as
Gemini 3 does; the simulated Claude, with extended thinking on, refuses a tool loop whose
last assistant turn lacks its thinking. A turn that falls back to another vendor sends
that vendor nothing it cannot read.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.chainkit import KEY, ORDER, model, run, settings, turn
from worker.adapters.gemini import SKIP_SIGNATURE
from worker.simulator import Fault, Simulator
from worker.types import Message, Reasoning, Reply, Status, Tool, ToolCall, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


LOOKUP = Tool(name="lookup", description="Find an order")
# Claude with extended thinking: the budget must stay under the turn's max_tokens.
THINKING = {
    "anthropic/beta": model("anthropic", ("an", "beta"), thinking_budget_tokens=1024),
}


def _follow_up(reply: Reply, *, stream: bool) -> Any:
    """The next turn of the tool loop: the assistant's reply as it came, then the result."""
    [call] = reply.tool_calls
    messages = (
        Message(role="user", content="Where is order 42?"),
        Message(
            role="assistant",
            content=reply.text,
            tool_calls=reply.tool_calls,
            reasoning=reply.reasoning,
        ),
        Message(role="tool", tool_call_id=call.id, content="shipped"),
    )
    return turn(messages=messages, tools=(LOOKUP,), stream=stream).model_copy(
        update={"max_tokens": 2048}
    )


async def _tool_loop(
    sim: Simulator, served: str, chain: tuple[str, ...], *, stream: bool, **extra: Any
) -> tuple[TurnResult, TurnResult]:
    config = settings(sim.url, chain, models=THINKING)
    sim.set_faults(served, Fault(reply_tool="lookup", tool_args={"id": 42}, times=1, **extra))
    start = turn("Where is order 42?", tools=(LOOKUP,), stream=stream)
    first = await run(config, start.model_copy(update={"max_tokens": 2048}))
    assert first.status is Status.OK
    assert first.reply is not None
    second = await run(config, _follow_up(first.reply, stream=stream))
    return first, second


def _last_body(sim: Simulator, served: str) -> dict[str, Any]:
    return dict(sim.requests(served)[-1].body)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_gemini_signatures_survive_the_tool_loop(sim: Simulator, stream: bool) -> None:
    first, second = await _tool_loop(sim, "gamma", ORDER["gemini"], stream=stream)
    assert first.reply is not None
    [call] = first.reply.tool_calls
    assert call.signature, "the signature is read from the functionCall part"
    assert second.status is Status.OK, second.error
    assert second.effective_model == "google/gamma"
    model_turn = _last_body(sim, "gamma")["contents"][1]
    [sent] = [p for p in model_turn["parts"] if "functionCall" in p]
    assert sent["thoughtSignature"] == call.signature
    # The text answer's own signature is kept on the reply too, for the turn after.
    assert second.reply is not None
    [signed] = second.reply.reasoning
    assert signed.origin == "google"
    assert signed.signature


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_claude_thinking_blocks_survive_the_tool_loop(sim: Simulator, stream: bool) -> None:
    first, second = await _tool_loop(
        sim, "beta", ORDER["anthropic"], stream=stream, redacted_thinking=True
    )
    assert first.reply is not None
    thinking, redacted = first.reply.reasoning
    assert thinking.text
    assert thinking.signature
    assert redacted.redacted
    assert not redacted.text
    assert second.status is Status.OK, second.error
    body = _last_body(sim, "beta")
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    blocks = body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "redacted_thinking", "tool_use"]
    assert blocks[0]["signature"] == thinking.signature
    assert blocks[0]["thinking"] == thinking.text
    assert blocks[1]["data"] == redacted.redacted


def _post(sim: Simulator, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"x-goog-api-key": KEY, "x-api-key": KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{sim.url}{path}", json=body, headers=headers)


def test_the_simulated_gemini_refuses_a_tool_loop_without_the_signature(sim: Simulator) -> None:
    call = {"functionCall": {"name": "lookup", "args": {"id": 42}}}
    contents = [
        {"role": "user", "parts": [{"text": "Where is order 42?"}]},
        {"role": "model", "parts": [call]},
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {}}}]},
    ]
    path = "/v1beta/models/gamma:generateContent"
    missing = _post(sim, path, {"contents": contents})
    assert missing.status_code == 400
    assert missing.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "missing a thought_signature" in missing.json()["error"]["message"]
    contents[1]["parts"] = [{**call, "thoughtSignature": "Y29ycnVwdGVk"}]
    assert "Corrupted" in _post(sim, path, {"contents": contents}).json()["error"]["message"]
    contents[1]["parts"] = [{**call, "thoughtSignature": SKIP_SIGNATURE}]
    assert _post(sim, path, {"contents": contents}).status_code == 200


def test_the_simulated_claude_refuses_a_tool_loop_without_its_thinking(sim: Simulator) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"id": 42}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"}
    body = {
        "model": "beta",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [
            {"role": "user", "content": "Where is order 42?"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }
    refused = _post(sim, "/v1/messages", body)
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert "must start with a thinking block" in refused.json()["error"]["message"]
    forged = {"type": "thinking", "thinking": "made up", "signature": "c2ltZm9yZ2Vk"}
    body["messages"][1]["content"] = [forged, use]
    assert "Invalid `signature`" in _post(sim, "/v1/messages", body).json()["error"]["message"]


async def test_a_tampered_gemini_signature_fails_the_turn_as_gemini_would(
    sim: Simulator,
) -> None:
    call = ToolCall(id="call_1", name="lookup", arguments={"id": 42}, signature="Zm9yZ2Vk")
    request = _follow_up(Reply(tool_calls=(call,)), stream=False)
    result = await run(settings(sim.url, ORDER["gemini"]), request)
    assert result.status is Status.FAILED
    assert result.reason == "invalid_request"


# A tool loop Gemini began (signed call, signed text) and one Claude began (thinking).
GEMINI_WROTE = Reply(
    text="Looking.",
    tool_calls=(ToolCall(id="c1", name="lookup", arguments={"id": 42}, signature="Z2VtaW5p"),),
    reasoning=(Reasoning(origin="google", signature="Z2VtaW5pLXRleHQ="),),
)
CLAUDE_WROTE = Reply(
    tool_calls=(ToolCall(id="toolu_1", name="lookup", arguments={"id": 42}),),
    reasoning=(
        Reasoning(origin="anthropic", text="secret chain of thought", signature="Y2xhdWRl"),
        Reasoning(origin="anthropic", redacted="cmVkYWN0ZWQ="),
    ),
)


@pytest.mark.parametrize(
    ("wrote", "chain", "served", "foreign"),
    [
        (GEMINI_WROTE, ORDER["anthropic"], "beta", ("Z2VtaW5p", "thoughtSignature")),
        (GEMINI_WROTE, ORDER["openai"], "alpha", ("Z2VtaW5p", "thoughtSignature")),
        (CLAUDE_WROTE, ORDER["gemini"], "gamma", ("secret chain", "Y2xhdWRl", "cmVkYWN0ZWQ=")),
        (CLAUDE_WROTE, ORDER["openai"], "alpha", ("secret chain", "Y2xhdWRl", "cmVkYWN0ZWQ=")),
    ],
    ids=["gemini-to-claude", "gemini-to-openai", "claude-to-gemini", "claude-to-openai"],
)
async def test_another_vendors_reasoning_is_dropped_not_sent(
    sim: Simulator, wrote: Reply, chain: tuple[str, ...], served: str, foreign: tuple[str, ...]
) -> None:
    result = await run(settings(sim.url, chain, models=THINKING), _follow_up(wrote, stream=False))
    assert result.status is Status.OK, result.error
    assert result.step == 0
    sent = json.dumps(_last_body(sim, served))
    for text in foreign:
        assert text not in sent
    if served == "beta":
        # Claude's thinking cannot start a turn it did not write: the call goes without it.
        assert "thinking" not in _last_body(sim, served)
    if served == "gamma":
        assert SKIP_SIGNATURE in sent, "Google's stand-in for a call Gemini did not sign"
