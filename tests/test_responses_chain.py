"""The Responses provider in a chain, over real HTTP: the failure table, the streaming
rule, pricing, and reasoning that crosses vendors only where it can be read.

The chain is a Responses model (a reasoning model: its answers carry encrypted
reasoning items) with Claude (extended thinking on) behind it. The simulated OpenAI
refuses reasoning it did not issue, the simulated Claude thinking it did not sign.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.chainkit import KEY, model, run
from tests.chainkit import settings as chain_settings
from tests.test_policy import EXPECTED, EXPECTED_STREAM
from worker.adapters import ProviderCall, build_adapter, make_client, reasoning_family
from worker.errors import (
    ContextTooLong,
    InvalidRequest,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ServerError,
)
from worker.settings import ProviderSettings, Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.simulator.catalogue import NAMES, STREAM_NAMES, canned, canned_stream
from worker.turn.pricing import cost_of
from worker.types import (
    AttemptOutcome,
    Message,
    Reasoning,
    Reply,
    Status,
    Tool,
    ToolCall,
    TurnRequest,
    TurnResult,
)

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


LOOKUP = Tool(name="lookup", description="Find an order")
PRIMARY = "gpt-5-sim"  # a reasoning model, by the simulator's reading of its name
CHAIN = ("openai/responder", "anthropic/beta")


# The first byte may take a while on a loaded machine (0.58 s was seen where 0.5 s was
# allowed): only the test of silence wants a short wait, and says so.
def config(url: str, *, first_byte_timeout_s: float = 3.0) -> Settings:
    provider = {
        "api_key_env": "RELEVO_TEST_KEY",
        "first_byte_timeout_s": first_byte_timeout_s,
        "total_timeout_s": 5.0,
    }
    return load_settings(
        data={
            "turn_deadline_s": 10.0,
            "chain": {"models": list(CHAIN)},
            "retry": {"base_delay_s": 0.01, "retry_after_cap_s": 1.0},
            "providers": {
                "or": {"kind": "openai", "api": "responses", "base_url": f"{url}/v1", **provider},
                "an": {"kind": "anthropic", "base_url": url, **provider},
            },
            "models": {
                "openai/responder": model(
                    "openai",
                    ("or", PRIMARY),
                    prices=(2, 8),
                    reasoning=True,
                    cache_read_usd_per_mtok=0.5,
                ),
                "anthropic/beta": model(
                    "anthropic", ("an", "beta"), prices=(3, 15), thinking_budget_tokens=1024
                ),
            },
        }
    )


def turn(messages: tuple[Message, ...], *, stream: bool = False) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme", messages=messages, tools=(LOOKUP,), stream=stream, max_tokens=2048
    )


HELLO = (Message(role="user", content="Where is order 42?"),)


# --- the failure table -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES["openai-responses"])
async def test_every_http_error_is_classified_like_chat(name: str, sim: Simulator) -> None:
    error = canned("openai-responses", name)
    body = error.body.decode() if isinstance(error.body, bytes) else error.body
    sim.set_faults(PRIMARY, Fault(status=error.status, body=body, headers=error.headers))
    settings = config(sim.url)
    call_turn = turn(HELLO)
    async with make_client() as client:
        adapter = build_adapter(settings.providers["or"], client)
        call = ProviderCall(PRIMARY, call_turn.messages, (), 100, stream=False)
        with pytest.raises(ProviderError) as caught:
            async for _ in adapter.send(call):
                pass
    assert type(caught.value) is EXPECTED[("openai-responses", name)]
    assert caught.value.status == error.status


@pytest.mark.parametrize("name", STREAM_NAMES["openai-responses"])
@pytest.mark.parametrize("after", [0, 2], ids=["before-content", "after-content"])
async def test_every_stream_failure_before_content_falls_back_and_after_it_locks(
    name: str, after: int, sim: Simulator
) -> None:
    """Before the first content the failure table decides (a fallback where it says so);
    after it, the turn fails locked to the model, its text streamed once, never twice."""
    expected = EXPECTED_STREAM[("openai-responses", name)]
    payload = canned_stream("openai-responses", name)
    sim.set_faults(PRIMARY, Fault(error_after_tokens=after, stream_error=payload))
    seen: list[str] = []
    result = await run(config(sim.url), turn(HELLO, stream=True), on_text=seen.append)
    first = result.attempts[0]
    assert first.error_class == expected.code
    if after:
        # Locked to the model: no fallback, and the two tokens it sent, once.
        assert result.status is Status.FAILED
        assert sim.calls("beta") == 0
        assert seen == ["Answer", " from"]
        return
    status, backup_called = BEFORE_CONTENT[expected]
    assert result.status is status
    assert (sim.calls("beta") == 1) is backup_called
    if backup_called:
        assert result.reply is not None
        assert "".join(seen) == result.reply.text


# What the failure table does with each class before any content (DESIGN.md).
BEFORE_CONTENT: dict[type[ProviderError], tuple[Status, bool]] = {
    ServerError: (Status.OK, True),  # one retry, then the next model
    RateLimited: (Status.OK, True),  # no wait that fits: the next model
    ContextTooLong: (Status.FAILED, False),  # no larger window in the chain
    InvalidRequest: (Status.FAILED, False),  # the backup would get the same request
    QuotaExhausted: (Status.DEGRADED, False),  # money: degrade, no fallback
}


async def test_silence_before_the_first_byte_falls_back(sim: Simulator) -> None:
    sim.set_faults(PRIMARY, Fault(stall_first_byte_s=2.0))
    result = await run(config(sim.url, first_byte_timeout_s=0.3), turn(HELLO, stream=True))
    assert result.status is Status.OK
    assert result.effective_model == "anthropic/beta"
    assert result.attempts[0].error_class == "first_byte_timeout"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_answer_cut_at_max_output_tokens_is_length(stream: bool, sim: Simulator) -> None:
    sim.set_faults(PRIMARY, Fault(tokens=5000))
    result = await run(config(sim.url), turn(HELLO, stream=stream))
    assert result.finish_reason == "length"
    assert result.effective_model == "openai/responder"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_usage_is_priced_like_chat_cached_and_reasoning_included(
    stream: bool, sim: Simulator
) -> None:
    sim.set_faults(PRIMARY, Fault(cache_read_tokens=1000, reasoning_tokens=500))
    settings = config(sim.url)
    result = await run(settings, turn(HELLO, stream=stream))
    usage = result.usage
    assert usage.cache_read_tokens == 1000
    assert usage.reasoning_tokens == 500
    assert usage.output_tokens == 8 + 500
    priced = cost_of(usage, settings.models["openai/responder"])
    assert result.cost_micros == priced
    # $/Mtok times tokens is micro-dollars: 2 plain input, 0.5 cached, 8 output (reasoning
    # included).
    assert priced == usage.input_tokens * 2 + 1000 // 2 + (8 + 500) * 8


# --- reasoning across vendors ------------------------------------------------------------


def _continue(history: tuple[Message, ...], reply: Reply, n: int) -> tuple[Message, ...]:
    assistant = Message(
        role="assistant", content=reply.text, tool_calls=reply.tool_calls, reasoning=reply.reasoning
    )
    if reply.tool_calls:
        [call] = reply.tool_calls
        return (*history, assistant, Message(role="tool", tool_call_id=call.id, content=f"r{n}"))
    return (*history, assistant, Message(role="user", content=f"And order {n}?"))


def _origins(history: tuple[Message, ...]) -> list[str]:
    return [r.origin for m in history for r in m.reasoning]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_ten_turn_tool_loop_crosses_openai_claude_openai_and_nobody_refuses(
    stream: bool, sim: Simulator
) -> None:
    """Turns 1-3 on OpenAI, 4-6 on Claude thinking (OpenAI overloaded), 7-10 on OpenAI
    again: no provider is sent reasoning it cannot read, each crossing counts what it left
    out, and OpenAI's reasoning items go back to OpenAI once the turn returns there."""
    settings = config(sim.url)
    tool = {"reply_tool": "lookup", "tool_args": {"id": 42}}
    history: tuple[Message, ...] = HELLO
    results: list[TurnResult] = []
    for n in range(1, 11):
        if n in (4, 5, 6):
            sim.set_faults(PRIMARY, Fault(status=503, times=1))
            sim.set_faults("beta", Fault(**tool, times=1))
        else:
            # Turn 3 answers in text: the next user turn lets Claude think.
            sim.set_faults(PRIMARY, Fault(**tool, times=1) if n not in (3, 10) else Fault(times=1))
        result = await run(settings, turn(history, stream=stream))
        assert result.status is Status.OK, (n, result.error, result.attempts)
        assert result.reply is not None
        results.append(result)
        before = _origins(history)
        answered = [a for a in result.attempts if a.outcome is AttemptOutcome.OK]
        [row] = answered
        if n in (4, 5, 6):
            assert result.effective_model == "anthropic/beta"
            assert row.reasoning_left_out == before.count("openai")
            failed = result.attempts[0]
            assert failed.reasoning_left_out == before.count("anthropic")
        else:
            assert result.effective_model == "openai/responder"
            assert row.reasoning_left_out == before.count("anthropic")
            body = sim.requests(PRIMARY)[-1].body
            sent = [i for i in body["input"] if i.get("type") == "reasoning"]
            assert len(sent) == before.count("openai")
        history = _continue(history, result.reply, n)
    # Every crossing left something out and said so; nothing was refused anywhere.
    assert [r.attempts[-1].reasoning_left_out for r in results] == [0, 0, 0, 3, 3, 3, 3, 3, 3, 3]
    assert _origins(history).count("anthropic") == 3  # Claude thought on each of its turns
    assert sim.calls(outcome="error") == 3  # the three 503s, nothing else
    claude_bodies = [r.body for r in sim.requests("beta")]
    assert all("encrypted_content" not in str(b) for b in claude_bodies)
    openai_bodies = [r.body for r in sim.requests(PRIMARY)]
    assert all("thinking" not in str(b.get("input")) for b in openai_bodies)


async def test_chat_completions_reads_no_reasoning_and_counts_it_all(sim: Simulator) -> None:
    call = ToolCall(id="call_1", name="lookup", arguments={"id": 42})
    history = (
        *HELLO,
        Message(
            role="assistant",
            tool_calls=(call,),
            reasoning=(
                Reasoning(origin="openai", id="rs_1", encrypted="gAAAx"),
                Reasoning(origin="anthropic", text="t", signature="s"),
            ),
        ),
        Message(role="tool", tool_call_id="call_1", content="shipped"),
    )
    result = await run(chain_settings(sim.url, ("openai/alpha", "anthropic/beta")), turn(history))
    assert result.status is Status.OK
    assert result.attempts[0].reasoning_left_out == 2
    assert "gAAAx" not in str(sim.requests("alpha")[-1].body)


async def test_a_turn_of_under_16_output_tokens_skips_the_responses_api(sim: Simulator) -> None:
    """`max_output_tokens` is at least 16 (the simulator refuses less, as the API does:
    "integer below minimum value"): capability fit skips the wire, the next model answers."""
    result = await run(config(sim.url), turn(HELLO).model_copy(update={"max_tokens": 8}))
    assert result.status is Status.OK
    skipped, answered = result.attempts
    assert skipped.outcome is AttemptOutcome.SKIPPED
    assert skipped.detail is not None
    assert "max_tokens under 16" in skipped.detail
    assert answered.model == "anthropic/beta"
    assert sim.calls(PRIMARY) == 0
    async with httpx.AsyncClient() as client:
        refused = await client.post(
            f"{sim.url}/v1/responses",
            json={"model": PRIMARY, "input": "Hi", "max_output_tokens": 8},
            headers={"authorization": KEY},
        )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "max_output_tokens"


def test_reasoning_family_per_target() -> None:
    def family(kind: str, model_id: str, reasoning: bool = True, **extra: Any) -> str | None:
        base = {"base_url": "https://x"} if kind != "bedrock" else {}
        settings = ProviderSettings(kind=kind, **base, **extra)  # type: ignore[arg-type]
        return reasoning_family(settings, model_id, reasoning=reasoning)

    assert family("openai", "gpt-5") is None
    assert family("openai", "gpt-5", api="responses") == "openai"
    # The Responses API refuses encrypted reasoning to a model that does not reason.
    assert family("openai", "gpt-4.1", False, api="responses") is None
    assert family("anthropic", "claude-sonnet-4") == "anthropic"
    assert family("gemini", "gemini-3-pro") == "google"


def test_the_simulated_claude_refuses_thinking_it_did_not_sign_even_with_thinking_off(
    sim: Simulator,
) -> None:
    """As the simulated OpenAI refuses reasoning it did not issue (`invalid_encrypted_content`)
    and the simulated Gemini a signature it did not make ("Corrupted thought signature.")."""
    foreign = {"type": "thinking", "thinking": "OpenAI's summary", "signature": "gAAAxyzDQ=="}
    body = {
        "model": "beta",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [foreign, {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "Again"},
        ],
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    refused = httpx.post(f"{sim.url}/v1/messages", json=body, headers=headers)
    assert refused.status_code == 400
    assert "Invalid `signature` in `thinking` block" in refused.json()["error"]["message"]
