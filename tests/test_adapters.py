"""Provider adapters against the simulated providers, over real loopback HTTP.

Each API (OpenAI, Azure OpenAI, Anthropic, Gemini) is driven through the same
scenarios; cases the simulator cannot produce (a 200 with a wrong content type,
invalid JSON, an oversized body…) come from a small hostile server below.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

import worker.adapters
import worker.adapters.http
from tests.netkit import free_port
from worker.adapters import (
    AnthropicAdapter,
    Completion,
    GeminiAdapter,
    OpenAIAdapter,
    ProviderCall,
    TextDelta,
    ToolCallDelta,
    build_adapter,
    make_client,
)
from worker.adapters.base import Adapter, Event
from worker.adapters.classify import classify_stream_error
from worker.errors import (
    AuthFailed,
    ConnectionFailed,
    FirstByteTimeout,
    MalformedResponse,
    Overloaded,
    ProviderError,
    RateLimited,
    ServerError,
)
from worker.settings import ProviderSettings
from worker.simulator import Fault, Simulator
from worker.simulator.catalogue import STREAM_NAMES, Kind, canned_stream
from worker.types import Message, Tool, ToolCall

SECRET = "sk-test-SECRET-0123456789abcdef"
KEY_ENV = "RELEVO_TEST_ADAPTER_KEY"
APIS = ("openai", "azure", "anthropic", "gemini")
AUTH_HEADER = {
    "openai": "authorization",
    "azure": "api-key",
    "anthropic": "x-api-key",
    "gemini": "x-goog-api-key",
}

WEATHER = Tool(
    name="get_weather",
    description="Current weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


def settings(api: str, base: str, **overrides: Any) -> ProviderSettings:
    """Provider settings for `api` on the server at `base` (the simulator's layout)."""
    fields: dict[str, Any] = {
        "openai": {"kind": "openai", "base_url": f"{base}/v1"},
        "azure": {
            "kind": "openai",
            "base_url": f"{base}/openai",
            "azure_api_version": "2024-10-21",
        },
        "anthropic": {"kind": "anthropic", "base_url": base},
        "gemini": {"kind": "gemini", "base_url": base},
    }[api]
    return ProviderSettings(**fields, api_key_env=KEY_ENV, **overrides)


def adapter(api: str, base: str, client: httpx.AsyncClient, **overrides: Any) -> Adapter:
    return build_adapter(settings(api, base, **overrides), client)


def ask(model: str, *, stream: bool, tools: tuple[Tool, ...] = ()) -> ProviderCall:
    return ProviderCall(
        model_id=model,
        messages=(Message(role="user", content="Hello?"),),
        tools=tools,
        max_tokens=100,
        stream=stream,
    )


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


async def drain_into(out: list[Event], events: AsyncIterator[Event]) -> None:
    """Append each event to `out` as it comes, so a test can see what arrived before an error."""
    async for event in events:
        out.append(event)  # noqa: PERF401 - the list must fill up before the error


@pytest.fixture
def model() -> str:
    """A model name no other test uses, so faults and recorded requests stay apart."""
    return f"m-{uuid.uuid4().hex[:12]}"


# --- success paths ------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_non_streaming_text_is_one_completion_with_usage(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    events = await collect(adapter(api, sim.url, client).send(ask(model, stream=False)))
    assert len(events) == 1
    done = events[0]
    assert isinstance(done, Completion)
    assert done.text.startswith(f"Answer from {model}.")
    assert done.tool_calls == ()
    assert done.usage.input_tokens > 0
    assert done.usage.output_tokens == 8
    assert done.finish_reason in {"stop", "end_turn", "STOP"}
    record = sim.requests(model)[-1]
    assert record.auth_header == AUTH_HEADER[api]
    assert record.stream is False


@pytest.mark.parametrize("api", APIS)
async def test_streaming_yields_text_deltas_then_the_same_completion(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    events = await collect(adapter(api, sim.url, client).send(ask(model, stream=True)))
    *deltas, done = events
    assert isinstance(done, Completion)
    assert len(deltas) == 8
    assert all(isinstance(d, TextDelta) and d.text for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == done.text
    assert done.text.startswith(f"Answer from {model}.")
    assert done.usage.output_tokens == 8
    assert done.usage.input_tokens > 0
    assert done.finish_reason in {"stop", "end_turn", "STOP"}
    assert sim.requests(model)[-1].stream is True


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
async def test_tool_call_answer_is_parsed_into_a_tool_call_with_object_arguments(
    api: str, stream: bool, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    args = {"city": "Paris", "units": {"temp": "C"}, "days": [1, 2]}
    sim.set_faults(model, Fault(reply_tool="get_weather", tool_args=args))
    call = ask(model, stream=stream, tools=(WEATHER,))
    events = await collect(adapter(api, sim.url, client).send(call))
    done = events[-1]
    assert isinstance(done, Completion)
    assert len(done.tool_calls) == 1
    tool_call = done.tool_calls[0]
    assert tool_call.name == "get_weather"
    assert tool_call.arguments == args
    assert tool_call.id
    assert done.text == ""
    assert sim.requests(model)[-1].tools == ("get_weather",)
    if stream:
        deltas = [e for e in events if isinstance(e, ToolCallDelta)]
        assert deltas[0].name == "get_weather"
        assert {d.index for d in deltas} == {0}
        assert json.loads("".join(d.arguments for d in deltas)) == args


CONVERSATION = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="Weather in Paris and Rome?"),
    Message(
        role="assistant",
        content="Checking.",
        tool_calls=(
            ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_2", name="get_weather", arguments={"city": "Rome"}),
        ),
    ),
    Message(role="tool", tool_call_id="call_1", content="18C"),
    Message(role="tool", tool_call_id="call_2", content="21C"),
    Message(role="user", content="And tomorrow?"),
)
SCHEMA = WEATHER.parameters


def expected_body(api: str, model: str) -> dict[str, Any]:
    """The request each API must receive for CONVERSATION (OpenAI arguments compared parsed)."""
    if api in ("openai", "azure"):
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": c}},
            }
            for i, c in ((1, "Paris"), (2, "Rome"))
        ]
        return {
            "model": model,
            "max_completion_tokens" if api == "azure" else "max_tokens": 100,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": calls},
                {"role": "tool", "content": "18C", "tool_call_id": "call_1"},
                {"role": "tool", "content": "21C", "tool_call_id": "call_2"},
                {"role": "user", "content": "And tomorrow?"},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Current weather in a city",
                        "parameters": SCHEMA,
                    },
                }
            ],
        }
    if api == "anthropic":
        return {
            "model": model,
            "max_tokens": 100,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Checking."},
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "call_2",
                            "name": "get_weather",
                            "input": {"city": "Rome"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": "21C"},
                    ],
                },
                {"role": "user", "content": "And tomorrow?"},
            ],
            "tools": [
                {
                    "name": "get_weather",
                    "description": "Current weather in a city",
                    "input_schema": SCHEMA,
                }
            ],
        }

    def response(call_id: str, text: str) -> dict[str, Any]:
        return {
            "functionResponse": {
                "id": call_id,
                "name": "get_weather",
                "response": {"output": text},
            }
        }

    def function_call(call_id: str, city: str) -> dict[str, Any]:
        return {"functionCall": {"id": call_id, "name": "get_weather", "args": {"city": city}}}

    return {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Checking."},
                    # No vendor signed these calls: Google's stand-in on the first only.
                    {
                        **function_call("call_1", "Paris"),
                        "thoughtSignature": "skip_thought_signature_validator",
                    },
                    function_call("call_2", "Rome"),
                ],
            },
            {
                "role": "user",
                "parts": [
                    response("call_1", "18C"),
                    response("call_2", "21C"),
                    {"text": "And tomorrow?"},
                ],
            },
        ],
        "generationConfig": {"maxOutputTokens": 100},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Current weather in a city",
                        "parametersJsonSchema": SCHEMA,
                    }
                ]
            }
        ],
    }


def parse_openai_arguments(body: dict[str, Any]) -> dict[str, Any]:
    for message in body.get("messages", []):
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return body


@pytest.mark.parametrize("api", APIS)
async def test_conversation_with_tool_calls_and_results_maps_to_each_apis_request(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    call = ProviderCall(
        model_id=model, messages=CONVERSATION, tools=(WEATHER,), max_tokens=100, stream=False
    )
    await collect(adapter(api, sim.url, client).send(call))
    record = sim.requests(model)[-1]
    body = json.loads(json.dumps(record.body))
    assert parse_openai_arguments(body) == expected_body(api, model)
    paths = {
        "openai": "/v1/chat/completions",
        "azure": f"/openai/deployments/{model}/chat/completions",
        "anthropic": "/v1/messages",
        "gemini": f"/v1beta/models/{model}:generateContent",
    }
    assert record.path == paths[api]
    assert record.query == ({"api-version": "2024-10-21"} if api == "azure" else {})


@pytest.mark.parametrize("api", ["openai", "azure"])
async def test_openai_stream_asks_for_usage(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    await collect(adapter(api, sim.url, client).send(ask(model, stream=True)))
    body = sim.requests(model)[-1].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_gemini_stream_uses_the_sse_method(
    sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    await collect(adapter("gemini", sim.url, client).send(ask(model, stream=True)))
    record = sim.requests(model)[-1]
    assert record.path == f"/v1beta/models/{model}:streamGenerateContent"
    assert record.query == {"alt": "sse"}


def test_build_adapter_picks_the_class_by_kind() -> None:
    chosen = {
        api: type(build_adapter(settings(api, "http://127.0.0.1:9"), make_client())) for api in APIS
    }
    assert chosen == {
        "openai": OpenAIAdapter,
        "azure": OpenAIAdapter,
        "anthropic": AnthropicAdapter,
        "gemini": GeminiAdapter,
    }


def test_public_surface_is_pinned() -> None:
    assert worker.adapters.__all__ == sorted(worker.adapters.__all__)
    assert set(worker.adapters.__all__) == {
        "ADAPTERS",
        "Adapter",
        "AnthropicAdapter",
        "BedrockAdapter",
        "Completion",
        "Event",
        "GeminiAdapter",
        "OpenAIAdapter",
        "OpenAIResponsesAdapter",
        "ProviderCall",
        "TextDelta",
        "ToolCallDelta",
        "VertexAdapter",
        "build_adapter",
        "make_client",
        "reasoning_family",
    }


# --- provider errors ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    "case",
    [
        ("openai", 429, {"retry-after": "3"}, RateLimited),
        ("azure", 401, {}, AuthFailed),
        ("anthropic", 529, {}, Overloaded),
        ("gemini", 503, {}, Overloaded),
        ("openai", 500, {}, ServerError),
    ],
)
async def test_error_status_is_classified_by_the_policy(
    case: tuple[str, int, dict[str, str], type[ProviderError]],
    stream: bool,
    sim: Simulator,
    client: httpx.AsyncClient,
    model: str,
) -> None:
    api, status, headers, expected = case
    sim.set_faults(model, Fault(status=status, headers=headers))
    with pytest.raises(expected) as caught:
        await collect(adapter(api, sim.url, client).send(ask(model, stream=stream)))
    assert caught.value.status == status
    if headers:
        assert caught.value.retry_after_s == 3.0


@pytest.mark.parametrize("api", APIS)
async def test_echoed_api_key_never_appears_in_the_error(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    sim.set_faults(model, Fault(status=401, echo_key=True))
    with pytest.raises(AuthFailed) as caught:
        await collect(adapter(api, sim.url, client).send(ask(model, stream=False)))
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value.args)
    assert "[redacted]" in str(caught.value)


@pytest.mark.parametrize(
    ("api", "expected"),
    [
        ("openai", ServerError),
        ("azure", ServerError),
        ("anthropic", Overloaded),
        ("gemini", Overloaded),
    ],
)
async def test_mid_stream_error_event_raises_after_the_content_already_sent(
    api: str, expected: type[ProviderError], sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    sim.set_faults(model, Fault(error_after_tokens=2))
    events: list[Event] = []
    with pytest.raises(expected):
        await drain_into(events, adapter(api, sim.url, client).send(ask(model, stream=True)))
    assert [type(e) for e in events] == [TextDelta, TextDelta]


STREAM_ERRORS = [
    (api, name) for api in ("openai", "anthropic", "gemini") for name in STREAM_NAMES[api]
]


@pytest.mark.parametrize(("api", "name"), STREAM_ERRORS)
async def test_each_real_mid_stream_error_reaches_the_classifier(
    api: Kind, name: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    """The stream decoder hands every error event the provider sends to the classifier, in
    whatever shape it comes (Google's one-element list included), never as malformed."""
    payload = canned_stream(api, name)
    sim.set_faults(model, Fault(error_after_tokens=1, stream_error=payload))
    events: list[Event] = []
    with pytest.raises(ProviderError) as caught:
        await drain_into(events, adapter(api, sim.url, client).send(ask(model, stream=True)))
    assert type(caught.value) is type(classify_stream_error(api, payload))
    assert not isinstance(caught.value, MalformedResponse)
    assert [type(e) for e in events] == [TextDelta]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
async def test_connection_dropped_mid_answer_is_connection_failed(
    api: str, stream: bool, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    sim.set_faults(model, Fault(error_after_tokens=2, drop=True))
    with pytest.raises(ConnectionFailed):
        await collect(adapter(api, sim.url, client).send(ask(model, stream=stream)))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
async def test_connection_refused_is_connection_failed(
    api: str, stream: bool, client: httpx.AsyncClient
) -> None:
    base = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionFailed, match=r"refused|Connect call failed"):
        await collect(adapter(api, base, client).send(ask("m", stream=stream)))


@pytest.mark.parametrize("api", APIS)
async def test_silence_past_the_backstop_timeout_is_a_first_byte_timeout(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    sim.set_faults(model, Fault(stall_first_byte_s=3))
    a = adapter(api, sim.url, client, total_timeout_s=0.3)
    with pytest.raises(FirstByteTimeout):
        await collect(a.send(ask(model, stream=True)))


@pytest.mark.parametrize("api", APIS)
async def test_stream_silent_after_content_past_the_backstop_is_connection_failed(
    api: str, sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    sim.set_faults(model, Fault(stall_after_tokens=2, stall_after_s=3))
    events: list[Event] = []
    with pytest.raises(ConnectionFailed, match="went silent"):
        await drain_into(
            events, adapter(api, sim.url, client, total_timeout_s=0.3).send(ask(model, stream=True))
        )
    assert [type(e) for e in events] == [TextDelta, TextDelta]


@pytest.mark.parametrize(
    ("base", "azure", "field"),
    [
        ("https://api.openai.com/v1", None, "max_completion_tokens"),
        ("https://x.openai.azure.com/openai", "2024-10-21", "max_completion_tokens"),
        ("http://localhost:11434/v1", None, "max_tokens"),
        ("http://vllm.internal:8000/v1", None, "max_tokens"),
    ],
)
def test_openai_output_limit_field_suits_the_server(
    base: str, azure: str | None, field: str
) -> None:
    """OpenAI and Azure get max_completion_tokens; Ollama, vLLM and other servers max_tokens."""
    provider = ProviderSettings(kind="openai", base_url=base, azure_api_version=azure)
    body = OpenAIAdapter(provider, make_client()).request(ask("gpt", stream=False)).body
    assert body[field] == 100
    assert {"max_tokens", "max_completion_tokens"} & set(body) == {field}


@pytest.mark.parametrize(
    ("budget", "max_tokens", "thinks"), [(1024, 2048, True), (1024, 1024, False)]
)
def test_claude_thinks_only_with_a_budget_below_max_tokens(
    budget: int, max_tokens: int, thinks: bool
) -> None:
    """The API refuses a thinking budget that is not below max_tokens: such a call asks none."""
    provider = ProviderSettings(kind="anthropic", base_url="https://api.anthropic.com")
    call = ProviderCall(
        "claude", (Message(role="user", content="hi"),), (), max_tokens, False, budget
    )
    body = AnthropicAdapter(provider, make_client()).request(call).body
    assert ("thinking" in body) is thinks


# --- the pool never wedges ----------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_abandoned_streams_release_their_connections(
    api: str, sim: Simulator, model: str
) -> None:
    """Twenty streams left half-way on a pool of four, then four more calls still succeed."""
    sim.set_faults(model, Fault(tokens=200, token_interval_s=0.02))
    async with make_client(max_connections=4) as small:
        a = adapter(api, sim.url, small)
        for _ in range(20):
            stream = a.send(ask(model, stream=True))
            assert isinstance(stream, AsyncGenerator)
            async with asyncio.timeout(5):
                first = await anext(stream)
            assert isinstance(first, TextDelta)
            await stream.aclose()
        sim.set_faults(model)
        async with asyncio.timeout(5):
            results = await asyncio.gather(
                *(collect(a.send(ask(model, stream=True))) for _ in range(4))
            )
    assert all(isinstance(events[-1], Completion) for events in results)


@pytest.mark.parametrize("api", APIS)
async def test_streams_cancelled_before_first_byte_release_their_connections(
    api: str, sim: Simulator, model: str
) -> None:
    """What the chain's first-byte timeout does, eight times on a pool of two."""
    sim.set_faults(model, Fault(stall_before_content_s=5, times=8))
    async with make_client(max_connections=2) as small:
        a = adapter(api, sim.url, small)
        for _ in range(8):
            stream = a.send(ask(model, stream=True))
            assert isinstance(stream, AsyncGenerator)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await anext(stream)
            await stream.aclose()
        # A request cancelled before it reached the simulator used no fault: clear the rest,
        # so the last request answers unless the pool still holds abandoned connections.
        sim.set_faults(model)
        async with asyncio.timeout(5):
            events = await collect(a.send(ask(model, stream=True)))
    assert isinstance(events[-1], Completion)


# --- hostile responses the simulator does not produce ---------------------------------


def sse(*frames: tuple[str | None, Any]) -> bytes:
    out = b""
    for event, data in frames:
        head = f"event: {event}\n" if event else ""
        text = data if isinstance(data, str) else json.dumps(data)
        out += f"{head}data: {text}\n\n".encode()
    return out


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
    return None, {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def tool_use_start(args: str) -> list[tuple[str | None, Any]]:
    return [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": args},
            },
        ),
    ]


ANTHROPIC_END = [
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
    ("message_stop", {"type": "message_stop"}),
]
GEMINI_BAD_ARGS = {
    "candidates": [
        {
            "content": {"parts": [{"functionCall": {"name": "f", "args": [1, 2]}}]},
            "finishReason": "STOP",
        }
    ]
}
# (api, stream) -> a 200 answer whose tool-call arguments are not a JSON object.
BAD_ARGUMENTS: dict[tuple[str, bool], bytes] = {
    ("openai", False): json.dumps(
        {
            "choices": [
                {
                    "message": {
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1, 2]"},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
    ).encode(),
    ("openai", True): sse(
        openai_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{oops"}}
                ]
            }
        ),
        openai_chunk({}, "tool_calls"),
        (None, "[DONE]"),
    ),
    ("anthropic", False): json.dumps(
        {
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": [1, 2]}],
            "stop_reason": "tool_use",
        }
    ).encode(),
    ("anthropic", True): sse(*tool_use_start("[1, 2]"), *ANTHROPIC_END),
    ("gemini", False): json.dumps(GEMINI_BAD_ARGS).encode(),
    ("gemini", True): sse((None, GEMINI_BAD_ARGS)),
}
# api -> a stream cut after one piece of content, without the API's end marker.
CUT_STREAMS: dict[str, bytes] = {
    "openai": sse(openai_chunk({"content": "Hel"})),
    "anthropic": sse(
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"},
            },
        ),
    ),
    "gemini": sse((None, {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]})),
}
ECHO = f"Rate limit reached for key {SECRET}."
# api -> a rate-limit error event, after one piece of content, that quotes the API key.
ERROR_STREAMS: dict[str, bytes] = {
    "openai": sse(
        openai_chunk({"content": "Hel"}),
        (
            None,
            {
                "error": {
                    "message": ECHO,
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
        ),
    ),
    "anthropic": CUT_STREAMS["anthropic"]
    + sse(("error", {"type": "error", "error": {"type": "rate_limit_error", "message": ECHO}})),
    "gemini": CUT_STREAMS["gemini"]
    + sse((None, {"error": {"code": 429, "message": ECHO, "status": "RESOURCE_EXHAUSTED"}})),
}


def api_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "openai"
    return "anthropic" if path.endswith("/v1/messages") else "gemini"


def fixed(status: int, content_type: str, body: bytes, **headers: str) -> web.Response:
    return web.Response(status=status, body=body, headers={"content-type": content_type, **headers})


async def endless(request: web.Request, content_type: str) -> web.StreamResponse:
    """About 20 MiB of SSE comments, far past the (patched) caps."""
    response = web.StreamResponse(status=200, headers={"content-type": content_type})
    await response.prepare(request)
    with contextlib.suppress(ConnectionError):
        for _ in range(10_000):
            await response.write(b": " + b"x" * 2046 + b"\n")
    return response


JSON, SSE = "application/json", "text/event-stream"
# scenario -> (api, stream) -> the response
SCENARIOS: dict[str, Any] = {
    "html": lambda api, stream: fixed(200, "text/html", b"<html>captive portal</html>"),
    "not-json": lambda api, stream: fixed(200, JSON, b'{"choices": ['),
    "wrong-shape": lambda api, stream: fixed(200, JSON, b'{"ok": true}'),
    "bad-sse-data": lambda api, stream: fixed(200, SSE, b"data: {broken\n\n"),
    "bad-gzip": lambda api, stream: fixed(200, JSON, b"not gzip", **{"content-encoding": "gzip"}),
    "bad-args": lambda api, stream: fixed(
        200, SSE if stream else JSON, BAD_ARGUMENTS[(api, stream)]
    ),
    "cut": lambda api, stream: fixed(200, SSE, CUT_STREAMS[api]),
    "error-event": lambda api, stream: fixed(200, SSE, ERROR_STREAMS[api]),
    "declared-huge": lambda api, stream: fixed(200, JSON, b"{}" + b" " * 200_000),
}


async def hostile_handler(request: web.Request) -> web.StreamResponse:
    scenario, path = request.match_info["scenario"], "/" + request.match_info["tail"]
    stream = (await request.json()).get("stream") is True or "streamGenerateContent" in path
    if scenario == "endless-json":
        return await endless(request, JSON)
    if scenario == "endless-sse":
        return await endless(request, SSE)
    response: web.Response = SCENARIOS[scenario](api_of(path), stream)
    return response


@pytest.fixture
async def hostile() -> AsyncIterator[str]:
    """A server on loopback answering each scenario path with one kind of bad response."""
    app = web.Application()
    app.router.add_post("/{scenario}/{tail:.*}", hostile_handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def hostile_adapter(api: str, url: str, scenario: str, client: httpx.AsyncClient) -> Adapter:
    return adapter(api, f"{url}/{scenario}", client)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "case",
    [
        ("html", "content type"),
        ("not-json", "unexpected|content type"),
        ("wrong-shape", "unexpected|content type"),
        ("bad-args", "not a JSON object|not valid JSON|unexpected"),
        ("bad-gzip", "invalid HTTP response|content type"),
    ],
)
async def test_untrusted_200_answers_are_malformed_responses(
    case: tuple[str, str], api: str, stream: bool, hostile: str, client: httpx.AsyncClient
) -> None:
    scenario, match = case
    with pytest.raises(MalformedResponse, match=match):
        await collect(hostile_adapter(api, hostile, scenario, client).send(ask("m", stream=stream)))


@pytest.mark.parametrize("api", APIS)
async def test_sse_data_that_is_not_json_is_malformed(
    api: str, hostile: str, client: httpx.AsyncClient
) -> None:
    with pytest.raises(MalformedResponse):
        await collect(
            hostile_adapter(api, hostile, "bad-sse-data", client).send(ask("m", stream=True))
        )


@pytest.mark.parametrize("api", APIS)
async def test_stream_ending_without_its_end_marker_is_connection_failed(
    api: str, hostile: str, client: httpx.AsyncClient
) -> None:
    events: list[Event] = []
    with pytest.raises(ConnectionFailed, match="stream ended"):
        await drain_into(
            events, hostile_adapter(api, hostile, "cut", client).send(ask("m", stream=True))
        )
    assert events == [TextDelta("Hel")]


@pytest.mark.parametrize("api", APIS)
async def test_mid_stream_error_is_classified_and_the_echoed_key_scrubbed(
    api: str, hostile: str, client: httpx.AsyncClient
) -> None:
    with pytest.raises(RateLimited) as caught:
        await collect(
            hostile_adapter(api, hostile, "error-event", client).send(ask("m", stream=True))
        )
    assert SECRET not in str(caught.value)
    assert "[redacted]" in str(caught.value)


@pytest.mark.parametrize(("scenario", "stream"), [("endless-json", False), ("endless-sse", True)])
async def test_body_past_the_cap_is_cut_off_as_malformed(
    scenario: str,
    stream: bool,
    hostile: str,
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker.adapters.http, "MAX_RESPONSE_BYTES", 64 * 1024)
    monkeypatch.setattr(worker.adapters.http, "MAX_STREAM_BYTES", 64 * 1024)
    with pytest.raises(MalformedResponse, match="larger than 65536"):
        await collect(
            hostile_adapter("openai", hostile, scenario, client).send(ask("m", stream=stream))
        )


async def test_declared_length_past_the_cap_is_refused_before_reading(
    hostile: str, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker.adapters.http, "MAX_RESPONSE_BYTES", 64 * 1024)
    with pytest.raises(MalformedResponse, match="exceeds 65536"):
        await collect(
            hostile_adapter("anthropic", hostile, "declared-huge", client).send(
                ask("m", stream=False)
            )
        )


async def test_a_server_that_does_not_speak_http_is_malformed(client: httpx.AsyncClient) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(MalformedResponse, match="invalid HTTP response"):
            await collect(
                adapter("gemini", f"http://127.0.0.1:{port}", client).send(ask("m", stream=False))
            )
    finally:
        server.close()
        await server.wait_closed()
