"""OpenAI's Responses API (and Azure OpenAI's): every field of a turn on the wire, its
answers, streams and errors, over real HTTP to the simulator.

"API reference" is OpenAI's reference for `POST /v1/responses` (the openai-python SDK's
`types/responses/response_create_params.py` and its streaming event types). The
simulator refuses what the API refuses with its error bodies
(`worker.simulator.responses_request`): a call it answers is one the API would take.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from tests.chainkit import KEY
from worker.adapters import (
    Completion,
    OpenAIResponsesAdapter,
    ProviderCall,
    TextDelta,
    ToolCallDelta,
    build_adapter,
)
from worker.adapters.base import Event
from worker.adapters.finish import FinishReason
from worker.settings import ProviderSettings
from worker.simulator import Fault, Simulator
from worker.turn.capability import wire_unfit
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Reasoning,
    TextPart,
    Tool,
    ToolCall,
    TurnRequest,
)

KEY_ENV = "RELEVO_TEST_RESPONSES_KEY"
APIS = ("openai", "azure")
PNG = (  # one pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PNG_URL = f"data:image/png;base64,{PNG}"
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDw+PgplbmRvYmoKdHJhaWxlcgo8PD4+CiUlRU9GCg=="
WEATHER = Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def unique(prefix: str = "gpt-4.1") -> str:
    """A model name no other test uses (the simulator reads the family from its start)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def provider(api: str, sim: Simulator) -> ProviderSettings:
    if api == "azure":
        return ProviderSettings(
            kind="openai",
            api="responses",
            base_url=f"{sim.url}/openai",
            azure_api_version="2025-04-01-preview",
            api_key_env=KEY_ENV,
        )
    return ProviderSettings(
        kind="openai", api="responses", base_url=f"{sim.url}/v1", api_key_env=KEY_ENV
    )


def ask(model_id: str, *messages: Message, **fields: Any) -> ProviderCall:
    fields.setdefault("tools", ())
    return ProviderCall(
        model_id=model_id,
        messages=messages or (Message(role="user", content="Hello?"),),
        max_tokens=fields.pop("max_tokens", 100),
        stream=fields.pop("stream", False),
        **fields,
    )


async def send(
    api: str, sim: Simulator, client: httpx.AsyncClient, call: ProviderCall
) -> tuple[list[Event], dict[str, Any]]:
    """The events of `call`, and the body the simulator received for it."""
    events = [e async for e in build_adapter(provider(api, sim), client).send(call)]
    return events, dict(sim.requests(call.model_id)[-1].body)


def answer(events: list[Event]) -> Completion:
    last = events[-1]
    assert isinstance(last, Completion)
    return last


# --- configuration ---------------------------------------------------------------------


def test_api_responses_picks_the_responses_adapter() -> None:
    chosen = build_adapter(provider("openai", _NOWHERE), httpx.AsyncClient())
    assert isinstance(chosen, OpenAIResponsesAdapter)


def test_api_is_an_openai_providers_choice_only() -> None:
    with pytest.raises(ValueError, match=r'api: "responses" is an openai provider.s choice'):
        ProviderSettings(kind="anthropic", base_url="https://x", api="responses")
    assert ProviderSettings(kind="anthropic", base_url="https://x").wire == "anthropic"


class _Nowhere:
    url = "http://127.0.0.1:9"


_NOWHERE: Any = _Nowhere()


# --- the request -------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_the_request_is_stateless_and_whole(
    api: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """store: false, no encrypted reasoning asked of a model that does not reason, the
    system prompt as instructions, the rest as input items; Azure's route with the
    deployment in the body."""
    model = unique()
    call = ask(
        model,
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hi"),
        Message(role="assistant", content="Hello."),
        Message(role="user", content="Weather?"),
    )
    events, body = await send(api, sim, client, call)
    assert body["store"] is False
    assert "include" not in body
    assert body["instructions"] == "Be brief."
    assert body["model"] == model
    assert body["max_output_tokens"] == 100
    assert [(i["role"], i["content"]) for i in body["input"]] == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "Weather?"),
    ]
    assert answer(events).text.startswith(f"Answer from {model}.")
    record = sim.requests(model)[-1]
    if api == "azure":
        assert record.path == "/openai/responses"
        assert record.query == {"api-version": "2025-04-01-preview"}
        assert record.auth_header == "api-key"
    else:
        assert record.path == "/v1/responses"
        assert record.auth_header == "authorization"


async def test_images_and_pdfs_are_input_parts_by_data_or_url(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    parts = (
        TextPart(text="Read these."),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/a.png"),
        DocumentPart(data=PDF, name="invoice.pdf"),
        DocumentPart(url="https://example.com/b.pdf"),
    )
    _, body = await send("openai", sim, client, ask(unique(), Message(role="user", content=parts)))
    content = body["input"][0]["content"]
    assert content == [
        {"type": "input_text", "text": "Read these."},
        {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "invoice.pdf",
            "file_data": f"data:application/pdf;base64,{PDF}",
        },
        {"type": "input_file", "file_url": "https://example.com/b.pdf"},
    ]


async def test_a_tool_loop_is_function_call_and_function_call_output_items(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """A tool result with an image goes as input parts: the Responses API takes them."""
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})
    result = (TextPart(text="sunny"), ImagePart(data=PNG, media_type="image/png"))
    messages = (
        Message(role="user", content="Weather in Oslo?"),
        Message(role="assistant", content="Looking.", tool_calls=(call,)),
        Message(role="tool", tool_call_id="call_1", content=result),
    )
    _, body = await send("openai", sim, client, ask(unique(), *messages, tools=(WEATHER,)))
    assert body["input"][1:] == [
        {"type": "message", "role": "assistant", "content": "Looking."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "sunny"},
                {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": WEATHER.parameters,
            "strict": False,
        }
    ]


def test_the_wire_carries_what_chat_completions_cannot() -> None:
    """Capability fit: a PDF by URL and an image in a tool result fit this wire."""
    messages = (
        Message(role="user", content=(DocumentPart(url="https://example.com/b.pdf"),)),
        Message(role="assistant", tool_calls=(ToolCall(id="c", name="get_weather"),)),
        Message(role="tool", tool_call_id="c", content=(ImagePart(url="https://e.com/a.png"),)),
    )
    turn = TurnRequest(tenant_id="t", messages=messages, tools=(WEATHER,))
    assert wire_unfit(turn, "openai-responses", "gpt-4.1") is None
    assert wire_unfit(turn, "openai", "gpt-4.1") is not None


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (NamedTool(name="get_weather"), {"type": "function", "name": "get_weather"}),
    ],
)
async def test_tool_choice_takes_the_apis_shape(
    choice: Any, sent: Any, sim: Simulator, client: httpx.AsyncClient
) -> None:
    call = ask(unique(), tools=(WEATHER,), tool_choice=choice, parallel_tool_calls=False)
    events, body = await send("openai", sim, client, call)
    assert body["tool_choice"] == sent
    assert body["parallel_tool_calls"] is False
    if choice not in ("auto", "none"):
        [called] = answer(events).tool_calls
        assert called.name == "get_weather"


async def test_a_json_schema_is_text_format_and_the_answer_follows_it(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    wanted = JsonSchemaFormat(name="place", json_schema=schema, strict=True)
    events, body = await send("openai", sim, client, ask(unique(), response_format=wanted))
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    }
    assert set(json.loads(answer(events).text)) == {"city"}
    _, body = await send("openai", sim, client, ask(unique(), response_format=JsonObjectFormat()))
    assert body["text"] == {"format": {"type": "json_object"}}


async def test_sampling_goes_to_a_model_that_does_not_reason_seed_and_stop_never(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    call = ask(unique(), temperature=0.3, top_p=0.9, seed=7, stop=("alpha",))
    events, body = await send("openai", sim, client, call)
    assert (body["temperature"], body["top_p"]) == (0.3, 0.9)
    assert "seed" not in body
    assert "stop" not in body
    # The answer is cut at the stop sequence here: the API has no `stop`.
    assert "alpha" not in answer(events).text


async def test_a_reasoning_model_gets_its_effort_and_no_sampling(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    call = ask(unique("gpt-5"), reasoning=True, reasoning_effort="low", temperature=0.3, top_p=0.5)
    events, body = await send("openai", sim, client, call)
    assert body["reasoning"] == {"effort": "low"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert "temperature" not in body
    assert "top_p" not in body
    [item] = answer(events).reasoning
    assert item.origin == "openai"
    assert item.id is not None
    assert item.id.startswith("rs_")
    assert item.encrypted
    assert item.text


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_reasoning_item_goes_back_as_it_came(
    stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = unique("o4-mini")
    sim.set_faults(model, Fault(reply_tool="get_weather", tool_args={"city": "Oslo"}, times=1))
    first_call = ask(model, tools=(WEATHER,), stream=stream, reasoning=True)
    events, _ = await send("openai", sim, client, first_call)
    first = answer(events)
    [item] = first.reasoning
    [call] = first.tool_calls
    follow = (
        Message(role="user", content="Hello?"),
        Message(role="assistant", tool_calls=first.tool_calls, reasoning=first.reasoning),
        Message(role="tool", tool_call_id=call.id, content="sunny"),
    )
    again = ask(model, *follow, tools=(WEATHER,), reasoning=True)
    events, body = await send("openai", sim, client, again)
    assert body["input"][1] == {
        "type": "reasoning",
        "id": item.id,
        "summary": [{"type": "summary_text", "text": item.text}],
        "encrypted_content": item.encrypted,
    }
    assert answer(events).text


@pytest.mark.parametrize("api", APIS)
async def test_a_model_that_does_not_reason_is_sent_no_encrypted_reasoning(
    api: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """A tool loop that a reasoning model began, on gpt-4.1: no `include`, no reasoning
    item (the API refuses both there, "Encrypted content is not supported with this
    model."), and the turn is answered."""
    model = unique("gpt-4.1")
    call_made = ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"})
    carried = Reasoning(origin="openai", id="rs_1", text="thought", encrypted="gAAAxyz")
    history = (
        Message(role="user", content="Weather?"),
        Message(role="assistant", tool_calls=(call_made,), reasoning=(carried,)),
        Message(role="tool", tool_call_id="call_1", content="sunny"),
    )
    events, body = await send(api, sim, client, ask(model, *history, tools=(WEATHER,)))
    assert "include" not in body
    assert [i["type"] for i in body["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert answer(events).text


def test_the_simulator_refuses_encrypted_reasoning_to_a_model_that_does_not_reason(
    sim: Simulator,
) -> None:
    def post(**fields: Any) -> httpx.Response:
        body = {"model": "gpt-4.1", "store": False, "input": "Hi", **fields}
        return httpx.post(f"{sim.url}/v1/responses", json=body, headers={"authorization": KEY})

    refused = post(include=["reasoning.encrypted_content"])
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["message"] == "Encrypted content is not supported with this model."
    assert error["param"] == "include"
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAx"}
    follows = {"role": "user", "content": "Again"}
    assert post(input=[item, follows]).status_code == 400
    assert post().status_code == 200


def test_a_reasoning_item_the_simulator_did_not_issue_is_refused_as_openai_does(
    sim: Simulator,
) -> None:
    def post(item: dict[str, Any]) -> httpx.Response:
        body = {
            "model": "o4-mini",
            "store": False,
            "input": [
                {"role": "user", "content": "Hi"},
                item,
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Again"},
            ],
        }
        return httpx.post(f"{sim.url}/v1/responses", json=body, headers={"authorization": KEY})

    forged = post(
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAxyzDQ=="}
    )
    assert forged.status_code == 400
    error = forged.json()["error"]
    assert error["code"] == "invalid_encrypted_content"
    assert error["message"] == "The encrypted content gAAA...DQ== could not be verified."
    unstored = post({"type": "reasoning", "id": "rs_1", "summary": []})
    assert unstored.status_code == 404
    assert "Items are not persisted when `store` is set to false" in unstored.text
    unknown = httpx.post(
        f"{sim.url}/v1/responses",
        json={"model": "gpt-4.1", "input": "Hi", "seed": 1},
        headers={"authorization": KEY},
    )
    assert unknown.json()["error"]["message"] == "Unknown parameter: 'seed'."


# --- the answer --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_usage_splits_cached_and_reasoning_tokens(
    stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = unique()
    sim.set_faults(model, Fault(cache_read_tokens=40, reasoning_tokens=30, times=1))
    events, _ = await send("openai", sim, client, ask(model, stream=stream))
    usage = answer(events).usage
    assert usage.cache_read_tokens == 40
    assert usage.reasoning_tokens == 30
    assert usage.output_tokens == 8 + 30  # the reasoning is billed as output
    assert usage.input_tokens > 0
    assert usage.cache_write_tokens == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("fault", "finish"),
    [
        (Fault(tokens=50), FinishReason.LENGTH),
        (Fault(content_filter_after_tokens=2), FinishReason.CONTENT_FILTER),
        (Fault(refusal="I can't help with that."), FinishReason.REFUSAL),
        (Fault(reply_tool="get_weather"), FinishReason.TOOL_CALLS),
        (Fault(), FinishReason.STOP),
    ],
    ids=["max_output_tokens", "content_filter", "refusal", "tool", "stop"],
)
async def test_why_the_answer_ended(
    stream: bool, fault: Fault, finish: FinishReason, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = unique()
    sim.set_faults(model, fault)
    events, _ = await send(
        "openai", sim, client, ask(model, stream=stream, max_tokens=20, tools=(WEATHER,))
    )
    done = answer(events)
    assert done.finish_reason == finish
    if finish is FinishReason.REFUSAL:
        assert done.refusal == "I can't help with that."
        assert not done.text


async def test_a_stream_yields_text_and_tool_call_deltas_then_the_whole_answer(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = unique()
    both = Fault(reply_tool="get_weather", tool_args={"city": "Oslo"}, tool_with_text=True)
    sim.set_faults(model, both)
    events, _ = await send("openai", sim, client, ask(model, stream=True, tools=(WEATHER,)))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    done = answer(events)
    assert "".join(texts) == done.text
    assert done.text.startswith("Answer from")
    assert deltas[0].name == "get_weather"
    assert json.loads("".join(d.arguments for d in deltas)) == {"city": "Oslo"}
    [call] = done.tool_calls
    assert call.arguments == {"city": "Oslo"}
    assert call.id.startswith("call_")


def test_reasoning_carries_the_items_fields() -> None:
    item = Reasoning(origin="openai", id="rs_1", text="summary", encrypted="gAAAxyz")
    assert Reasoning.model_validate_json(item.model_dump_json()) == item
