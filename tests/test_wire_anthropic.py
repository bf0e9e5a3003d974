"""Every turn field on the Anthropic Messages wire, and on Claude's rawPredict on Vertex AI.

Each test sends a `ProviderCall` over real HTTP to the simulator, which refuses what the
real API refuses (`worker.simulator.anthropic_request`), and names the document that
fixes the shape it checks. The references:

- Messages API: platform.claude.com/docs/en/api/messages (the Python SDK's
  `MessageCreateParams` and block types, anthropics/anthropic-sdk-python)
- Vision: platform.claude.com/docs/en/build-with-claude/vision
- PDF support: platform.claude.com/docs/en/build-with-claude/pdf-support
- Tool use: platform.claude.com/docs/en/agents-and-tools/tool-use/implement-tool-use
- Extended thinking: platform.claude.com/docs/en/build-with-claude/extended-thinking
- Adaptive thinking, Effort: platform.claude.com/docs/en/build-with-claude/adaptive-thinking,
  .../effort; the migration guide: platform.claude.com/docs/en/about-claude/models/
  migration-guide
- Structured outputs: platform.claude.com/docs/en/build-with-claude/structured-outputs
- Claude on Vertex AI: platform.claude.com/docs/en/build-with-claude/claude-on-vertex-ai;
  cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude/structured_outputs
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import pytest

from tests.cloudkit import simulated_service_account
from tests.test_adapters import collect
from tests.test_vertex import jwt_grant, route, vertex
from worker.adapters import (
    AnthropicAdapter,
    Completion,
    ProviderCall,
    TextDelta,
    VertexAdapter,
)
from worker.adapters.base import Adapter
from worker.adapters.claude_options import EFFORT_BUDGET_TOKENS, generation
from worker.adapters.claude_schema import claude_schema
from worker.errors import InvalidRequest
from worker.settings import ProviderSettings
from worker.simulator import Fault, Simulator
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    NamedTool,
    TextPart,
    Tool,
    ToolCall,
)

KEY_ENV = "RELEVO_TEST_ANTHROPIC_KEY"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 24).decode()
PDF = base64.b64encode(b"%PDF-1.7\n%%EOF\n").decode()
WEATHER = Tool(
    name="get_weather",
    description="Current weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = Tool(name="get_time", description="The time", parameters={"type": "object"})
INVOICE = JsonSchemaFormat(
    name="invoice",
    schema={
        "type": "object",
        "properties": {
            "number": {"type": "string"},
            "total": {"type": "number", "minimum": 0},
            "lines": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["number", "total"],
    },
)
WIRES = ("anthropic", "vertex")


@pytest.fixture(autouse=True)
def credentials(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-ant-test-0123456789abcdef")
    account = simulated_service_account(f"{sim.url}/token", tmp_path_factory.mktemp("gcp"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(account))


def claude(wire: str, base: str, client: httpx.AsyncClient) -> Adapter:
    if wire == "vertex":
        return VertexAdapter(vertex(base), client)
    settings = ProviderSettings(kind="anthropic", base_url=base, api_key_env=KEY_ENV)
    return AnthropicAdapter(settings, client)


def model_id(name: str = "claude-sonnet-4-5") -> str:
    """A model id of `name`'s generation that no other test uses."""
    return f"{name}@t{uuid.uuid4().hex[:8]}"


def ask(model: str, *messages: Message, **fields: Any) -> ProviderCall:
    fields.setdefault("max_tokens", 4096)
    fields.setdefault("stream", False)
    return ProviderCall(
        model_id=model,
        messages=messages or (Message(role="user", content="Hello?"),),
        tools=fields.pop("tools", ()),
        **fields,
    )


async def sent(
    sim: Simulator, adapter: Adapter, call: ProviderCall
) -> tuple[dict[str, Any], Completion]:
    """The body the simulator accepted for `call`, and the answer."""
    done = (await collect(adapter.send(call)))[-1]
    assert isinstance(done, Completion)
    (record,) = sim.requests(call.model_id)
    assert record.status == 200, record
    return dict(record.body), done


# --- content parts ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_images_and_pdfs_by_data_and_url_are_blocks_in_order(
    sim: Simulator, client: httpx.AsyncClient, stream: bool
) -> None:
    """Vision ("base64" and "url" image sources) and PDF support ("document" blocks, base64
    and url sources, `title`); text parts stay text blocks, in the caller's order."""
    question = Message(
        role="user",
        content=(
            TextPart(text="Compare these."),
            ImagePart(media_type="image/png", data=PNG),
            ImagePart(url="https://example.com/cat.jpg"),
            DocumentPart(data=PDF, name="invoice.pdf"),
            DocumentPart(url="https://example.com/terms.pdf"),
        ),
    )
    model = model_id()
    adapter = claude("anthropic", sim.url, client)
    body, done = await sent(sim, adapter, ask(model, question, stream=stream))
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare these."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                    "title": "invoice.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.com/terms.pdf"},
                },
            ],
        }
    ]
    assert done.text.startswith(f"Answer from {model}.")


async def test_tool_results_carry_their_images_and_documents(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Tool use, "Handle tool calls": a tool_result's content is a string or a list of text,
    image and document blocks (the SDK's `ToolResultBlockParam.content`)."""
    call_ = ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"})
    messages = (
        Message(role="user", content="Show me the radar."),
        Message(role="assistant", tool_calls=(call_,)),
        Message(
            role="tool",
            tool_call_id="toolu_1",
            content=(
                TextPart(text="Radar:"),
                ImagePart(media_type="image/png", data=PNG),
                DocumentPart(data=PDF),
            ),
        ),
    )
    body, _ = await sent(
        sim, claude("anthropic", sim.url, client), ask(model_id(), *messages, tools=(WEATHER,))
    )
    assert body["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "text", "text": "Radar:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                    },
                ],
            }
        ],
    }


async def test_claude_on_vertex_takes_attachments_as_data_and_refuses_urls_unsent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Vision, supported platforms: "On Amazon Bedrock and Google Cloud, only base64-encoded
    sources are currently available"; a URL never reaches Vertex, the adapter refuses it."""
    adapter = claude("vertex", sim.url, client)
    model = model_id()
    with_data = Message(role="user", content=(ImagePart(media_type="image/png", data=PNG),))
    body, _ = await sent(sim, adapter, ask(model, with_data))
    assert body["messages"][0]["content"][0]["source"]["type"] == "base64"
    by_url = Message(role="user", content=(DocumentPart(url="https://example.com/a.pdf"),))
    with pytest.raises(InvalidRequest, match="no document by URL"):
        await collect(adapter.send(ask(model, by_url)))
    assert sim.calls(model) == 1


# --- tool_choice and parallel tool use ----------------------------------------------

CHOICES = [
    ("auto", None, {"type": "auto"}),
    ("none", None, {"type": "none"}),
    ("required", None, {"type": "any"}),
    (NamedTool(name="get_time"), None, {"type": "tool", "name": "get_time"}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ("auto", True, {"type": "auto", "disable_parallel_tool_use": False}),
    ("none", False, {"type": "none"}),  # `none` takes no disable_parallel_tool_use
    (None, None, None),
]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("choice", "parallel", "expected"), CHOICES)
async def test_tool_choice_and_parallel_calls_take_the_apis_shape(
    sim: Simulator,
    client: httpx.AsyncClient,
    *,
    wire: str,
    choice: Any,
    parallel: bool | None,
    expected: dict[str, Any] | None,
) -> None:
    """Tool use, "Forcing tool use": `auto`, `any`, `tool` with `name`, `none`; parallel
    tool use: `disable_parallel_tool_use` on all but `none`."""
    call = ask(model_id(), tools=(WEATHER, CLOCK), tool_choice=choice, parallel_tool_calls=parallel)
    body, _ = await sent(sim, claude(wire, sim.url, client), call)
    assert body.get("tool_choice") == expected


async def test_without_tools_no_tool_choice_is_sent(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Messages API: `tool_choice` is how the model uses the provided `tools`; the API
    refuses it when there are none (the simulator does too, below)."""
    body, _ = await sent(
        sim, claude("anthropic", sim.url, client), ask(model_id(), tool_choice="auto")
    )
    assert "tool_choice" not in body


# --- sampling, stop sequences, seed -------------------------------------------------

SAMPLING = [
    ({"temperature": 0.2}, {"temperature": 0.2}),
    ({"top_p": 0.9}, {"top_p": 0.9}),
    ({"seed": 7}, {}),  # no such field
    ({"stop": ("END", "\n\n##")}, {"stop_sequences": ["END", "\n\n##"]}),
]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("fields", "expected"), SAMPLING)
async def test_sampling_and_stop_sequences_are_sent_as_the_api_takes_them(
    sim: Simulator,
    client: httpx.AsyncClient,
    wire: str,
    fields: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    """Messages API: `temperature` (0 to 1), `top_p`, `stop_sequences`, no `seed`; the
    migration guide: "passing both [temperature and top_p] will error on every Claude 4+
    model"."""
    body, _ = await sent(sim, claude(wire, sim.url, client), ask(model_id(), **fields))
    chosen = {k: body[k] for k in ("temperature", "top_p", "stop_sequences", "seed") if k in body}
    assert chosen == expected


# --- thinking from reasoning_effort -------------------------------------------------


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
async def test_reasoning_effort_is_a_thinking_budget_and_sampling_stays_out(
    sim: Simulator, client: httpx.AsyncClient, effort: str
) -> None:
    """Extended thinking: `budget_tokens` at least 1024 and below `max_tokens`; "Thinking
    isn't compatible with temperature or top_k modifications" (the API: "`temperature` may
    only be set to 1 when thinking is enabled")."""
    call = ask(
        model_id(), reasoning=True, reasoning_effort=effort, max_tokens=40_000, temperature=0.3
    )
    body, done = await sent(sim, claude("anthropic", sim.url, client), call)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": EFFORT_BUDGET_TOKENS[effort]}
    assert "temperature" not in body
    assert done.reasoning  # the simulator thinks when asked to


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"reasoning": False, "reasoning_effort": "high"}, None),  # not a reasoning model
        ({"reasoning_effort": "high", "max_tokens": 8000}, 4000),  # half of max_tokens
        ({"reasoning_effort": "low", "max_tokens": 2000}, None),  # half is under 1024
        ({"reasoning_effort": "low", "thinking_budget_tokens": 3000}, 3000),  # config wins
        ({"thinking_budget_tokens": 3000, "max_tokens": 3000}, None),  # not below max_tokens
    ],
)
async def test_the_budget_respects_the_apis_bounds_and_the_configured_budget_wins(
    sim: Simulator, client: httpx.AsyncClient, fields: dict[str, Any], expected: int | None
) -> None:
    """Extended thinking: "budget_tokens must be ≥1024 and less than max_tokens"."""
    fields = {"reasoning": True, "max_tokens": 40_000, **fields}
    body, _ = await sent(sim, claude("anthropic", sim.url, client), ask(model_id(), **fields))
    assert body.get("thinking") == (
        None if expected is None else {"type": "enabled", "budget_tokens": expected}
    )


@pytest.mark.parametrize("wire", WIRES)
async def test_a_forced_tool_goes_without_thinking(
    sim: Simulator, client: httpx.AsyncClient, wire: str
) -> None:
    """Extended thinking with tool use: only `auto` and `none` tool_choice (the API:
    "Thinking may not be enabled when tool_choice forces tool use.")."""
    call = ask(
        model_id(),
        tools=(WEATHER,),
        tool_choice="required",
        reasoning=True,
        reasoning_effort="high",
    )
    body, _ = await sent(sim, claude(wire, sim.url, client), call)
    assert body["tool_choice"] == {"type": "any"}
    assert "thinking" not in body


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("name", ["claude-opus-4-7", "claude-sonnet-5"])
async def test_adaptive_only_models_get_adaptive_thinking_an_effort_and_no_sampling(
    sim: Simulator, client: httpx.AsyncClient, wire: str, name: str
) -> None:
    """Migration guide, Opus 4.7 and Sonnet 5: `budget_tokens` and the sampling fields
    return 400; `thinking: {"type": "adaptive"}` with `output_config.effort` instead. A
    configured budget turns adaptive thinking on."""
    call = ask(
        model_id(name), reasoning=True, reasoning_effort="medium", temperature=0.5, top_p=0.9
    )
    body, _ = await sent(sim, claude(wire, sim.url, client), call)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "medium"}
    assert not {"temperature", "top_p"} & set(body)
    configured = ask(model_id(name), thinking_budget_tokens=2048)
    body, _ = await sent(sim, claude(wire, sim.url, client), configured)
    assert body["thinking"] == {"type": "adaptive"}
    assert "output_config" not in body


def test_the_generation_is_read_from_the_model_id() -> None:
    """Migration guide: structured outputs from Claude 4.5; adaptive-only from Opus 4.7
    and the Claude 5 models (Fable, Mythos included)."""
    table = {
        "claude-3-5-sonnet-20241022": (False, False),
        "claude-sonnet-4-20250514": (False, False),
        "claude-opus-4-1@20250805": (False, False),
        "claude-haiku-4-5-20251001": (False, True),
        "claude-sonnet-4-6": (False, True),
        "claude-opus-4-7": (True, True),
        "anthropic.claude-sonnet-5": (True, True),
        "claude-mythos-preview": (True, True),
        "my-gateway-alias": (False, True),
    }
    for model, (adaptive_only, structured) in table.items():
        assert generation(model) == type(generation(model))(adaptive_only, structured), model


# --- structured output --------------------------------------------------------------


def test_the_schema_sent_is_the_callers_made_to_fit_as_the_sdk_does() -> None:
    """Structured outputs, "How SDK transformation works": objects closed, unsupported
    constraints moved into the description (the Python SDK's `transform_schema`)."""
    assert claude_schema(INVOICE.json_schema) == {
        "type": "object",
        "properties": {
            "number": {"type": "string"},
            "total": {"type": "number", "description": "{minimum: 0}"},
            "lines": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["number", "total"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lax"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_schema_goes_natively_on_the_claude_api(
    sim: Simulator, client: httpx.AsyncClient, stream: bool, strict: bool
) -> None:
    """Structured outputs: `output_config: {"format": {"type": "json_schema", "schema"}}`
    (always constrained: `strict` has no field of its own); the answer is the text,
    JSON valid against the schema."""
    wanted = INVOICE.model_copy(update={"strict": strict})
    call = ask(model_id(), response_format=wanted, stream=stream)
    body, done = await sent(sim, claude("anthropic", sim.url, client), call)
    assert body["output_config"] == {
        "format": {"type": "json_schema", "schema": claude_schema(INVOICE.json_schema)}
    }
    assert "tools" not in body
    assert json.loads(done.text) == {"number": "x", "total": 0.0}
    assert (done.tool_calls, done.finish_reason) == ((), "stop")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("wire", "name", "response_format"),
    [
        ("vertex", "claude-sonnet-4-5", INVOICE),  # Vertex: off by organization policy
        ("anthropic", "claude-sonnet-4", INVOICE),  # before structured outputs
        ("anthropic", "claude-sonnet-4-5", JsonObjectFormat()),  # no schema-less JSON mode
    ],
)
async def test_elsewhere_the_answer_is_a_forced_tools_input_returned_as_text(
    sim: Simulator,
    client: httpx.AsyncClient,
    *,
    stream: bool,
    wire: str,
    name: str,
    response_format: JsonSchemaFormat | JsonObjectFormat,
) -> None:
    """Tool use, "JSON mode": a forced tool whose input is the answer; Vertex AI, Claude
    structured outputs: off until `constraints/vertexai.allowedPartnerModelFeatures` allows
    them. The adapter returns the input's JSON as the text, streamed as text."""
    call = ask(model_id(name), response_format=response_format, stream=stream)
    body, done = await sent(sim, claude(wire, sim.url, client), call)
    (tool,) = body["tools"]
    schema = isinstance(response_format, JsonSchemaFormat)
    assert tool["input_schema"] == (INVOICE.json_schema if schema else {"type": "object"})
    assert body["tool_choice"] == {"type": "tool", "name": tool["name"]}
    assert "output_config" not in body
    assert (done.tool_calls, done.finish_reason) == ((), "stop")
    assert json.loads(done.text) == ({"number": "x", "total": 0} if schema else {})
    *deltas, again = await collect(claude(wire, sim.url, client).send(call))
    streamed = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert isinstance(again, Completion)
    assert (again.text, streamed) == (done.text, done.text if stream else "")


async def test_with_the_turns_own_tools_the_model_may_call_them_or_answer(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Tool use, `any`: the model must call one of the tools: the turn's own, or the one
    that carries the answer; an array answer goes inside an object (a tool's input is one)."""
    rows = JsonSchemaFormat(name="rows", schema={"type": "array", "items": {"type": "integer"}})
    call = ask(model_id(), tools=(WEATHER,), response_format=rows, parallel_tool_calls=False)
    adapter = claude("vertex", sim.url, client)
    body, done = await sent(sim, adapter, call)
    assert [t["name"] for t in body["tools"]] == ["rows", "get_weather"]
    assert body["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"answer": rows.json_schema},
        "required": ["answer"],
    }
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert json.loads(done.text) == []
    sim.set_faults(call.model_id, Fault(reply_tool="get_weather", tool_args={"city": "Oslo"}))
    chose_tool = (await collect(adapter.send(call)))[-1]
    assert isinstance(chose_tool, Completion)
    assert [c.name for c in chose_tool.tool_calls] == ["get_weather"]
    assert chose_tool.finish_reason == "tool_calls"


async def test_refusal_stays_a_content_filter(sim: Simulator, client: httpx.AsyncClient) -> None:
    """Streaming refusals: `stop_reason: "refusal"` when Claude's safety classifiers stop
    a response (a filter, not the model's own words: `content_filter`, no `refusal` text)."""
    model = model_id()
    sim.set_faults(model, Fault(content_filter_after_tokens=0))
    _, done = await sent(sim, claude("anthropic", sim.url, client), ask(model))
    assert (done.finish_reason, done.refusal, done.text) == ("content_filter", None, "")


# --- what the simulator refuses, as the API does ------------------------------------

BASE: dict[str, Any] = {"max_tokens": 2048, "messages": [{"role": "user", "content": "Hi"}]}
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]
THINKING = {"thinking": {"type": "enabled", "budget_tokens": 1024}}


def said(*blocks: dict[str, Any]) -> dict[str, Any]:
    """A body's `messages`: one user message of `blocks`."""
    return {"messages": [{"role": "user", "content": list(blocks)}]}


def image(media_type: str = "image/png", data: str = PNG) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def answer_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"output_config": {"format": {"type": "json_schema", "schema": schema}}}


REFUSED = [
    ({"seed": 7}, "seed: Extra inputs are not permitted"),
    (said(image("image/bmp")), "media_type: Input should be"),
    (said(image(data="A" * (5 * 2**20 + 4))), "image exceeds 5 MB maximum"),
    (said({"type": "text", "text": ""}), "must be non-empty"),
    (said({"type": "video", "source": {}}), "Input tag 'video'"),
    ({"temperature": 0.5, "top_p": 0.9}, "cannot both be specified"),
    ({"temperature": 1.5}, "less than or equal to 1"),
    ({**THINKING, "temperature": 0.5}, "may only be set to 1 when thinking is enabled"),
    ({**THINKING, "tools": TOOLS, "tool_choice": {"type": "any"}}, "forces tool use"),
    ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "greater than or equal to 1024"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "must be greater than `thinking"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "Tool 'nope' not found"),
    ({"tool_choice": {"type": "auto"}}, "only be specified while providing tools"),
    (
        {"tools": TOOLS, "tool_choice": {"type": "none", "disable_parallel_tool_use": True}},
        "Extra inputs",
    ),
    (answer_schema({"type": "object"}), "'additionalProperties' must be explicitly set to false"),
    (answer_schema({"type": "integer", "minimum": 1}), "property 'minimum' is not supported"),
]


@pytest.mark.parametrize(("extra", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_the_simulator_refuses_what_the_messages_api_refuses(
    sim: Simulator, extra: dict[str, Any], message: str
) -> None:
    """Messages API errors (`invalid_request_error`, 400), in the API's words where public
    reports quote them: the extended-thinking constraints, the migration guide's "passing
    both will error", Structured outputs' "If you use an unsupported feature, you'll
    receive a 400 error"."""
    with httpx.Client(base_url=sim.url, timeout=5) as http:
        reply = http.post("/v1/messages", json={**BASE, "model": model_id(), **extra})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking.type.enabled"),
        ({"temperature": 0.5}, "`temperature` is deprecated for this model"),
    ],
)
def test_adaptive_only_models_refuse_budgets_and_sampling(
    sim: Simulator, extra: dict[str, Any], message: str
) -> None:
    """Migration guide, Opus 4.7: "strip any remaining `budget_tokens` and sampling
    parameters (both 400 on Opus 4.7)"."""
    with httpx.Client(base_url=sim.url, timeout=5) as http:
        body = {**BASE, "model": model_id("claude-opus-4-7"), **extra}
        reply = http.post("/v1/messages", json=body)
    assert reply.status_code == 400
    assert message in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            said({"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}),
            "URL sources are not supported",
        ),
        (
            answer_schema({"type": "object", "additionalProperties": False}),
            "allowedPartnerModelFeatures",
        ),
        ({"model": "claude-x"}, "model: Extra inputs"),
    ],
)
def test_claude_on_vertex_refuses_urls_and_structured_outputs_by_default(
    sim: Simulator, extra: dict[str, Any], message: str
) -> None:
    """Claude on Vertex AI: `model` in the URL only, base64 sources only, structured outputs
    off by the default organization policy."""
    body = {**BASE, "anthropic_version": "vertex-2023-10-16", **extra}
    with httpx.Client(base_url=sim.url, timeout=5) as http:
        token = http.post("/token", data=jwt_grant()).json()["access_token"]
        path = route("anthropic", model_id(), "rawPredict")
        reply = http.post(path, json=body, headers={"authorization": f"Bearer {token}"})
    assert reply.status_code == 400
    assert message in reply.json()["error"]["message"]


def test_a_structured_answer_is_an_instance_of_the_schema_or_on_command_not(sim: Simulator) -> None:
    """The simulator answers a schema with a small instance of it; `invalid_output` makes
    it answer JSON that does not validate."""
    from jsonschema import Draft202012Validator

    schema = claude_schema(INVOICE.json_schema)
    body = {**BASE, "output_config": {"format": {"type": "json_schema", "schema": schema}}}
    model = model_id()
    with httpx.Client(base_url=sim.url, timeout=5) as http:
        good = http.post("/v1/messages", json={**body, "model": model}).json()
        sim.set_faults(model, Fault(invalid_output=True, times=1))
        bad = http.post("/v1/messages", json={**body, "model": model}).json()
    validator = Draft202012Validator(INVOICE.json_schema)
    assert validator.is_valid(json.loads(good["content"][0]["text"]))
    assert not validator.is_valid(json.loads(bad["content"][0]["text"]))


# --- what the wire can carry --------------------------------------------------------


@pytest.mark.parametrize(
    ("decoded_bytes", "fits"), [(3_932_160, True), (3_932_163, False)], ids=["3.75MB", "over"]
)
def test_an_image_whose_base64_passes_5_mb_is_more_than_the_api_carries(
    decoded_bytes: int, fits: bool
) -> None:
    """Vision: 5 MB an image, counted on its base64 (Claude Code's `apiLimits.ts`: "the API
    rejects images where the base64 string length exceeds this value"): 3.75 MB decoded."""
    from worker.turn.capability import wire_unfit
    from worker.types import TurnRequest

    image = ImagePart(media_type="image/png", data="A" * (decoded_bytes * 4 // 3))
    request = TurnRequest(tenant_id="acme", messages=(Message(role="user", content=(image,)),))
    assert (wire_unfit(request, "anthropic", "m") is None) is fits
