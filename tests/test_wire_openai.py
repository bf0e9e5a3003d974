"""OpenAI Chat Completions (and Azure OpenAI): every field of a turn on the wire, over real HTTP.

Each test names the document it pins. "API reference" is OpenAI's reference for
`POST /v1/chat/completions` (platform.openai.com/docs/api-reference/chat/create, the same
text as the openai-python SDK's `types/chat/completion_create_params.py`); the guides are
OpenAI's "Images and vision", "File inputs", "Structured Outputs" and "Reasoning models";
Azure's is the Azure OpenAI inference REST reference, api-version 2024-10-21. The
simulator refuses what OpenAI refuses, with OpenAI's error bodies
(`worker.simulator.openai_request`): a call it answers is one the API would take.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from hypothesis import example, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.chainkit import KEY, model, run, settings
from worker.adapters import Completion, ProviderCall, TextDelta, build_adapter, make_client
from worker.adapters.base import Event
from worker.adapters.stop_cut import cut_at_stops
from worker.errors import InvalidRequest
from worker.settings import ProviderSettings
from worker.simulator import Fault, Simulator
from worker.simulator.json_answer import instance
from worker.turn.capability import wire_unfit
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Status,
    TextPart,
    Tool,
    TurnRequest,
)

KEY_ENV = "RELEVO_TEST_WIRE_KEY"
APIS = ("openai", "azure")
PNG = (  # one pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDw+PgplbmRvYmoKdHJhaWxlcgo8PD4+CiUlRU9GCg=="
WEATHER = Tool(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = Tool(name="get_time")
# Strict mode's subset: every object closed and every property required.
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "status": {"enum": ["open", "shipped"]},
    },
    "required": ["order_id", "items", "status"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)


def unique(prefix: str = "gpt-4o") -> str:
    """A model name no other test uses (the simulator reads the family from its start)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def provider(api: str, sim: Simulator) -> ProviderSettings:
    if api == "azure":
        return ProviderSettings(
            kind="openai",
            base_url=f"{sim.url}/openai",
            azure_api_version="2024-10-21",
            api_key_env=KEY_ENV,
        )
    return ProviderSettings(kind="openai", base_url=f"{sim.url}/v1", api_key_env=KEY_ENV)


def ask(model_id: str, *messages: Message, **fields: Any) -> ProviderCall:
    fields.setdefault("tools", ())
    return ProviderCall(
        model_id=model_id,
        messages=messages or (Message(role="user", content="Hello?"),),
        max_tokens=100,
        stream=fields.pop("stream", False),
        **fields,
    )


async def send(
    api: str, sim: Simulator, client: httpx.AsyncClient, call: ProviderCall
) -> tuple[list[Event], dict[str, Any]]:
    """The events of `call`, and the body the simulator received for it."""
    events = [e async for e in build_adapter(provider(api, sim), client).send(call)]
    return events, dict(sim.requests(call.model_id)[-1].body)


def user(*parts: TextPart | ImagePart | DocumentPart) -> Message:
    return Message(role="user", content=parts)


def openai_error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


# --- content parts -------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_images_are_image_url_parts_inline_data_as_a_data_url(
    api: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (user message content parts: `image_url`, "either a URL of the image
    or the base64 encoded image data"), "Images and vision" (a Base64-encoded data URL)."""
    parts = (
        TextPart(text="What is in these?"),
        ImagePart(media_type="image/png", data=PNG),
        ImagePart(url="https://example.com/cat.jpg"),
    )
    events, body = await send(api, sim, client, ask(unique(), user(*parts)))
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]
    assert isinstance(events[-1], Completion)
    assert events[-1].text.startswith("Answer from")


@pytest.mark.parametrize("api", APIS)
async def test_a_pdf_is_a_file_part_with_its_name_and_a_data_url(
    api: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "File inputs" (Chat Completions: `file` parts, `file_data` as
    `data:application/pdf;base64,...` with its `filename`, which the API requires)."""
    parts = (
        DocumentPart(data=PDF, name="invoice.pdf"),
        DocumentPart(data=PDF),
        TextPart(text="Total?"),
    )
    _, body = await send(api, sim, client, ask(unique(), user(*parts)))
    data = f"data:application/pdf;base64,{PDF}"
    assert body["messages"][0]["content"] == [
        {"type": "file", "file": {"filename": "invoice.pdf", "file_data": data}},
        {"type": "file", "file": {"filename": "document.pdf", "file_data": data}},
        {"type": "text", "text": "Total?"},
    ]


async def test_a_pdf_by_url_is_unfit_for_the_wire_and_never_sent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "File inputs": "External file URL (file_url): Chat Completions: not supported"."""
    message = user(TextPart(text="Read it"), DocumentPart(url="https://example.com/a.pdf"))
    turn = TurnRequest(tenant_id="acme", messages=(message,))
    unfit = wire_unfit(turn, "openai", "gpt-4o")
    assert unfit is not None
    assert unfit.detail == "its openai API cannot carry a document by URL"
    name = unique()
    with pytest.raises(InvalidRequest, match="not by URL"):
        await send("openai", sim, client, ask(name, message))
    assert sim.requests(name) == []


async def test_a_tool_result_is_text_parts_and_never_an_image(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (tool message: "For tool messages, only type `text` is supported"),
    as Azure's 2024-10-21 reference (`chatCompletionRequestToolMessageContentPart`)."""
    asked = Message(
        role="assistant",
        tool_calls=({"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}},),
    )
    result = Message(
        role="tool", tool_call_id="call_1", content=(TextPart(text="4C"), TextPart(text="rain"))
    )
    name = unique()
    await send("openai", sim, client, ask(name, user(TextPart(text="Oslo?")), asked, result))
    assert sim.requests(name)[-1].body["messages"][2] == {
        "role": "tool",
        "content": [{"type": "text", "text": "4C"}, {"type": "text", "text": "rain"}],
        "tool_call_id": "call_1",
    }
    shot = Message(
        role="tool", tool_call_id="call_1", content=(ImagePart(media_type="image/png", data=PNG),)
    )
    turn = TurnRequest(tenant_id="acme", messages=(user(TextPart(text="Oslo?")), asked, shot))
    unfit = wire_unfit(turn, "openai", "gpt-4o")
    assert unfit is not None
    assert unfit.detail == "its openai API cannot carry an image in a tool result"
    with pytest.raises(InvalidRequest, match="no image in a tool message"):
        await send("openai", sim, client, ask(unique(), *turn.messages))


async def test_streaming_with_images_and_a_pdf_still_streams(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (`stream`: data-only server-sent events ending `data: [DONE]`), with
    the parts of "Images and vision" and "File inputs"."""
    parts = (ImagePart(media_type="image/png", data=PNG), DocumentPart(data=PDF, name="a.pdf"))
    events, body = await send(
        "openai", sim, client, ask(unique(), user(TextPart(text="Compare"), *parts), stream=True)
    )
    deltas = [e for e in events if isinstance(e, TextDelta)]
    done = events[-1]
    assert len(deltas) == 8
    assert isinstance(done, Completion)
    assert "".join(d.text for d in deltas) == done.text
    assert body["stream"] is True
    assert [p["type"] for p in body["messages"][0]["content"]] == ["text", "image_url", "file"]


# --- tools -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (NamedTool(name="get_time"), {"type": "function", "function": {"name": "get_time"}}),
    ],
    ids=["auto", "none", "required", "named"],
)
@pytest.mark.parametrize("api", APIS)
async def test_tool_choice_takes_the_apis_shape(
    api: str, choice: Any, wire: Any, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (`tool_choice`: `none`, `auto`, `required`, or
    `{"type": "function", "function": {"name": "my_function"}}`)."""
    call = ask(unique(), tools=(WEATHER, CLOCK), tool_choice=choice, parallel_tool_calls=False)
    _, body = await send(api, sim, client, call)
    assert body["tool_choice"] == wire
    assert body["parallel_tool_calls"] is False


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_forced_tool_is_called(
    stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (`tool_choice`: a named tool "forces the model to call that tool";
    `required`: "the model must call one or more tools"), as the simulator answers it."""
    named = ask(unique(), tools=(CLOCK, WEATHER), tool_choice=NamedTool(name="get_weather"))
    required = ask(unique(), tools=(CLOCK, WEATHER), tool_choice="required")
    for call, called in ((named, "get_weather"), (required, "get_time")):
        events, _ = await send("openai", sim, client, replace(call, stream=stream))
        done = events[-1]
        assert isinstance(done, Completion)
        assert [c.name for c in done.tool_calls] == [called]
        assert (done.text, done.finish_reason) == ("", "tool_calls")
    assert done.tool_calls[0].arguments == {}


async def test_without_tools_neither_tool_choice_nor_parallel_tool_calls_is_sent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """The API refuses both without tools ("'tool_choice' is only allowed when 'tools'
    are specified"); read-only degradation may have dropped every tool of the turn."""
    call = ask(unique(), tool_choice="auto", parallel_tool_calls=True)
    events, body = await send("openai", sim, client, call)
    assert isinstance(events[-1], Completion)
    assert {"tools", "tool_choice", "parallel_tool_calls"}.isdisjoint(body)


# --- sampling and reasoning ----------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_sampling_fields_and_seed_go_to_a_chat_model_as_set(
    api: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """API reference (`temperature` 0-2, `top_p`, `stop`: up to 4 sequences, `seed`)."""
    call = ask(unique(), temperature=0.2, top_p=0.9, stop=("END", "\n\n"), seed=7)
    _, body = await send(api, sim, client, call)
    assert (body["temperature"], body["top_p"], body["stop"], body["seed"]) == (
        0.2,
        0.9,
        ["END", "\n\n"],
        7,
    )
    assert "reasoning_effort" not in body


async def test_unset_fields_are_never_sent(sim: Simulator, client: httpx.AsyncClient) -> None:
    """A field the caller left unset is not sent: the API's default applies."""
    _, body = await send("openai", sim, client, ask(unique(), tools=(WEATHER,)))
    assert set(body) == {"model", "messages", "max_tokens", "tools"}


@pytest.mark.parametrize("family", ["o4-mini", "gpt-5"])
async def test_a_reasoning_model_gets_its_effort_and_none_of_the_fields_it_refuses(
    family: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "Reasoning models" and the API reference (`reasoning_effort`; `stop`: "Not supported
    with latest reasoning models"): o-series and GPT-5 answer 400 to `temperature`, `top_p`
    and `stop`, which the simulator does too."""
    call = ask(
        unique(family),
        temperature=0.2,
        top_p=0.9,
        stop=("zulu",),
        seed=3,
        reasoning=True,
        reasoning_effort="low",
    )
    events, body = await send("openai", sim, client, call)
    assert isinstance(events[-1], Completion)
    assert body["reasoning_effort"] == "low"
    assert body["seed"] == 3
    assert {"temperature", "top_p", "stop"}.isdisjoint(body)


async def test_reasoning_effort_is_not_sent_to_a_model_that_does_not_reason(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "Reasoning models": the effort is a reasoning model's; GPT-4o answers 400 to it."""
    events, body = await send("openai", sim, client, ask(unique(), reasoning_effort="high"))
    assert isinstance(events[-1], Completion)
    assert "reasoning_effort" not in body


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("stops", "kept"),
    [(("bravo",), "alpha "), (("ha br", "delta"), "alp"), (("nowhere",), None)],
    ids=["one", "across-pieces", "absent"],
)
async def test_a_reasoning_models_stop_sequences_cut_its_answer(
    stops: tuple[str, ...],
    kept: str | None,
    stream: bool,
    sim: Simulator,
    client: httpx.AsyncClient,
) -> None:
    """API reference (`stop`: "The returned text will not contain the stop sequence"),
    applied by the adapter for a model that refuses the field."""
    name = unique("o3")
    events, body = await send(
        "openai", sim, client, ask(name, stop=stops, reasoning=True, stream=stream)
    )
    done = events[-1]
    assert isinstance(done, Completion)
    whole = f"Answer from {name}. alpha bravo charlie delta echo"
    assert done.text == (whole if kept is None else f"Answer from {name}. {kept}")
    assert done.finish_reason == "stop"
    if stream:
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == done.text
    assert "stop" not in body


async def test_a_cut_stream_left_half_way_releases_its_connection(sim: Simulator) -> None:
    """Closing the answer of a model whose stops relevo applies closes its HTTP response:
    ten streams left half-way on a pool of two, then two more calls still succeed."""
    name = unique("o3")
    sim.set_faults(name, Fault(tokens=200, token_interval_s=0.02))
    call = ask(name, stop=("never",), reasoning=True, stream=True)
    async with make_client(max_connections=2) as small:
        adapter = build_adapter(provider("openai", sim), small)
        for _ in range(10):
            stream = adapter.send(call)
            async with asyncio.timeout(5):
                first = await anext(stream)
            assert isinstance(first, TextDelta)
            await stream.aclose()
        sim.set_faults(name)

        async def whole() -> list[Event]:
            return [e async for e in adapter.send(call)]

        async with asyncio.timeout(5):
            done = await asyncio.gather(whole(), whole())
    assert all(isinstance(events[-1], Completion) for events in done)


@examples(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.text(alphabet="ab c", max_size=6), max_size=8),
    stops=st.lists(st.text(alphabet="ab c", min_size=1, max_size=3), min_size=1, max_size=4),
)
# A longer stop sequence beginning before a shorter one that has ended is the first.
@example(pieces=["ba", "c"], stops=["a", "bac"])
def test_streamed_or_whole_the_cut_answer_is_the_same(pieces: list[str], stops: list[str]) -> None:
    """However the text is streamed, the deltas add up to the answer before its first stop
    sequence, and so does the final completion."""
    whole = "".join(pieces)
    found = [at for at in (whole.find(s) for s in stops) if at >= 0]
    expected = whole[: min(found)] if found else whole

    async def events() -> AsyncGenerator[Event, None]:
        for piece in pieces:
            yield TextDelta(piece)
        yield Completion(text=whole, finish_reason="length")

    async def cut() -> list[Event]:
        return [e async for e in cut_at_stops(events(), stops)]

    out = asyncio.run(cut())
    done = out[-1]
    assert isinstance(done, Completion)
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == expected == done.text
    assert done.finish_reason == ("stop" if found else "length")


# --- structured output -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_a_json_schema_goes_as_response_format_and_the_answer_follows_it(
    api: str, stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "Structured Outputs" (`response_format: {"type": "json_schema", "json_schema":
    {"name", "schema", "strict"}}`)."""
    wanted = JsonSchemaFormat(name="order", json_schema=ORDER_SCHEMA, strict=True)
    events, body = await send(
        api, sim, client, ask(unique(), response_format=wanted, stream=stream)
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True},
    }
    done = events[-1]
    assert isinstance(done, Completion)
    answer = json.loads(done.text)
    assert Draft202012Validator(ORDER_SCHEMA).is_valid(answer)
    assert answer == instance(ORDER_SCHEMA)


async def test_json_mode_is_json_object(sim: Simulator, client: httpx.AsyncClient) -> None:
    """API reference (`{"type": "json_object"}` enables JSON mode)."""
    asked = Message(role="user", content="Reply in JSON, please.")
    call = ask(unique(), asked, response_format=JsonObjectFormat())
    events, body = await send("openai", sim, client, call)
    assert body["response_format"] == {"type": "json_object"}
    done = events[-1]
    assert isinstance(done, Completion)
    assert isinstance(json.loads(done.text), dict)


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_a_refusal_is_the_completions_refusal_never_its_text(
    api: str, stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "Structured Outputs" (Refusals: `message.refusal`, and `delta.refusal` when
    streaming, in the SDK's `ChatCompletionChunk`), with finish reason `stop`."""
    name = unique()
    sim.set_faults(name, Fault(refusal="I'm sorry, I cannot help with that request."))
    wanted = JsonSchemaFormat(name="order", json_schema=ORDER_SCHEMA)
    events, _ = await send(api, sim, client, ask(name, response_format=wanted, stream=stream))
    assert len(events) == 1
    done = events[0]
    assert isinstance(done, Completion)
    assert done.refusal == "I'm sorry, I cannot help with that request."
    assert (done.text, done.finish_reason) == ("", "refusal")


# --- what the simulator refuses, as OpenAI does ------------------------------------------------

MESSAGES = [{"role": "user", "content": "Hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {}}}]
NOT_STRICT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
REFUSED: dict[str, tuple[dict[str, Any], str, str | None, str | None]] = {
    "unknown-field": (
        {"model": "gpt-4o", "messages": MESSAGES, "temperture": 0.5},
        "Unrecognized request argument supplied: temperture",
        None,
        None,
    ),
    "image-data-url-without-base64": (
        {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}],
                }
            ],
        },
        "Invalid 'messages[0].content[0].image_url.url'. Expected a base64-encoded data URL "
        "with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got "
        "a value without the ';base64' separator.",
        "messages[0].content[0].image_url.url",
        "invalid_value",
    ),
    "file-without-filename": (
        {
            "model": "gpt-4o",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Read"},
                        {
                            "type": "file",
                            "file": {"file_data": f"data:application/pdf;base64,{PDF}"},
                        },
                    ],
                }
            ],
        },
        "Missing required parameter: 'messages[0].content[1].file.file_id'.",
        "messages[0].content[1].file.file_id",
        "missing_required_parameter",
    ),
    "image-in-a-tool-message": (
        {
            "model": "gpt-4o",
            "messages": [
                *MESSAGES,
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "content": [{"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}],
                },
            ],
        },
        "Invalid value: 'image_url'. Supported values are: 'text'.",
        "messages[1].content[0].type",
        "invalid_value",
    ),
    "tool-choice-without-tools": (
        {"model": "gpt-4o", "messages": MESSAGES, "tool_choice": "auto"},
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
        "specified.",
        "tool_choice",
        None,
    ),
    "tool-choice-naming-no-tool": (
        {
            "model": "gpt-4o",
            "messages": MESSAGES,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        "Invalid value for 'tool_choice': function 'get_weather' is not one of the 'tools'.",
        "tool_choice",
        None,
    ),
    "temperature-on-o3": (
        {"model": "o3", "messages": MESSAGES, "temperature": 0.2},
        "Unsupported value: 'temperature' does not support 0.2 with this model. Only the "
        "default (1) value is supported.",
        "temperature",
        "unsupported_value",
    ),
    "stop-on-gpt-5": (
        {"model": "gpt-5-mini", "messages": MESSAGES, "stop": ["END"]},
        "Unsupported parameter: 'stop' is not supported with this model.",
        "stop",
        "unsupported_parameter",
    ),
    "parallel-tool-calls-on-o4-mini": (
        {"model": "o4-mini", "messages": MESSAGES, "tools": TOOLS, "parallel_tool_calls": False},
        "Unsupported parameter: 'parallel_tool_calls' is not supported with this model.",
        "parallel_tool_calls",
        "unsupported_parameter",
    ),
    "reasoning-effort-on-gpt-4o": (
        {"model": "gpt-4o", "messages": MESSAGES, "reasoning_effort": "low"},
        "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
        "reasoning_effort",
        "unsupported_parameter",
    ),
    "strict-schema-left-open": (
        {
            "model": "gpt-4o",
            "messages": MESSAGES,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "thing", "schema": NOT_STRICT, "strict": True},
            },
        },
        "Invalid schema for response_format 'thing': In context=(), 'additionalProperties' is "
        "required to be supplied and to be false.",
        "response_format",
        None,
    ),
    "json-mode-without-the-word": (
        {"model": "gpt-4o", "messages": MESSAGES, "response_format": {"type": "json_object"}},
        "'messages' must contain the word 'json' in some form, to use 'response_format' of "
        "type 'json_object'.",
        "messages",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_the_simulator_refuses_what_openai_refuses_with_its_body(
    case: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """OpenAI's 400 bodies (`{"error": {"message", "type", "param", "code"}}`), as the API
    sends them for each of these requests."""
    body, message, param, code = REFUSED[case]
    response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert openai_error(response) == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": code,
    }


async def test_a_strict_schema_that_requires_less_than_every_property_is_refused(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ "Structured Outputs" (supported schemas: "all fields must be required")."""
    schema = {**ORDER_SCHEMA, "required": ["order_id", "items"]}
    spec = {"name": "order", "schema": schema, "strict": True}
    body = {
        "model": "gpt-4o",
        "messages": MESSAGES,
        "response_format": {"type": "json_schema", "json_schema": spec},
    }
    response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert openai_error(response)["message"] == (
        "Invalid schema for response_format 'order': In context=(), 'required' is required to "
        "be supplied and to be an array including every key in properties. Missing 'status'."
    )
    nested = json.loads(json.dumps(ORDER_SCHEMA))
    del nested["properties"]["items"]["items"]["additionalProperties"]
    spec["schema"] = nested
    response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert "In context=('properties', 'items', 'items')," in openai_error(response)["message"]


# --- through the chain ------------------------------------------------------------------------

SCHEMA_TURN = JsonSchemaFormat(name="order", json_schema=ORDER_SCHEMA, strict=True)


def structured(sim: Simulator) -> Any:
    """Two OpenAI models that answer in a schema, one after the other."""
    both = {
        "openai/alpha": model("openai", ("oa", "alpha"), structured_output=True),
        "openai/alpha-mini": model("openai", ("oa", "alpha-mini"), structured_output=True),
    }
    return settings(sim.url, ("openai/alpha", "openai/alpha-mini"), models=both)


def schema_turn(**fields: Any) -> TurnRequest:
    messages = fields.pop("messages", (Message(role="user", content="My order?"),))
    fields.setdefault("response_format", SCHEMA_TURN)
    return TurnRequest(tenant_id="acme", messages=messages, **fields)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_schema_turn_is_answered_parsed(sim: Simulator, stream: bool) -> None:
    """ "Structured Outputs": the answer follows the schema; relevo parses it (`parsed`)."""
    sim.reset()
    result = await run(structured(sim), schema_turn(stream=stream))
    assert result.status is Status.OK
    assert result.reply is not None
    assert result.reply.parsed == instance(ORDER_SCHEMA)
    assert json.loads(result.reply.text) == result.reply.parsed


async def test_an_answer_off_the_schema_moves_the_turn_to_the_next_model(sim: Simulator) -> None:
    """A model that answers JSON the schema refuses failed its attempt (`output_invalid`,
    billed); the next model answers the same turn."""
    sim.reset()
    sim.set_faults("alpha", Fault(invalid_output=True))
    result = await run(structured(sim), schema_turn())
    assert result.status is Status.OK
    assert (result.step, result.effective_model) == (1, "openai/alpha-mini")
    first = result.attempts[0]
    assert (first.model, first.error_class) == ("openai/alpha", "output_invalid")
    assert result.reply is not None
    assert result.reply.parsed == instance(ORDER_SCHEMA)


async def test_a_strict_schema_outside_openais_subset_fails_as_openai_refuses_it(
    sim: Simulator,
) -> None:
    """ "Structured Outputs" (strict mode's subset): `strict` is sent as the caller set it,
    and OpenAI's 400 is the caller's to fix (`invalid_request`, no fallback)."""
    sim.reset()
    loose = JsonSchemaFormat(name="thing", json_schema=NOT_STRICT, strict=True)
    failed = await run(structured(sim), schema_turn(response_format=loose))
    assert (failed.status, failed.reason) == (Status.FAILED, "invalid_request")
    assert failed.attempts[0].detail is not None
    assert "'additionalProperties' is required" in failed.attempts[0].detail
    relaxed = loose.model_copy(update={"strict": False})
    answered = await run(structured(sim), schema_turn(response_format=relaxed))
    assert answered.status is Status.OK
    assert answered.reply is not None
    assert answered.reply.parsed == instance(NOT_STRICT)


async def test_json_mode_needs_the_word_json_in_the_messages(sim: Simulator) -> None:
    """API reference (JSON mode: "you must also instruct the model to produce JSON"),
    enforced by a 400; relevo never writes it into the turn."""
    sim.reset()
    plain = schema_turn(response_format=JsonObjectFormat())
    failed = await run(structured(sim), plain)
    assert (failed.status, failed.reason) == (Status.FAILED, "invalid_request")
    sent = sim.requests("alpha")[-1].body["messages"]
    assert sent == [{"role": "user", "content": "My order?"}]
    said = (Message(role="system", content="Answer in JSON."), *plain.messages)
    answered = await run(structured(sim), plain.model_copy(update={"messages": said}))
    assert answered.status is Status.OK
    assert answered.reply is not None
    assert answered.reply.parsed == {}


async def test_a_refusal_fails_the_turn_with_the_models_words(sim: Simulator) -> None:
    """A refusal is not a fallback case: another model would get the same prompt."""
    sim.reset()
    sim.set_faults("alpha", Fault(refusal="I can't help with that."))
    result = await run(structured(sim), schema_turn())
    assert (result.status, result.reason, result.finish_reason) == (
        Status.FAILED,
        "refusal",
        "refusal",
    )
    assert result.reply is not None
    assert result.reply.refusal == "I can't help with that."
    assert len(sim.requests("alpha-mini")) == 0
