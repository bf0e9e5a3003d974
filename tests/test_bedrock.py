"""AWS Bedrock over real loopback HTTP: the adapter, SigV4 and the simulator's Converse wire.

Credentials are the simulator's test ones, set in the environment as botocore's chain
reads them (shared files pointed at nothing, instance metadata off): no AWS is reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import sys
import uuid
from collections.abc import AsyncIterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from structlog.testing import capture_logs

from tests.cloudkit import use_simulated_aws
from worker.adapters import BedrockAdapter, Completion, ProviderCall, TextDelta, make_client
from worker.adapters.base import Event
from worker.adapters.classify import classify_response
from worker.errors import (
    AuthFailed,
    ConfigError,
    ConnectionFailed,
    ContextTooLong,
    FirstByteTimeout,
    InvalidRequest,
    MalformedResponse,
    ModelNotFound,
    Overloaded,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    ServerError,
)
from worker.settings import ProviderSettings, Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.simulator.bedrock_wire import (
    EVENT_STREAM,
    TEST_ACCESS_KEY_ID,
    TEST_SECRET_ACCESS_KEY,
    event,
    exception_event,
    frame,
)
from worker.simulator.catalogue import NAMES, STREAM_NAMES, canned, canned_stream
from worker.turn.chain import Chain
from worker.turn.policy import Decision, rule_for
from worker.types import Message, Reasoning, Status, Tool, ToolCall, TurnRequest

REGION = "eu-west-3"
SESSION_TOKEN = "FQoGZXIvYXdzEXAMPLE-session-token-0123456789"
WEATHER = Tool(
    name="get_weather",
    description="Current weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)

# Each canned Bedrock error: its class, then what the chain does about it.
ROWS: dict[str, tuple[type[ProviderError], Decision]] = {
    "throttling_tokens": (RateLimited, Decision.WAIT_OR_NEXT),
    "throttling_requests": (RateLimited, Decision.WAIT_OR_NEXT),
    "tokens_per_day": (QuotaExhausted, Decision.DEGRADE),
    "service_quota_exceeded": (RateLimited, Decision.WAIT_OR_NEXT),
    "service_unavailable": (Overloaded, Decision.NEXT),
    "model_not_ready": (Overloaded, Decision.NEXT),
    "model_timeout": (ServerError, Decision.RETRY_THEN_NEXT),
    "internal_server": (ServerError, Decision.RETRY_THEN_NEXT),
    "model_error": (ServerError, Decision.RETRY_THEN_NEXT),
    "validation": (InvalidRequest, Decision.FAIL),
    "input_too_long": (ContextTooLong, Decision.LARGER_WINDOW),
    "prompt_too_long": (ContextTooLong, Decision.LARGER_WINDOW),
    "access_denied": (AuthFailed, Decision.FAIL),
    "unrecognized_client": (AuthFailed, Decision.FAIL),
    "invalid_model_id": (ModelNotFound, Decision.NEXT),
    "end_of_life": (ModelNotFound, Decision.NEXT),
    "legacy_model": (ModelNotFound, Decision.NEXT),
    "on_demand_unsupported": (ModelNotFound, Decision.NEXT),
    "on_demand_not_supported": (ModelNotFound, Decision.NEXT),
    "proxy_502_html": (ServerError, Decision.RETRY_THEN_NEXT),
    "empty_503": (Overloaded, Decision.NEXT),
}
STREAM_ROWS: dict[str, type[ProviderError]] = {
    "model_stream_error": ServerError,
    "model_stream_context_too_long": ContextTooLong,
    "throttling": RateLimited,
    "input_too_long": ContextTooLong,
    "service_unavailable": Overloaded,
}


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The simulator's credentials in the environment; no file, profile or role to find."""
    use_simulated_aws(monkeypatch, tmp_path, SESSION_TOKEN)


@pytest.fixture
def model() -> str:
    """A Claude-shaped model id (with the `:` of a version) no other test uses."""
    return f"anthropic.claude-sim-x{uuid.uuid4().hex[:8]}-v1:0"


def provider(sim: Simulator, signing: str = REGION, **extra: float) -> ProviderSettings:
    """The simulator's endpoint for REGION, signing for `signing`."""
    base = f"{sim.url}/bedrock-runtime/{REGION}"
    return ProviderSettings(kind="bedrock", region=signing, base_url=base, **extra)


def chain_config(sim: Simulator, models: dict[str, Any]) -> Settings:
    """A chain of `models`, in order, served by this Bedrock provider (`aws`) or the
    simulator's Anthropic API (`an`)."""
    return load_settings(
        data={
            "chain": {"models": list(models)},
            "providers": {
                "an": {"kind": "anthropic", "base_url": sim.url, "api_key_env": "RELEVO_TEST_KEY"},
                "aws": {"kind": "bedrock", "region": REGION, "base_url": provider(sim).base_url},
            },
            "models": models,
        }
    )


def adapter(sim: Simulator, client: httpx.AsyncClient, **extra: Any) -> BedrockAdapter:
    return BedrockAdapter(provider(sim, **extra), client)


def ask(
    model: str, *messages: Message, stream: bool = False, tools: tuple[Tool, ...] = ()
) -> ProviderCall:
    chosen = messages or (Message(role="user", content="Hello?"),)
    return ProviderCall(model, chosen, tools, max_tokens=100, stream=stream)


async def answer(bedrock: BedrockAdapter, call: ProviderCall) -> tuple[list[Event], Completion]:
    events = [e async for e in bedrock.send(call)]
    done = events.pop()
    assert isinstance(done, Completion)
    return events, done


async def drain_into(out: list[Event], events: AsyncIterator[Event]) -> None:
    """Append each event as it comes, so a test can see what arrived before an error."""
    async for item in events:
        out.append(item)  # noqa: PERF401 - the list must fill up before the error


# --- answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_converse_answers_signed_for_bedrock_in_the_region(
    sim: Simulator, client: httpx.AsyncClient, model: str, stream: bool
) -> None:
    deltas, done = await answer(adapter(sim, client), ask(model, stream=stream))
    assert done.text == f"Answer from {model}. alpha bravo charlie delta echo"
    streamed = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert streamed == (done.text if stream else "")
    assert (done.usage.output_tokens, done.finish_reason) == (8, "stop")
    assert done.usage.input_tokens > 0
    (record,) = sim.requests(model)
    operation = "converse-stream" if stream else "converse"
    assert record.path == f"/bedrock-runtime/{REGION}/model/{model}/{operation}"
    assert (record.api, record.stream, record.auth_header) == ("bedrock", stream, "authorization")
    assert "x-amz-date" in record.headers
    assert "x-amz-security-token" not in record.headers
    assert SESSION_TOKEN not in repr(record)
    assert TEST_SECRET_ACCESS_KEY not in repr(record)


async def test_default_endpoint_is_the_regions(client: httpx.AsyncClient) -> None:
    settings = ProviderSettings(kind="bedrock", region="us-east-1")
    url = BedrockAdapter(settings, client).request(ask("anthropic.claude-x-v1:0")).url
    assert (
        url
        == "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-x-v1:0/converse"
    )


async def test_an_inference_profile_arn_is_signed_as_sent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    arn = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.anthropic.claude-x-v1:0"
    _, done = await answer(adapter(sim, client), ask(arn))
    assert done.text.startswith(f"Answer from {arn}.")
    assert sim.calls(arn, "ok") == 1  # one path segment, its `/` escaped and signed so


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_tool_call_and_its_result_round_trip(
    sim: Simulator, client: httpx.AsyncClient, model: str, stream: bool
) -> None:
    bedrock = adapter(sim, client)
    sim.set_faults(model, Fault(reply_tool="get_weather", tool_args={"city": "Lyon"}, times=1))
    system = Message(role="system", content="Be brief.")
    user = Message(role="user", content="Weather in Lyon?")
    _, done = await answer(bedrock, ask(model, system, user, stream=stream, tools=(WEATHER,)))
    (call,) = done.tool_calls
    assert (call.name, call.arguments, done.finish_reason) == (
        "get_weather",
        {"city": "Lyon"},
        "tool_calls",
    )
    history = (
        system,
        user,
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id=call.id, content="12 C, rain"),
    )
    _, final = await answer(bedrock, ask(model, *history, stream=stream, tools=(WEATHER,)))
    assert final.text.startswith("Answer from")
    body = sim.requests(model)[-1].body
    assert body["system"] == [{"text": "Be brief."}]
    assert body["toolConfig"]["tools"][0]["toolSpec"] == {
        "name": "get_weather",
        "description": "Current weather in a city",
        "inputSchema": {"json": WEATHER.parameters},
    }
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "toolUse": {
                        "toolUseId": call.id,
                        "name": "get_weather",
                        "input": {"city": "Lyon"},
                    }
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call.id, "content": [{"text": "12 C, rain"}]}}
            ],
        },
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_reasoning_comes_back_signed_and_is_returned_only_to_its_family(
    sim: Simulator, client: httpx.AsyncClient, model: str, stream: bool
) -> None:
    bedrock = adapter(sim, client)
    sim.set_faults(model, Fault(reasoning_tokens=40, reply_tool="get_weather", times=1))
    user = Message(role="user", content="Weather?")
    _, done = await answer(bedrock, ask(model, user, stream=stream, tools=(WEATHER,)))
    (thought,) = done.reasoning
    assert (thought.origin, thought.text) == ("anthropic", f"Thinking about {model}.")
    assert thought.signature
    assert done.usage.output_tokens > 40  # the reasoning is billed as output
    foreign = Reasoning(origin="google", text="a Gemini thought", signature="c2ln")
    assistant = Message(role="assistant", tool_calls=done.tool_calls, reasoning=(foreign, thought))
    result = Message(role="tool", tool_call_id=done.tool_calls[0].id, content="sunny")
    await answer(bedrock, ask(model, user, assistant, result, stream=stream, tools=(WEATHER,)))
    sent = sim.requests(model)[-1].body["messages"][1]["content"]
    assert sent[0] == {
        "reasoningContent": {
            "reasoningText": {"text": thought.text, "signature": thought.signature}
        }
    }
    assert [next(iter(block)) for block in sent] == ["reasoningContent", "toolUse"]
    # Altered, the simulated model refuses it, as Bedrock refuses a bad thinking signature.
    forged = thought.model_copy(update={"text": "something else"})
    assistant = assistant.model_copy(update={"reasoning": (forged,)})
    with pytest.raises(InvalidRequest, match="signature"):
        await answer(bedrock, ask(model, user, assistant, result, stream=stream, tools=(WEATHER,)))


def test_reasoning_of_another_family_is_dropped_and_redacted_thinking_kept(
    client: httpx.AsyncClient,
) -> None:
    bedrock = BedrockAdapter(ProviderSettings(kind="bedrock", region="us-east-1"), client)
    claude = Reasoning(origin="anthropic", redacted="ZW5jcnlwdGVk")
    nova = Reasoning(origin="bedrock", text="nova thought")
    assistant = Message(role="assistant", content="Hi.", reasoning=(claude, nova))
    history = (Message(role="user", content="Hi"), assistant, Message(role="user", content="?"))
    for model_id, kept in (
        ("anthropic.claude-x-v1:0", {"redactedContent": "ZW5jcnlwdGVk"}),
        ("amazon.nova-pro-v1:0", {"reasoningText": {"text": "nova thought"}}),
    ):
        blocks = bedrock.request(ask(model_id, *history)).body["messages"][1]["content"]
        assert blocks == [{"reasoningContent": kept}, {"text": "Hi."}]


def test_claude_on_bedrock_thinks_when_its_model_has_a_budget(client: httpx.AsyncClient) -> None:
    bedrock = BedrockAdapter(ProviderSettings(kind="bedrock", region="us-east-1"), client)
    call = dataclasses.replace(
        ask("us.anthropic.claude-x-v1:0"), thinking_budget_tokens=2048, max_tokens=4096
    )
    fields = bedrock.request(call).body["additionalModelRequestFields"]
    assert fields == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    # Not for another vendor's model, nor a budget that leaves no room for the answer.
    nova = dataclasses.replace(call, model_id="amazon.nova-pro-v1:0")
    assert "additionalModelRequestFields" not in bedrock.request(nova).body
    tight = dataclasses.replace(call, thinking_budget_tokens=call.max_tokens)
    assert "additionalModelRequestFields" not in bedrock.request(tight).body
    # A tool loop another vendor wrote goes without thinking, which Claude would refuse.
    weather = ToolCall(id="t1", name="weather", arguments={})
    loop = (
        Message(role="user", content="Weather?"),
        Message(role="assistant", tool_calls=(weather,)),
        Message(role="tool", tool_call_id="t1", content="sunny"),
    )
    foreign = dataclasses.replace(call, messages=loop)
    assert "additionalModelRequestFields" not in bedrock.request(foreign).body


async def test_a_turn_falls_back_to_the_same_claude_on_bedrock_and_is_charged_its_usage(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", "sk-ant-test-0123456789abcdef")
    sim.set_faults("claude-direct", Fault(status=529))
    sim.set_faults(model, Fault(cache_read_tokens=300, cache_write_tokens=120))
    claude = {
        "vendor": "anthropic",
        "context_window": 100_000,
        "serve": [
            {"provider": "an", "model_id": "claude-direct"},
            {"provider": "aws", "model_id": model},
        ],
        "input_usd_per_mtok": 3,
        "output_usd_per_mtok": 15,
        "cache_write_usd_per_mtok": "3.75",
        "cache_read_usd_per_mtok": "0.3",
    }
    other = {**claude, "serve": [{"provider": "an", "model_id": "claude-other"}]}
    config = chain_config(sim, {"anthropic/claude": claude, "anthropic/other": other})
    request = TurnRequest(tenant_id="acme", messages=(Message(role="user", content="Hi"),))
    async with make_client() as http:
        result = await Chain.from_settings(config, http).run(request)
    assert (result.status, result.effective_provider, result.step) == (Status.OK, "aws", 0)
    assert [(a.provider, a.http_status) for a in result.attempts] == [("an", 529), ("aws", 200)]
    usage = result.usage
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (300, 120, 8)
    assert usage.input_tokens > 0
    exact = (
        usage.input_tokens * Fraction(3)
        + usage.output_tokens * Fraction(15)
        + usage.cache_write_tokens * Fraction("3.75")
        + usage.cache_read_tokens * Fraction("0.3")
    )
    assert result.cost_micros == math.ceil(exact)


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
@pytest.mark.parametrize("name", NAMES["bedrock"])
async def test_each_bedrock_error_lands_in_its_class_and_decision(
    sim: Simulator, client: httpx.AsyncClient, model: str, name: str, stream: bool
) -> None:
    error = canned("bedrock", name)
    body = error.body.decode() if isinstance(error.body, bytes) else error.body
    sim.set_faults(model, Fault(status=error.status, body=body, headers=error.headers))
    expected, decision = ROWS[name]
    with pytest.raises(ProviderError) as caught:
        await answer(adapter(sim, client), ask(model, stream=stream))
    assert type(caught.value) is expected
    assert caught.value.status == error.status
    assert rule_for(caught.value).decision is decision


async def test_a_model_served_only_through_an_inference_profile_falls_back_and_alerts(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    """Unusable as configured, as a gone model is: the next model answers, no retry, an alert."""
    monkeypatch.setenv("RELEVO_TEST_KEY", "sk-ant-test-0123456789abcdef")
    error = canned("bedrock", "on_demand_unsupported")
    sim.set_faults(model, Fault(status=error.status, body=error.body, headers=error.headers))
    entry = {"vendor": "anthropic", "context_window": 100_000}
    on_bedrock = {**entry, "serve": [{"provider": "aws", "model_id": model}]}
    direct = {**entry, "serve": [{"provider": "an", "model_id": f"direct-{model}"}]}
    config = chain_config(sim, {"anthropic/on-bedrock": on_bedrock, "anthropic/direct": direct})
    request = TurnRequest(tenant_id="acme", messages=(Message(role="user", content="Hi"),))
    with capture_logs() as logs:
        async with make_client() as http:
            result = await Chain.from_settings(config, http).run(request)
    assert (result.status, result.effective_provider, result.step) == (Status.OK, "an", 1)
    assert result.attempts[0].error_class == "model_not_found"
    assert sim.calls(model) == 1, "no retry: the same model would be refused again"
    [alert] = [e for e in logs if e["event"] == "model.not_found"]
    assert (alert["log_level"], alert["provider_model"]) == ("error", model)


def test_every_canned_bedrock_error_has_a_row() -> None:
    assert set(ROWS) == set(NAMES["bedrock"])
    assert set(STREAM_ROWS) == set(STREAM_NAMES["bedrock"])


@pytest.mark.parametrize("name", [*STREAM_NAMES["bedrock"], None])
async def test_an_exception_event_mid_stream_raises_after_the_content_sent(
    sim: Simulator, client: httpx.AsyncClient, model: str, name: str | None
) -> None:
    payload = None if name is None else canned_stream("bedrock", name)
    sim.set_faults(model, Fault(error_after_tokens=2, stream_error=payload))
    events: list[Event] = []
    with pytest.raises(ProviderError) as caught:
        await drain_into(events, adapter(sim, client).send(ask(model, stream=True)))
    assert type(caught.value) is (Overloaded if name is None else STREAM_ROWS[name])
    assert [type(e) for e in events] == [TextDelta, TextDelta]


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_a_connection_cut_mid_answer_or_silent_from_the_start_is_a_transport_error(
    sim: Simulator, client: httpx.AsyncClient, model: str, stream: bool
) -> None:
    sim.set_faults(model, Fault(error_after_tokens=2, drop=True, times=1))
    with pytest.raises(ConnectionFailed):
        await answer(adapter(sim, client), ask(model, stream=stream))
    sim.set_faults(model, Fault(stall_first_byte_s=2, times=1))
    with pytest.raises(FirstByteTimeout):
        await answer(adapter(sim, client, total_timeout_s=0.3), ask(model, stream=stream))


async def _hostile(request: web.Request) -> web.StreamResponse:
    """Event streams the simulator never sends, one per path."""
    scenario = request.match_info["scenario"]
    response = web.StreamResponse()
    response.content_type = "text/event-stream" if scenario == "sse" else EVENT_STREAM
    await response.prepare(request)
    await response.write(event("messageStart", {"role": "assistant"}))
    await response.write(
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
    )
    if scenario == "corrupt":
        await response.write(frame({":message-type": "event"}, b"{}")[:-1] + b"\x00")
    elif scenario == "error":
        headers = {":message-type": "error", ":error-code": "ThrottlingException"}
        await response.write(frame({**headers, ":error-message": "Slow down"}, b""))
    await response.write_eof()
    return response


@pytest.fixture
async def hostile() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{scenario}/model/{model}/{operation}", _hostile)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("corrupt", MalformedResponse),
        ("cut", ConnectionFailed),
        ("sse", MalformedResponse),
        ("error", RateLimited),
    ],
)
async def test_a_broken_event_stream_is_a_provider_error(
    hostile: str, client: httpx.AsyncClient, scenario: str, expected: type[ProviderError]
) -> None:
    settings = ProviderSettings(kind="bedrock", region=REGION, base_url=f"{hostile}/{scenario}")
    with pytest.raises(expected):
        await answer(BedrockAdapter(settings, client), ask("m", stream=True))


@pytest.mark.parametrize(
    ("change", "exception"),
    [
        ({"signing": "us-west-2"}, "InvalidSignatureException"),
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "InvalidSignatureException"),
        ({"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7UNKNOWN0"}, "UnrecognizedClientException"),
    ],
)
async def test_a_bad_signature_is_refused_as_auth_and_names_no_secret(
    sim: Simulator,
    client: httpx.AsyncClient,
    *,
    model: str,
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, str],
    exception: str,
) -> None:
    signing = change.pop("signing", REGION)
    for name, value in change.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(AuthFailed) as caught:
        await answer(adapter(sim, client, signing=signing), ask(model))
    assert (caught.value.status, caught.value.provider_code) == (403, exception)
    assert rule_for(caught.value).decision is Decision.FAIL
    assert sim.calls(model) == 0  # refused before any model saw it


def test_an_unsigned_request_is_refused_before_any_model(sim: Simulator, model: str) -> None:
    url = f"{provider(sim).base_url}/model/{model}/converse"
    body = {"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}
    for headers, status, name in (
        ({"authorization": "Bearer sk-nope"}, 400, "IncompleteSignatureException"),
        ({}, 403, "MissingAuthenticationTokenException"),
    ):
        response = httpx.post(url, json=body, headers=headers)
        assert (response.status_code, response.headers["x-amzn-ErrorType"]) == (status, name)
        error = classify_response("bedrock", status, response.headers, response.content)
        assert type(error) is AuthFailed
    assert sim.calls(model) == 0


async def test_credentials_never_appear_in_an_error(
    sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    echo = f"bad signature from {TEST_SECRET_ACCESS_KEY} with token {SESSION_TOKEN}"
    sim.set_faults(model, Fault(status=400, body={"message": echo}))
    with pytest.raises(InvalidRequest) as caught:
        await answer(adapter(sim, client), ask(model))
    shown = f"{caught.value} {caught.value.args!r} {caught.value.provider_code}"
    assert TEST_SECRET_ACCESS_KEY not in shown
    assert SESSION_TOKEN not in shown
    assert "[redacted]" in shown


@pytest.mark.parametrize("secret", [TEST_SECRET_ACCESS_KEY, SESSION_TOKEN], ids=["key", "token"])
async def test_a_credential_cut_short_with_the_message_is_redacted_first(
    sim: Simulator, client: httpx.AsyncClient, model: str, secret: str
) -> None:
    """The message is cut to its length after the body is read: a secret straddling the cut
    would leave its first characters, which no later search for the whole secret finds."""
    echo = "x" * 185 + " " + secret
    sim.set_faults(model, Fault(status=400, body={"message": echo}))
    with pytest.raises(InvalidRequest) as caught:
        await answer(adapter(sim, client), ask(model))
    shown = f"{caught.value} {caught.value.args!r}"
    assert secret[:8] not in shown
    assert caught.value.message.endswith(" [redacted]")


async def test_no_credentials_anywhere_is_auth_failed(
    sim: Simulator, client: httpx.AsyncClient, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    with pytest.raises(AuthFailed, match="no AWS credentials"):
        await answer(adapter(sim, client), ask(model))
    assert sim.calls(model) == 0


# --- credentials --------------------------------------------------------------------------


def _credential_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expires: str) -> Path:
    """A `credential_process` that logs each run, takes 0.3 s, and expires at `expires`."""
    log = tmp_path / "runs.log"
    script = tmp_path / "creds.py"
    script.write_text(
        "import json, pathlib, time\n"
        f"pathlib.Path({str(log)!r}).open('a').write('run\\n')\n"
        "time.sleep(0.3)\n"
        f"print(json.dumps({{'Version': 1, 'AccessKeyId': {TEST_ACCESS_KEY_ID!r}, "
        f"'SecretAccessKey': {TEST_SECRET_ACCESS_KEY!r}, 'SessionToken': 'process-token', "
        f"'Expiration': {expires!r}}}))\n"
    )
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {sys.executable} {script}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    return log


@pytest.mark.parametrize(("expires", "runs"), [("2099-01-01T00:00:00Z", 1), ("soon", 3)])
async def test_credentials_are_read_once_and_again_when_they_expire(
    sim: Simulator,
    client: httpx.AsyncClient,
    *,
    model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    expires: str,
    runs: int,
) -> None:
    from datetime import UTC, datetime, timedelta

    if expires == "soon":  # inside botocore's refresh window: every call re-reads
        expires = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    log = _credential_process(tmp_path, monkeypatch, expires)
    bedrock = adapter(sim, client)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        for _ in range(2):
            await answer(bedrock, ask(model))
    finally:
        ticker.cancel()
    assert log.read_text().count("run") == runs
    assert ticks >= 10  # the loop kept running while the process took its 0.3 s


# --- configuration and framing ------------------------------------------------------------


def test_a_bedrock_provider_needs_a_region_and_no_api_key() -> None:
    base = {"kind": "bedrock"}
    with pytest.raises(ConfigError, match=r"providers\.aws.*region"):
        _config({"aws": base})
    with pytest.raises(ConfigError, match="takes no API key"):
        _config({"aws": {**base, "region": "us-east-1", "api_key_env": "X"}})
    with pytest.raises(ConfigError, match="base_url"):
        _config({"aws": {"kind": "anthropic"}})
    assert _config({"aws": {**base, "region": "us-east-1"}}).providers["aws"].base_url == ""


def test_a_bedrock_provider_without_botocore_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)
    with pytest.raises(ConfigError, match=r"pip install 'relevo\[bedrock\]'"):
        _config({"aws": {"kind": "bedrock", "region": "us-east-1"}})


def _config(providers: dict[str, Any]) -> Any:
    serve = [{"provider": "aws", "model_id": "m"}]
    entry = {"vendor": "v", "context_window": 1000, "serve": serve}
    return load_settings(
        data={
            "chain": {"models": ["v/a", "v/b"]},
            "providers": providers,
            "models": {"v/a": entry, "v/b": entry},
        }
    )


def test_the_simulators_frames_are_what_botocore_parses() -> None:
    buffer = EventStreamBuffer()
    data = event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hé"}})
    error = exception_event({"throttlingException": {"message": "Too many tokens"}})
    buffer.add_data(data + error[:7])
    (first,) = list(buffer)
    assert first.headers == {
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(first.payload)["delta"] == {"text": "hé"}
    buffer.add_data(error[7:])
    (second,) = list(buffer)
    assert second.headers[":exception-type"] == "throttlingException"
    assert json.loads(second.payload) == {"message": "Too many tokens"}
    broken = bytearray(frame({":message-type": "event"}, b"{}"))
    broken[-1] ^= 0xFF
    corrupt = EventStreamBuffer()
    corrupt.add_data(bytes(broken))
    with pytest.raises(ChecksumMismatch):
        list(corrupt)
