"""The Gemini wire (Gemini API and Gemini on Vertex AI) speaks the whole turn.

Each test sends a `ProviderCall` over real HTTP to the simulator, which refuses what the
API refuses (`worker/simulator/gemini_request.py`), and pins the body against the
document named in its docstring. A model id of `gemini-3…` stands for Gemini 3, one of
`gemini-2.5…` for the generation before it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.chainkit import model as model_settings
from tests.chainkit import run, settings
from tests.cloudkit import GCP_PROJECT, simulated_service_account
from tests.test_adapters import KEY_ENV, SECRET, WEATHER, adapter, collect
from worker.adapters import Completion, ProviderCall, TextDelta, build_adapter
from worker.errors import InvalidRequest
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
    Part,
    TextPart,
    Tool,
    ToolCall,
    TurnRequest,
)

PNG = "iVBORw0KGgo="  # the bytes a PNG file starts with
PDF = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"
PHOTO = "https://example.com/photo.jpg"
INVOICE = "https://example.com/invoice.pdf"
ORDER = JsonSchemaFormat(
    name="order",
    json_schema={
        "type": "object",
        "properties": {"id": {"type": "integer"}, "status": {"enum": ["open", "shipped"]}},
        "required": ["id", "status"],
    },
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("RELEVO_TEST_KEY", SECRET)


def fits(value: Any) -> bool:
    """`value` validates against the ORDER schema."""
    return bool(Draft202012Validator(ORDER.json_schema).is_valid(value))


def named(family: str) -> str:
    """A model id of `family` (`gemini-3-flash`, `gemini-2.5-pro`…) no other test uses."""
    return f"{family}-t{uuid.uuid4().hex[:8]}"


def call(model: str, *messages: Message, **fields: Any) -> ProviderCall:
    asked = messages or (Message(role="user", content="Hello?"),)
    fields.setdefault("tools", ())
    return ProviderCall(model_id=model, messages=asked, max_tokens=100, stream=False, **fields)


def user(*parts: Part) -> Message:
    return Message(role="user", content=parts)


async def sent(
    sim: Simulator, client: httpx.AsyncClient, asked: ProviderCall
) -> tuple[Mapping[str, Any], Completion]:
    """What the simulator received for `asked`, and the answer."""
    events = await collect(adapter("gemini", sim.url, client).send(asked))
    answer = events[-1]
    assert isinstance(answer, Completion)
    return sim.requests(asked.model_id)[-1].body, answer


# --- content parts ----------------------------------------------------------------------


async def test_images_and_pdfs_as_data_are_inline_data(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Part.inlineData {mimeType, data} ("Content", Gemini API reference:
    https://ai.google.dev/api/caching#Blob)."""
    message = user(
        TextPart(text="What is this?"),
        ImagePart(media_type="image/png", data=PNG),
        DocumentPart(data=PDF, name="invoice.pdf"),
    )
    body, _ = await sent(sim, client, call(named("gemini-2.5-flash"), message))
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
            ],
        }
    ]


async def test_urls_are_file_data_the_api_fetches(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Part.fileData {mimeType, fileUri} with a public https URL ("File input methods:
    External HTTP / Signed URLs", https://ai.google.dev/gemini-api/docs/file-input-methods);
    a URL without a type gets the one its path names, or none (optional on this API)."""
    message = user(
        ImagePart(media_type="image/jpeg", url=PHOTO),
        ImagePart(url="https://example.com/scan.png"),
        ImagePart(url="https://example.com/render?id=7"),
        DocumentPart(url=INVOICE),
    )
    body, _ = await sent(sim, client, call(named("gemini-2.5-flash"), message))
    assert body["contents"][0]["parts"] == [
        {"fileData": {"mimeType": "image/jpeg", "fileUri": PHOTO}},
        {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/scan.png"}},
        {"fileData": {"fileUri": "https://example.com/render?id=7"}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": INVOICE}},
    ]


@pytest.mark.parametrize(
    "image",
    [ImagePart(media_type="image/gif", data=PNG), ImagePart(url="https://example.com/a.gif")],
    ids=["data", "url"],
)
async def test_a_gif_is_refused_before_any_call(
    image: ImagePart, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Gemini takes PNG, JPEG, WEBP, HEIC and HEIF ("Image understanding: supported image
    formats", https://ai.google.dev/gemini-api/docs/image-understanding): no GIF."""
    model = named("gemini-2.5-flash")
    with pytest.raises(InvalidRequest, match="image/gif"):
        await sent(sim, client, call(model, user(TextPart(text="Hi"), image)))
    assert sim.calls(model) == 0


def tool_loop(*result: Part) -> tuple[Message, ...]:
    """A turn whose two parallel tool calls answered, the first with `result`'s parts."""
    calls = (
        ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="c2", name="get_weather", arguments={"city": "Rome"}),
    )
    return (
        Message(role="user", content="Show me the weather maps."),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", tool_call_id="c1", content=(TextPart(text="map"), *result)),
        Message(role="tool", tool_call_id="c2", content="21C"),
    )


def response(call_id: str, text: str, **extra: Any) -> dict[str, Any]:
    result = {"id": call_id, "name": "get_weather", "response": {"output": text}, **extra}
    return {"functionResponse": result}


async def test_gemini3_takes_inline_media_inside_the_function_response(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """FunctionResponse.parts with inlineData, Gemini 3 only ("Function calling:
    multimodal function responses", https://ai.google.dev/gemini-api/docs/function-calling);
    a URL has no place in a FunctionResponsePart on this API: it goes after the responses."""
    messages = tool_loop(ImagePart(media_type="image/png", data=PNG), DocumentPart(url=INVOICE))
    asked = call(named("gemini-3-flash"), *messages)
    body, _ = await sent(sim, client, ProviderCall(**{**vars_of(asked), "tools": (WEATHER,)}))
    assert body["contents"][2]["parts"] == [
        response("c1", "map", parts=[{"inlineData": {"mimeType": "image/png", "data": PNG}}]),
        response("c2", "21C"),
        {"fileData": {"mimeType": "application/pdf", "fileUri": INVOICE}},
    ]


async def test_gemini25_gets_tool_result_media_after_the_function_responses(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Gemini 2.5 refuses media in a functionResponse ("Multimodal function responses are not
    supported for this model"): the media follow the turn's responses as plain parts."""
    messages = tool_loop(ImagePart(media_type="image/png", data=PNG))
    asked = call(named("gemini-2.5-flash"), *messages)
    body, _ = await sent(sim, client, ProviderCall(**{**vars_of(asked), "tools": (WEATHER,)}))
    assert body["contents"][2]["parts"] == [
        response("c1", "map"),
        response("c2", "21C"),
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
    ]


def vars_of(asked: ProviderCall) -> dict[str, Any]:
    return {name: getattr(asked, name) for name in ProviderCall.__slots__}


# --- tools and their results -------------------------------------------------------------

# A pydantic- or OpenAI-style schema: a nullable type, `const`, `oneOf`, `$defs`.
JSON_SCHEMA_TOOL = Tool(
    name="set_unit",
    description="Set the unit",
    parameters={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "unit": {"oneOf": [{"const": "C"}, {"const": "F"}]},
            "note": {"type": ["string", "null"]},
            "place": {"$ref": "#/$defs/place"},
        },
        "$defs": {"place": {"type": "object", "properties": {"city": {"type": "string"}}}},
    },
)


@pytest.mark.parametrize("family", ["gemini-2.5-flash", "gemini-3-flash"])
async def test_a_tool_schema_is_sent_whole_as_parameters_json_schema(
    family: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """FunctionDeclaration.parametersJsonSchema takes JSON Schema; `parameters` is the
    OpenAPI subset (`Schema`), which refuses `const`, `oneOf`, `$defs` and a list of
    types, as the simulator does (googleapis/python-genai `types.FunctionDeclaration`)."""
    asked = call(named(family), tools=(JSON_SCHEMA_TOOL,))
    body, answer = await sent(sim, client, asked)
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert declaration == {
        "name": "set_unit",
        "description": "Set the unit",
        "parametersJsonSchema": JSON_SCHEMA_TOOL.parameters,
    }
    assert answer.text


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "object", "properties": {"u": {"const": "C"}}}, 'Unknown name "const"'),
        ({"type": "object", "oneOf": []}, 'Unknown name "oneOf"'),
        ({"type": ["string", "null"]}, "cannot start list"),
    ],
)
def test_the_simulator_refuses_json_schema_keywords_in_parameters(
    schema: dict[str, Any], says: str, sim: Simulator
) -> None:
    declaration = {"name": "f", "parameters": schema}
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "tools": [{"functionDeclarations": [declaration]}],
    }
    url = f"{sim.url}/v1beta/models/gemini-2.5-flash:generateContent"
    refused = httpx.post(url, json=body, headers={"x-goog-api-key": SECRET})
    assert refused.status_code == 400
    assert says in refused.json()["error"]["message"]
    both = {**declaration, "parametersJsonSchema": {"type": "object"}}
    body["tools"] = [{"functionDeclarations": [both]}]
    assert httpx.post(url, json=body, headers={"x-goog-api-key": SECRET}).status_code == 400


async def test_parallel_calls_to_one_function_carry_their_ids_there_and_back(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """FunctionCall.id goes back in the replayed call, and FunctionResponse.id names the
    call a response is for: two calls to one function are paired by id, not by order.
    The result is `response.output` (FunctionResponse.response: "Use "output" key to
    specify function output")."""
    calls = (
        ToolCall(id="fc_paris", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="fc_rome", name="get_weather", arguments={"city": "Rome"}),
    )
    messages = (
        Message(role="user", content="Weather in Paris and Rome?"),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", tool_call_id="fc_rome", content="21C"),
        Message(role="tool", tool_call_id="fc_paris", content="19C"),
    )
    asked = call(named("gemini-2.5-flash"), *messages, tools=(WEATHER,))
    body, answer = await sent(sim, client, asked)
    model_turn, results = body["contents"][1]["parts"], body["contents"][2]["parts"]
    assert [p["functionCall"]["id"] for p in model_turn] == ["fc_paris", "fc_rome"]
    assert [p["functionResponse"] for p in results] == [
        {"id": "fc_rome", "name": "get_weather", "response": {"output": "21C"}},
        {"id": "fc_paris", "name": "get_weather", "response": {"output": "19C"}},
    ]
    assert answer.text


async def test_a_function_calls_own_id_is_the_tool_calls_id(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Gemini's `functionCall.id` is read into `ToolCall.id`, and sent back as it came."""
    model = named("gemini-3-flash")
    sim.set_faults(model, Fault(reply_tool="get_weather", tool_args={"city": "Oslo"}, times=1))
    _, first = await sent(sim, client, call(model, tools=(WEATHER,)))
    [made] = first.tool_calls
    follow = (
        Message(role="user", content="Hello?"),
        Message(role="assistant", tool_calls=first.tool_calls),
        Message(role="tool", tool_call_id=made.id, content="sunny"),
    )
    body, _ = await sent(sim, client, call(model, *follow, tools=(WEATHER,)))
    assert body["contents"][1]["parts"][0]["functionCall"]["id"] == made.id
    assert body["contents"][2]["parts"][0]["functionResponse"]["id"] == made.id


# --- tool_choice --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (NamedTool(name="get_weather"), {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)
async def test_tool_choice_is_the_function_calling_mode(
    choice: Any, config: dict[str, Any], sim: Simulator, client: httpx.AsyncClient
) -> None:
    """toolConfig.functionCallingConfig {mode: AUTO|ANY|NONE, allowedFunctionNames}
    ("Function calling modes", https://ai.google.dev/gemini-api/docs/function-calling)."""
    asked = call(named("gemini-2.5-flash"), tool_choice=choice)
    body, _ = await sent(sim, client, ProviderCall(**{**vars_of(asked), "tools": (WEATHER,)}))
    assert body["toolConfig"] == {"functionCallingConfig": config}


async def test_tool_choice_without_tools_and_unset_fields_are_not_sent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """No field the caller left unset, and no parallel_tool_calls: the API has no such
    field (GenerateContentRequest, https://ai.google.dev/api/generate-content)."""
    body, _ = await sent(sim, client, call(named("gemini-2.5-flash"), tool_choice="none"))
    assert set(body) == {"contents", "generationConfig"}
    assert body["generationConfig"] == {"maxOutputTokens": 100}
    asked = call(named("gemini-2.5-flash"), parallel_tool_calls=False)
    body, _ = await sent(sim, client, ProviderCall(**{**vars_of(asked), "tools": (WEATHER,)}))
    assert "parallel" not in json.dumps(body).lower()


# --- generationConfig ---------------------------------------------------------------------


async def test_sampling_fields_are_the_generation_config(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """temperature, topP, stopSequences, seed (GenerationConfig,
    https://ai.google.dev/api/generate-content#generationconfig)."""
    asked = call(named("gemini-2.5-flash"), temperature=0.2, top_p=0.9, stop=("END",), seed=7)
    body, _ = await sent(sim, client, asked)
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.2,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": 7,
    }


@pytest.mark.parametrize(
    ("seed", "folded"), [(2**40 + 5, 5), (2**31, -(2**31)), (-(2**63), 0), (-1, -1)]
)
async def test_a_seed_wider_than_int32_is_folded_into_it(
    seed: int, folded: int, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """GenerationConfig.seed is an int32 (generative_service.proto; the simulator refuses
    a wider one as Google's parser does)."""
    body, _ = await sent(sim, client, call(named("gemini-2.5-flash"), seed=seed))
    assert body["generationConfig"]["seed"] == folded


@pytest.mark.parametrize("strict", [True, False])
async def test_a_json_schema_is_the_response_json_schema(
    strict: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """responseMimeType application/json and responseJsonSchema ("Structured output",
    https://ai.google.dev/gemini-api/docs/structured-output); Gemini has no strict flag
    and no schema name: neither is sent. The answer is JSON the schema accepts."""
    wanted = ORDER.model_copy(update={"strict": strict})
    body, answer = await sent(sim, client, call(named("gemini-2.5-flash"), response_format=wanted))
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "responseMimeType": "application/json",
        "responseJsonSchema": ORDER.json_schema,
    }
    assert fits(json.loads(answer.text))


async def test_a_json_object_is_the_json_mime_type_alone(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """JSON mode without a schema: responseMimeType only ("Structured output")."""
    asked = call(named("gemini-2.5-flash"), response_format=JsonObjectFormat())
    body, answer = await sent(sim, client, asked)
    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert "responseJsonSchema" not in body["generationConfig"]
    assert isinstance(json.loads(answer.text), dict)


@pytest.mark.parametrize("family", ["gemini-2.5-flash", "gemini-3-flash"])
async def test_a_schema_beside_tools_is_native_on_gemini3_an_instruction_before(
    family: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Gemini 2.x refuses a JSON response MIME type beside function declarations
    ("Function calling with a response mime type: 'application/json' is unsupported",
    googleapis/python-genai#867); Gemini 3 takes both ("Structured output: structured
    outputs with tools"). Before 3 the schema goes in the system instruction."""
    asked = call(named(family), response_format=ORDER)
    body, _ = await sent(sim, client, ProviderCall(**{**vars_of(asked), "tools": (WEATHER,)}))
    config = body["generationConfig"]
    if family.startswith("gemini-3"):
        assert config["responseJsonSchema"] == ORDER.json_schema
        assert "systemInstruction" not in body
    else:
        assert "responseMimeType" not in config
        assert "responseJsonSchema" not in config
        instruction = body["systemInstruction"]["parts"][0]["text"]
        assert json.dumps(ORDER.json_schema, separators=(",", ":")) in instruction


@pytest.mark.parametrize(
    ("family", "effort", "thinking"),
    [
        ("gemini-2.5-pro", "low", {"thinkingBudget": 1024}),
        ("gemini-2.5-flash", "medium", {"thinkingBudget": 8192}),
        ("gemini-2.5-flash", "high", {"thinkingBudget": 24576}),
        ("gemini-3-flash", "low", {"thinkingLevel": "LOW"}),
        ("gemini-3-flash", "medium", {"thinkingLevel": "MEDIUM"}),
        ("gemini-3.1-pro", "medium", {"thinkingLevel": "MEDIUM"}),
        ("gemini-3-pro-preview", "medium", {"thinkingLevel": "HIGH"}),
        ("gemini-3-pro-preview", "high", {"thinkingLevel": "HIGH"}),
    ],
)
async def test_reasoning_effort_is_the_thinking_config(
    family: str, effort: str, thinking: dict[str, Any], sim: Simulator, client: httpx.AsyncClient
) -> None:
    """thinkingLevel for Gemini 3 (3 Pro takes LOW and HIGH only), thinkingBudget for 2.5
    at Google's own budgets for OpenAI's efforts ("Gemini thinking",
    https://ai.google.dev/gemini-api/docs/thinking; "OpenAI compatibility: thinking",
    https://ai.google.dev/gemini-api/docs/openai)."""
    asked = call(named(family), reasoning=True, reasoning_effort=effort)
    body, _ = await sent(sim, client, asked)
    assert body["generationConfig"]["thinkingConfig"] == thinking


async def test_no_thinking_config_for_a_model_that_does_not_reason(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """`reasoning_effort` goes only to a model configured `reasoning = true`."""
    body, _ = await sent(sim, client, call(named("gemini-2.5-flash"), reasoning_effort="high"))
    assert "thinkingConfig" not in body["generationConfig"]


# --- the reply ----------------------------------------------------------------------------


async def test_a_blocked_prompt_is_the_content_filter_not_a_refusal(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """promptFeedback.blockReason is Google's safety filter; Gemini has no refusal of the
    model's own (GenerateContentResponse, https://ai.google.dev/api/generate-content)."""
    model = named("gemini-2.5-flash")
    sim.set_faults(model, Fault(content_filter_after_tokens=0, times=1))
    _, answer = await sent(sim, client, call(model))
    assert answer.finish_reason == "content_filter"
    assert answer.refusal is None


async def test_a_stream_with_parts_streams_the_json_answer(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """streamGenerateContent?alt=sse with an image part and a schema: the JSON arrives as
    text deltas and whole in the Completion ("Structured output: streaming")."""
    model = named("gemini-3-flash")
    asked = ProviderCall(
        model_id=model,
        messages=(user(TextPart(text="Read it."), ImagePart(media_type="image/png", data=PNG)),),
        tools=(),
        max_tokens=100,
        stream=True,
        response_format=ORDER,
    )
    events = await collect(adapter("gemini", sim.url, client).send(asked))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    answer = events[-1]
    assert isinstance(answer, Completion)
    assert len(deltas) > 1
    assert "".join(deltas) == answer.text
    assert fits(json.loads(answer.text))
    record = sim.requests(model)[-1]
    assert record.path.endswith(":streamGenerateContent")
    assert record.body["contents"][0]["parts"][1]["inlineData"]["mimeType"] == "image/png"


# --- the chain ------------------------------------------------------------------------------


def json_turn(
    *, stream: bool = False, wanted: JsonSchemaFormat | JsonObjectFormat = ORDER
) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme",
        messages=(Message(role="user", content="Where is order 7?"),),
        response_format=wanted,
        stream=stream,
    )


def gemini_chain(url: str, first: str, second: str) -> Any:
    structured: dict[str, Any] = {"structured_output": True, "inputs": ["text", "image", "pdf"]}
    return settings(
        url,
        ("google/first", "google/second"),
        models={
            "google/first": model_settings("google", ("gg", first), **structured),
            "google/second": model_settings("google", ("gg", second), **structured),
        },
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_structured_answer_is_parsed_in_the_reply(stream: bool, sim: Simulator) -> None:
    """The answer to a response_format turn is read against its schema: `reply.parsed`."""
    first, second = named("gemini-3-flash"), named("gemini-2.5-flash")
    result = await run(gemini_chain(sim.url, first, second), json_turn(stream=stream))
    assert result.reply is not None
    assert fits(result.reply.parsed)
    assert sim.calls(second) == 0


@pytest.mark.parametrize("wanted", [ORDER, JsonObjectFormat()], ids=["schema", "object"])
async def test_an_answer_off_the_schema_moves_the_turn_to_the_next_model(
    wanted: JsonSchemaFormat | JsonObjectFormat, sim: Simulator
) -> None:
    """OutputInvalid (the JSON does not match the schema, or is no object in JSON mode)
    falls back; the backup's valid answer is the reply."""
    first, second = named("gemini-3-flash"), named("gemini-2.5-flash")
    sim.set_faults(first, Fault(invalid_output=True))
    result = await run(gemini_chain(sim.url, first, second), json_turn(wanted=wanted))
    assert [a.error_class for a in result.attempts] == ["output_invalid", None]
    assert result.reply is not None
    assert isinstance(result.reply.parsed, dict)
    assert wanted is not ORDER or fits(result.reply.parsed)


# --- Gemini on Vertex AI ----------------------------------------------------------------------


@pytest.fixture
def vertex_credentials(sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = simulated_service_account(f"{sim.url}/token", tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))


def vertex(url: str) -> ProviderSettings:
    return ProviderSettings(kind="vertex", region="us-east5", project=GCP_PROJECT, base_url=url)


@pytest.mark.usefixtures("vertex_credentials")
async def test_vertex_gets_the_same_parts_and_config(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Gemini on Vertex takes the same Content and GenerationConfig, fileData with its
    required mimeType ("Gemini API in Vertex AI: inference reference",
    https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/inference)."""
    model = named("gemini-2.5-pro")
    message = user(TextPart(text="Compare."), ImagePart(url=PHOTO), DocumentPart(data=PDF))
    asked = call(model, message, response_format=ORDER, reasoning=True, reasoning_effort="low")
    await collect(build_adapter(vertex(sim.url), client).send(asked))
    body = sim.requests(model)[-1].body
    assert body["contents"][0]["parts"][1:] == [
        {"fileData": {"mimeType": "image/jpeg", "fileUri": PHOTO}},
        {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
    ]
    assert body["generationConfig"]["responseJsonSchema"] == ORDER.json_schema
    assert body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 1024}


@pytest.mark.usefixtures("vertex_credentials")
async def test_vertex_takes_a_tool_schema_as_parameters_json_schema(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Vertex's FunctionDeclaration has `parametersJsonSchema` too, and the same `Schema`
    subset in `parameters`."""
    model = named("gemini-2.5-pro")
    await collect(
        build_adapter(vertex(sim.url), client).send(call(model, tools=(JSON_SCHEMA_TOOL,)))
    )
    [declaration] = sim.requests(model)[-1].body["tools"][0]["functionDeclarations"]
    assert declaration["parametersJsonSchema"] == JSON_SCHEMA_TOOL.parameters
    assert sim.calls(model, "ok") == 1


@pytest.mark.usefixtures("vertex_credentials")
async def test_vertex_refuses_an_image_url_of_no_known_type_before_any_call(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Vertex's fileData needs a mimeType ("When specifying a fileURI, you must also
    specify the media type"): an image URL that names none cannot be sent."""
    model = named("gemini-2.5-pro")
    message = user(TextPart(text="What is it?"), ImagePart(url="https://example.com/render"))
    with pytest.raises(InvalidRequest, match="media_type"):
        await collect(build_adapter(vertex(sim.url), client).send(call(model, message)))
    assert sim.calls(model) == 0


# --- what each API carries ------------------------------------------------------------------


def test_each_api_carries_what_its_documents_allow() -> None:
    """The rows of worker/adapters/wire_limits.py: URLs and tool-result media on both; a
    30 MB PDF on both, a 6 MB image and 901 images on the Gemini API (75 MB, 3,600), not
    on Vertex (7 MB of base64, 900)."""
    pdf = DocumentPart(data="A" * (30 * 1024 * 1024 * 4 // 3))
    image = ImagePart(media_type="image/png", data="A" * (6 * 1024 * 1024 * 4 // 3))
    images = [ImagePart(media_type="image/png", data=PNG) for _ in range(900)]
    carried = (
        Message(role="user", content=(TextPart(text="Compare."), ImagePart(url=PHOTO), pdf)),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="get_weather"),)),
        Message(role="tool", tool_call_id="c1", content=(DocumentPart(url=INVOICE),)),
    )
    heavy = (user(TextPart(text="What?"), image, *images),)
    too_much = "an image over 5505024 bytes, 901 images (at most 900)"
    for messages, on_vertex in ((carried, None), (heavy, too_much)):
        turn = TurnRequest(tenant_id="acme", messages=messages, tools=(WEATHER,))
        assert wire_unfit(turn, "gemini", "gemini-2.5-pro") is None
        unfit = wire_unfit(turn, "vertex", "gemini-2.5-pro")
        assert (unfit and unfit.detail) == (
            on_vertex and f"its vertex API cannot carry {on_vertex}"
        )
