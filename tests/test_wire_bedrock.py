"""The whole turn on Bedrock Converse, over real loopback HTTP to the simulator.

Each test names, in a comment, the page of the Bedrock Runtime API reference (or of the
user guide, or Anthropic's) whose shape it pins. The simulator refuses what that page
says Converse refuses (`worker.simulator.bedrock_request`), so a request the simulator
answers is one the API documents as valid.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cloudkit import use_simulated_aws
from worker.adapters import BedrockAdapter, Completion, ProviderCall, TextDelta, make_client
from worker.adapters.base import Event
from worker.adapters.classify import classify_response
from worker.adapters.claude_options import EFFORT_BUDGET_TOKENS
from worker.adapters.claude_schema import claude_schema
from worker.adapters.finish import normalize_finish
from worker.adapters.left_out import left_out
from worker.adapters.sigv4 import SigV4
from worker.errors import InvalidRequest
from worker.settings import ProviderSettings, load_settings
from worker.simulator import Fault, Simulator
from worker.turn.capability import wire_unfit
from worker.turn.chain import Chain
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
    ToolCall,
    TurnRequest,
)

REGION = "eu-west-3"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()
PDF = base64.b64encode(b"%PDF-1.7\n" + bytes(24)).decode()
WEATHER = Tool(
    name="get_weather",
    description="Current weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
INVOICE = JsonSchemaFormat.model_validate(
    {
        "name": "invoice",
        "schema": {
            "type": "object",
            "properties": {
                "number": {"type": "string"},
                "total": {"type": "number", "minimum": 0},
                "paid": {"type": "boolean"},
                "lines": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
            "required": ["number", "total", "lines"],
            "additionalProperties": False,
        },
    }
)


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_simulated_aws(monkeypatch, tmp_path)


@pytest.fixture
async def bedrock(sim: Simulator) -> AsyncIterator[BedrockAdapter]:
    """The adapter for the simulator's region, on an HTTP client of its own."""
    settings = ProviderSettings(kind="bedrock", region=REGION, base_url=base_url(sim))
    async with make_client(max_connections=20) as http:
        yield BedrockAdapter(settings, http)


@pytest.fixture
def model() -> str:
    """A Claude-shaped model id of this test's own (no version in it: a current Claude
    that still takes a thinking budget)."""
    return f"anthropic.claude-wire-x{uuid.uuid4().hex[:8]}-v1:0"


def base_url(sim: Simulator) -> str:
    return f"{sim.url}/bedrock-runtime/{REGION}"


def ask(model: str, *messages: Message, **fields: Any) -> ProviderCall:
    chosen = messages or (Message(role="user", content="Hello?"),)
    fields.setdefault("max_tokens", 100)
    fields.setdefault("stream", False)
    fields.setdefault("tools", ())
    return ProviderCall(model, chosen, **fields)


async def answer(adapter: BedrockAdapter, call: ProviderCall) -> tuple[list[Event], Completion]:
    events = [e async for e in adapter.send(call)]
    done = events.pop()
    assert isinstance(done, Completion)
    return events, done


def sent(sim: Simulator, model: str) -> dict[str, Any]:
    """The body of `model`'s last request, which the simulator answered."""
    record = sim.requests(model)[-1]
    assert record.status == 200, record.status
    return dict(record.body)


def user(*parts: TextPart | ImagePart | DocumentPart) -> Message:
    return Message(role="user", content=parts)


def image(media_type: str = "image/png") -> ImagePart:
    return ImagePart.model_validate({"media_type": media_type, "data": PNG})


def pdf(name: str | None = None) -> DocumentPart:
    return DocumentPart(data=PDF, name=name)


# --- content blocks -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/gif", "image/webp"])
async def test_an_image_goes_as_base64_bytes_with_its_format(
    sim: Simulator, bedrock: BedrockAdapter, model: str, media_type: str, stream: bool
) -> None:
    """ImageBlock: `format` png | jpeg | gif | webp, `source.bytes` (base64 in JSON)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ImageBlock.html
    call = ask(model, user(TextPart(text="What is this?"), image(media_type)), stream=stream)
    deltas, done = await answer(bedrock, call)
    assert done.text.startswith(f"Answer from {model}.")
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == (
        done.text if stream else ""
    )
    content = sent(sim, model)["messages"][0]["content"]
    assert content == [
        {"text": "What is this?"},
        {"image": {"format": media_type.removeprefix("image/"), "source": {"bytes": PNG}}},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_a_pdf_goes_as_a_document_whose_name_converse_accepts(
    sim: Simulator, bedrock: BedrockAdapter, model: str, stream: bool
) -> None:
    """DocumentBlock: `format` pdf, `name` (alphanumerics, single spaces, hyphens,
    parentheses, square brackets; its extension and other characters become spaces)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_DocumentBlock.html
    call = ask(model, user(TextPart(text="Total?"), pdf("Q3_report.v2.pdf")), stream=stream)
    _, done = await answer(bedrock, call)
    assert done.text.startswith("Answer from")
    document = sent(sim, model)["messages"][0]["content"][1]["document"]
    assert document == {"format": "pdf", "name": "Q3 report v2", "source": {"bytes": PDF}}


async def test_document_names_are_made_valid_and_unique_in_the_request(
    sim: Simulator, bedrock: BedrockAdapter, model: str
) -> None:
    """DocumentBlock.name, and Converse's "Messages can't contain duplicate document names"
    (across the whole conversation, which is resent each turn)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_DocumentBlock.html
    first = user(TextPart(text="Read these."), pdf("invoice.pdf"), pdf("invoice.pdf"), pdf())
    reply = Message(role="assistant", content="Done.")
    second = user(TextPart(text="And these?"), pdf("日本語.pdf"), pdf("a  b__c [1].pdf"))
    await answer(bedrock, ask(model, first, reply, second))
    messages = sent(sim, model)["messages"]
    names = [
        block["document"]["name"]
        for message in messages
        for block in message["content"]
        if "document" in block
    ]
    assert names == ["invoice", "invoice (2)", "document", "document (2)", "a b c [1]"]


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_attachments_go_inside_a_tool_result_and_the_next_user_text_joins_it(
    sim: Simulator, bedrock: BedrockAdapter, model: str, stream: bool
) -> None:
    """ToolResultContentBlock takes text, image and document blocks; Message: the roles
    alternate, so tool results and the user text after them are one user message."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolResultContentBlock.html
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Message.html
    call = ToolCall(id="tooluse_1", name="get_weather", arguments={"city": "Lyon"})
    history = (
        Message(role="user", content="Weather in Lyon?"),
        Message(role="assistant", tool_calls=(call,)),
        Message(
            role="tool",
            tool_call_id="tooluse_1",
            content=(TextPart(text="Radar attached."), image(), pdf("radar.pdf")),
        ),
        Message(role="user", content="Summarize it."),
    )
    _, done = await answer(bedrock, ask(model, *history, tools=(WEATHER,), stream=stream))
    assert done.text.startswith("Answer from")
    messages = sent(sim, model)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {
            "toolResult": {
                "toolUseId": "tooluse_1",
                "content": [
                    {"text": "Radar attached."},
                    {"image": {"format": "png", "source": {"bytes": PNG}}},
                    {"document": {"format": "pdf", "name": "radar", "source": {"bytes": PDF}}},
                ],
            }
        },
        {"text": "Summarize it."},
    ]


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (user(pdf("alone.pdf")), "text beside a document"),
        (user(TextPart(text="See"), ImagePart(url="https://example.com/a.png")), "not by URL"),
        (user(TextPart(text="See"), DocumentPart(url="https://example.com/a.pdf")), "not by URL"),
    ],
    ids=["document-alone", "image-url", "document-url"],
)
async def test_what_converse_cannot_carry_is_refused_before_any_call(
    sim: Simulator, bedrock: BedrockAdapter, model: str, message: Message, why: str
) -> None:
    """Message.content: "If you include a ContentBlock with a document field in the array,
    you must also include a ContentBlock with a text field"; ImageSource and
    DocumentSource have bytes (or S3), no URL. Never dropped: refused, uncalled."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Message.html
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ImageSource.html
    with pytest.raises(InvalidRequest, match=why):
        await answer(bedrock, ask(model, message))
    assert sim.calls(model) == 0


def test_the_wire_limits_row_skips_what_converse_cannot_carry() -> None:
    """Message.content: up to 20 images of 3.75 MB, up to 5 documents of 4.5 MB; no URL."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Message.html
    big = base64.b64encode(bytes(3_750_001)).decode()
    cases = {
        "an image by URL": [ImagePart(url="https://example.com/a.png")],
        "an image over 3750000 bytes": [
            ImagePart.model_validate({"media_type": "image/png", "data": big})
        ],
        "21 images (at most 20)": [image() for _ in range(21)],
        "6 documents (at most 5)": [pdf() for _ in range(6)],
    }
    for problem, parts in cases.items():
        request = TurnRequest(tenant_id="acme", messages=(user(TextPart(text="?"), *parts),))
        unfit = wire_unfit(request, "bedrock", "m")
        assert unfit is not None
        assert problem in unfit.detail
    fits = TurnRequest(
        tenant_id="acme", messages=(user(TextPart(text="?"), *[image()] * 20, *[pdf()] * 5),)
    )
    assert wire_unfit(fits, "bedrock", "m") is None


# --- tools --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "wire", "called"),
    [
        (None, None, None),
        ("auto", {"auto": {}}, None),
        ("required", {"any": {}}, "get_weather"),
        (NamedTool(name="get_time"), {"tool": {"name": "get_time"}}, "get_time"),
    ],
    ids=["unset", "auto", "required", "named"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_tool_choice_in_converse_shape(
    sim: Simulator,
    bedrock: BedrockAdapter,
    model: str,
    *,
    choice: Any,
    wire: dict[str, Any] | None,
    called: str | None,
    stream: bool,
) -> None:
    """ToolChoice is a union: {auto: {}}, {any: {}} (at least one tool), {tool: {name}};
    the simulated model calls the tool a forced choice names (for `any`, the first)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolChoice.html
    clock = Tool(name="get_time", description="The time", parameters={"type": "object"})
    call = ask(model, tools=(WEATHER, clock), tool_choice=choice, stream=stream)
    _, done = await answer(bedrock, call)
    config = sent(sim, model)["toolConfig"]
    assert config.get("toolChoice") == wire
    assert [c.name for c in done.tool_calls] == ([called] if called else [])


async def test_tool_choice_none_is_refused_not_dropped(
    sim: Simulator, bedrock: BedrockAdapter, model: str
) -> None:
    """ToolChoice has no "none"; sending the turn without its tools would change it."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolChoice.html
    with pytest.raises(InvalidRequest, match="no tool_choice 'none'"):
        await answer(bedrock, ask(model, tools=(WEATHER,), tool_choice="none"))
    assert sim.calls(model) == 0
    # Without tools there is nothing to call: the request goes, with no toolConfig.
    await answer(bedrock, ask(model, tool_choice="none"))
    assert "toolConfig" not in sent(sim, model)


# --- inference configuration and thinking -------------------------------------------------


async def test_sampling_goes_in_inference_config_and_seed_nowhere(
    sim: Simulator, bedrock: BedrockAdapter, model: str
) -> None:
    """InferenceConfiguration: maxTokens, temperature, topP, stopSequences. Converse has
    no seed and no parallel tool calls switch: neither is sent (the simulator refuses
    any member ConverseRequest does not have)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InferenceConfiguration.html
    call = ask(
        model,
        tools=(WEATHER,),
        temperature=0.3,
        top_p=0.9,
        stop=("END", "STOP"),
        seed=7,
        parallel_tool_calls=False,
    )
    await answer(bedrock, call)
    body = sent(sim, model)
    assert body["inferenceConfig"] == {
        "maxTokens": 100,
        "temperature": 0.3,
        "topP": 0.9,
        "stopSequences": ["END", "STOP"],
    }
    assert "seed" not in json.dumps(body)
    assert "parallel" not in json.dumps(body)
    # Unset, none of them is sent: the model's defaults stay.
    await answer(bedrock, ask(model))
    assert sent(sim, model)["inferenceConfig"] == {"maxTokens": 100}


async def test_a_temperature_above_one_is_refused_before_any_call(
    sim: Simulator, bedrock: BedrockAdapter, model: str
) -> None:
    """InferenceConfiguration.temperature: "Valid Range: Minimum value of 0. Maximum value
    of 1." (a turn may ask for up to 2)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InferenceConfiguration.html
    with pytest.raises(InvalidRequest, match="temperature from 0 to 1"):
        await answer(bedrock, ask(model, temperature=1.5))
    assert sim.calls(model) == 0


@pytest.mark.parametrize(
    ("effort", "max_tokens", "budget"),
    [("low", 8000, 1024), ("medium", 10000, 4096), ("high", 40000, 16384), ("high", 3000, 1500)],
)
async def test_reasoning_effort_is_claudes_thinking_budget_and_sampling_stays_out(
    sim: Simulator,
    bedrock: BedrockAdapter,
    model: str,
    *,
    effort: str,
    max_tokens: int,
    budget: int,
) -> None:
    """Claude's `thinking` goes through ConverseRequest.additionalModelRequestFields; while
    it thinks Claude refuses temperature and top_p (the simulator refuses them too)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
    # https://docs.claude.com/en/docs/build-with-claude/extended-thinking
    call = ask(
        model,
        max_tokens=max_tokens,
        reasoning=True,
        reasoning_effort=effort,
        temperature=0.2,
        top_p=0.5,
        stop=("END",),
    )
    await answer(bedrock, call)
    body = sent(sim, model)
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": budget}
    }
    assert body["inferenceConfig"] == {"maxTokens": max_tokens, "stopSequences": ["END"]}
    assert budget == min(EFFORT_BUDGET_TOKENS[effort], max_tokens // 2)


async def test_an_effort_goes_only_to_a_reasoning_claude_with_room_to_think(
    bedrock: BedrockAdapter,
) -> None:
    """The contract: `reasoning_effort` only to a model whose `reasoning` is set; Claude's
    budget is at least 1024 and below maxTokens; another family's thinking field is its own
    (Converse has no common one), so nothing is sent to it."""
    # https://docs.claude.com/en/docs/build-with-claude/extended-thinking
    call = ask(
        "us.anthropic.claude-x-v1:0", reasoning=True, reasoning_effort="low", max_tokens=8000
    )
    assert "additionalModelRequestFields" in bedrock.request(call).body
    for other in (
        dataclasses.replace(call, reasoning=False),
        dataclasses.replace(call, max_tokens=1024),
        dataclasses.replace(call, model_id="amazon.nova-pro-v1:0"),
    ):
        assert "additionalModelRequestFields" not in bedrock.request(other).body
    # A configured budget still applies when the turn gives no effort.
    configured = dataclasses.replace(call, reasoning_effort=None, thinking_budget_tokens=2000)
    fields = bedrock.request(configured).body["additionalModelRequestFields"]
    assert fields == {"thinking": {"type": "enabled", "budget_tokens": 2000}}


@pytest.mark.parametrize("effort", ["low", "high"])
async def test_an_adaptive_only_claude_thinks_adaptively_with_its_effort_and_no_sampling(
    sim: Simulator, bedrock: BedrockAdapter, effort: str
) -> None:
    """Claude Opus 4.7 and later take only adaptive thinking, and refuse a thinking budget,
    temperature and top_p (the simulated Converse refuses them for such a model, as
    Anthropic's API does): `thinking: {type: adaptive}` and OutputConfig.effort, as the
    same model gets `output_config.effort` on Anthropic and on Vertex AI."""
    # https://platform.claude.com/docs/en/about-claude/models/migration-guide
    model = f"us.anthropic.claude-opus-4-7-{uuid.uuid4().hex[:6]}"
    call = ask(
        model,
        max_tokens=8000,
        reasoning=True,
        reasoning_effort=effort,
        temperature=0.2,
        top_p=0.5,
    )
    _, done = await answer(bedrock, call)
    body = sent(sim, model)
    assert body["additionalModelRequestFields"] == {"thinking": {"type": "adaptive"}}
    assert body["outputConfig"] == {"effort": effort}
    assert body["inferenceConfig"] == {"maxTokens": 8000}
    assert done.text
    # No effort asked: no thinking, and still no sampling.
    await answer(bedrock, ask(model, temperature=0.2))
    body = sent(sim, model)
    assert "additionalModelRequestFields" not in body
    assert body["inferenceConfig"] == {"maxTokens": 100}
    assert left_out("bedrock", ask(model, temperature=0.2)) == ("temperature",)


async def test_the_simulated_converse_refuses_a_budget_and_sampling_to_an_adaptive_only_claude(
    sim: Simulator,
) -> None:
    model = "us.anthropic.claude-opus-4-7"
    url = f"{base_url(sim)}/model/{model}/converse"
    user = [{"role": "user", "content": [{"text": "Hi"}]}]
    budget = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    refused = [
        {"messages": user, "additionalModelRequestFields": budget},
        {"messages": user, "inferenceConfig": {"temperature": 0.5}},
        {"messages": user, "inferenceConfig": {"topP": 0.5}},
    ]
    async with httpx.AsyncClient() as http:
        for body in refused:
            response = await http.post(url, json=body, auth=SigV4(service="bedrock", region=REGION))
            assert response.status_code == 400, body
            assert "for this model" in response.json()["message"]
        adaptive = {"thinking": {"type": "adaptive"}}
        body = {"messages": user, "additionalModelRequestFields": adaptive}
        response = await http.post(url, json=body, auth=SigV4(service="bedrock", region=REGION))
    assert response.status_code == 200


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "required"},
        {"tool_choice": NamedTool(name="get_weather")},
        {"response_format": JsonObjectFormat()},
    ],
    ids=["required", "named", "json-object"],
)
async def test_a_forced_tool_goes_without_thinking_which_claude_refuses_with_it(
    sim: Simulator, bedrock: BedrockAdapter, model: str, fields: dict[str, Any]
) -> None:
    """Anthropic: thinking is not compatible with forced tool use (tool_choice any or tool);
    the forced tool is the turn's instruction, so the call goes without thinking, and
    with its sampling."""
    # https://docs.claude.com/en/docs/build-with-claude/extended-thinking
    call = ask(
        model,
        tools=(WEATHER,),
        max_tokens=8000,
        thinking_budget_tokens=2000,
        temperature=0.2,
        **fields,
    )
    await answer(bedrock, call)
    body = sent(sim, model)
    assert "additionalModelRequestFields" not in body
    assert body["inferenceConfig"]["temperature"] == 0.2


# --- structured output --------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_a_json_schema_goes_as_output_config_and_the_answer_is_its_json(
    sim: Simulator, bedrock: BedrockAdapter, model: str, *, strict: bool, stream: bool
) -> None:
    """OutputConfig.textFormat: {type: json_schema, structure: {jsonSchema: {schema (a JSON
    string), name}}}; Bedrock always enforces it, so `strict` has no field of its own."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_OutputConfig.html
    # https://docs.aws.amazon.com/bedrock/latest/userguide/structured-output.html
    wanted = INVOICE.model_copy(update={"strict": strict})
    deltas, done = await answer(bedrock, ask(model, response_format=wanted, stream=stream))
    text_format = sent(sim, model)["outputConfig"]["textFormat"]
    assert text_format["type"] == "json_schema"
    definition = text_format["structure"]["jsonSchema"]
    # Claude's subset: the caller's schema fitted as on Anthropic's own API.
    assert (definition["name"], json.loads(definition["schema"])) == (
        "invoice",
        claude_schema(INVOICE.json_schema),
    )
    assert json.loads(done.text) == {"number": "x", "total": 0, "lines": ["x"]}
    if stream:
        assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == done.text
        assert len(deltas) > 1


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_a_json_object_is_a_forced_answer_tool_whose_input_is_the_text(
    sim: Simulator, bedrock: BedrockAdapter, model: str, stream: bool
) -> None:
    """Converse's textFormat wants a schema (every object closed), so a bare JSON object is
    asked for as the documented alternative, a forced tool (ToolChoice `any`): its input
    is the answer, returned as text, not as a tool call."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolChoice.html
    # https://docs.aws.amazon.com/bedrock/latest/userguide/structured-output.html
    call = ask(model, response_format=JsonObjectFormat(), stream=stream)
    deltas, done = await answer(bedrock, call)
    config = sent(sim, model)["toolConfig"]
    assert config["toolChoice"] == {"any": {}}
    assert config["tools"][-1]["toolSpec"]["name"] == "json_answer"
    assert (json.loads(done.text), done.tool_calls, done.finish_reason) == ({}, (), "stop")
    streamed = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert streamed == (done.text if stream else "")


async def test_the_answer_tool_never_takes_a_turn_tools_name(
    sim: Simulator, bedrock: BedrockAdapter, model: str
) -> None:
    """ToolSpecification names are the caller's; the answer tool takes a free one."""
    taken = Tool(name="json_answer", description="The caller's own", parameters={"type": "object"})
    call = ask(model, tools=(taken,), response_format=JsonObjectFormat(), tool_choice="auto")
    await answer(bedrock, call)
    names = [t["toolSpec"]["name"] for t in sent(sim, model)["toolConfig"]["tools"]]
    assert names == ["json_answer", "json_answer_2"]


def _two_models(sim: Simulator, first: str, second: str) -> Any:
    entry = {
        "vendor": "anthropic",
        "context_window": 100_000,
        "structured_output": True,
        "inputs": ["text", "pdf"],
    }
    return load_settings(
        data={
            "chain": {"models": ["anthropic/first", "anthropic/second"]},
            "providers": {"aws": {"kind": "bedrock", "region": REGION, "base_url": base_url(sim)}},
            "models": {
                "anthropic/first": {**entry, "serve": [{"provider": "aws", "model_id": first}]},
                "anthropic/second": {**entry, "serve": [{"provider": "aws", "model_id": second}]},
            },
        }
    )


async def test_a_structured_turn_is_parsed_and_an_answer_off_its_schema_moves_on(
    sim: Simulator, model: str
) -> None:
    """End to end: the first model answers JSON its schema refuses (output_invalid, the
    next model), the second a valid answer, which the reply carries parsed."""
    # https://docs.aws.amazon.com/bedrock/latest/userguide/structured-output.html
    backup = f"{model}-backup"
    sim.set_faults(model, Fault(invalid_output=True))
    request = TurnRequest(
        tenant_id="acme",
        messages=(user(TextPart(text="Read the invoice."), pdf("invoice.pdf")),),
        response_format=INVOICE,
    )
    async with make_client() as http:
        result = await Chain.from_settings(_two_models(sim, model, backup), http).run(request)
    assert (result.status, result.step) == (Status.OK, 1)
    assert [a.error_class for a in result.attempts] == ["output_invalid", None]
    assert result.reply is not None
    assert result.reply.parsed == {"number": "x", "total": 0, "lines": ["x"]}
    assert sim.calls(model, "ok") == sim.calls(backup, "ok") == 1


async def test_a_streamed_answer_off_its_schema_fails_locked_to_its_model(
    sim: Simulator, model: str
) -> None:
    """Streamed, the invalid answer was already shown: the turn is locked to that model
    and fails (output_invalid) instead of moving on; a valid stream is parsed."""
    # https://docs.aws.amazon.com/bedrock/latest/userguide/structured-output.html
    backup = f"{model}-backup"
    request = TurnRequest(
        tenant_id="acme",
        messages=(Message(role="user", content="Read the invoice."),),
        response_format=INVOICE,
        stream=True,
    )
    config = _two_models(sim, model, backup)
    async with make_client() as http:
        valid = await Chain.from_settings(config, http).run(request)
        sim.set_faults(model, Fault(invalid_output=True))
        invalid = await Chain.from_settings(config, http).run(request)
    assert valid.reply is not None
    assert valid.reply.parsed == {"number": "x", "total": 0, "lines": ["x"]}
    assert (invalid.status, invalid.reason) == (Status.FAILED, "output_invalid")
    assert sim.calls(backup) == 0


# --- the reply ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_a_filtered_answer_is_content_filter_and_converse_has_no_refusal(
    sim: Simulator, bedrock: BedrockAdapter, model: str, stream: bool
) -> None:
    """StopReason: content_filtered and guardrail_intervened are the provider's filter;
    Converse has no stop reason of its own for a model's refusal."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_ResponseSyntax
    sim.set_faults(model, Fault(content_filter_after_tokens=2))
    _, done = await answer(bedrock, ask(model, stream=stream))
    assert (done.finish_reason, done.refusal) == ("content_filter", None)
    assert done.text == "Answer from"
    assert normalize_finish("bedrock", "guardrail_intervened") == "content_filter"


# --- what the simulator refuses, as Converse does -----------------------------------------


def _body(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"text": "Hi"}]}], **extra}


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(blocks)}]}


_IMAGE = {"image": {"format": "png", "source": {"bytes": PNG}}}
_TOOLS = {
    "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}]
}
_THINK = {"additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}}


def _document(name: str) -> dict[str, Any]:
    return {"document": {"format": "pdf", "name": name, "source": {"bytes": PDF}}}


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    # ConverseRequest and InferenceConfiguration have no seed.
    "seed": (_body(seed=7), 'Unknown parameter in input: "seed"'),
    "inference-seed": (_body(inferenceConfig={"maxTokens": 9, "seed": 7}), '"seed"'),
    # ToolChoice: auto | any | tool.
    "tool-choice-none": (_body(toolConfig={**_TOOLS, "toolChoice": {"none": {}}}), '"none"'),
    "tool-choice-unknown-tool": (
        _body(toolConfig={**_TOOLS, "toolChoice": {"tool": {"name": "nope"}}}),
        "not one of the tools",
    ),
    # ImageBlock.format: png | jpeg | gif | webp; ImageSource is a union; bytes, base64.
    "image-format": (
        _user({"text": "?"}, {"image": {"format": "bmp", "source": {"bytes": PNG}}}),
        "enum value set: [png, jpeg, gif, webp]",
    ),
    "image-two-sources": (
        _user(
            {
                "image": {
                    "format": "png",
                    "source": {"bytes": PNG, "s3Location": {"uri": "s3://b/k"}},
                }
            }
        ),
        "tagged union",
    ),
    "image-not-base64": (
        _user({"image": {"format": "png", "source": {"bytes": "not base64!"}}}),
        "base64",
    ),
    "image-from-assistant": (
        {
            "messages": [
                {"role": "user", "content": [{"text": "Hi"}]},
                {"role": "assistant", "content": [_IMAGE]},
                {"role": "user", "content": [{"text": "?"}]},
            ]
        },
        "only include images and documents if the role is user",
    ),
    # DocumentBlock.name, and a text block beside a document.
    "document-name": (_user({"text": "?"}, _document("invoice.pdf")), "document file name"),
    "document-names-twice": (
        _user({"text": "?"}, _document("a"), _document("a")),
        "duplicate document names",
    ),
    "document-alone": (_user(_document("a")), "must also include a text"),
    # InferenceConfiguration ranges.
    "temperature": (
        _body(inferenceConfig={"temperature": 1.5}),
        "at 'inferenceConfig.temperature' failed to satisfy constraint",
    ),
    # ContentBlock.text: never blank.
    "blank-text": (_user({"text": " "}), "messages.0.content.0 is blank"),
    # Message: alternating roles, starting with the user.
    "two-user-messages": (
        {"messages": [{"role": "user", "content": [{"text": "a"}]}] * 2},
        "must alternate",
    ),
    "tool-use-without-tool-config": (
        {
            "messages": [
                {"role": "user", "content": [{"text": "Hi"}]},
                {
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "t", "name": "x", "input": {}}}],
                },
                {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": []}}]},
            ]
        },
        "toolConfig field must be defined",
    ),
    # Claude while thinking: temperature 1 or unset, no forced tool.
    "thinking-temperature": (
        _body(inferenceConfig={"maxTokens": 4000, "temperature": 0.5}, **_THINK),
        "`temperature` may only be set to 1 when thinking is enabled",
    ),
    "thinking-forced-tool": (
        _body(
            inferenceConfig={"maxTokens": 4000},
            toolConfig={**_TOOLS, "toolChoice": {"any": {}}},
            **_THINK,
        ),
        "Thinking may not be enabled when tool_choice forces tool use",
    ),
    # JsonSchemaDefinition.schema is a JSON string.
    "output-schema-not-json": (
        _body(
            outputConfig={
                "textFormat": {"type": "json_schema", "structure": {"jsonSchema": {"schema": "{"}}}
            }
        ),
        "JSON schema",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_the_simulator_refuses_what_converse_refuses(
    sim: Simulator, model: str, case: str
) -> None:
    """Each refusal: 400, `x-amzn-ErrorType: ValidationException`, `{"message": ...}`, which
    the adapter reads as InvalidRequest (no fallback: a backup would get the same)."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html
    body, says = REFUSED[case]
    url = f"{base_url(sim)}/model/{model}/converse"
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json=body, auth=SigV4(service="bedrock", region=REGION))
    assert response.status_code == 400
    assert response.headers["x-amzn-ErrorType"].startswith("ValidationException")
    assert says in response.json()["message"]
    error = classify_response("bedrock", 400, response.headers, response.content)
    assert type(error) is InvalidRequest
    assert sim.calls(model, "ok") == 0
