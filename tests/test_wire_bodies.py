"""Bodies every provider takes for the edges of a turn: messages that said nothing, tool
ids and names another vendor wrote, tools without arguments, reasoning models behind any
host. Each test sends a `ProviderCall` over real HTTP to the simulated provider, which
refuses what the real API refuses, in its words (`worker/simulator/*_request.py`).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft7Validator

from tests.chainkit import run, settings
from tests.cloudkit import use_simulated_aws
from tests.test_adapters import KEY_ENV, SECRET, adapter
from worker.adapters import BedrockAdapter, Completion, ProviderCall
from worker.adapters.base import Adapter
from worker.adapters.left_out import left_out
from worker.errors import InputError
from worker.settings import ProviderSettings
from worker.simulator import Simulator
from worker.simulator.bedrock_wire import thinking_signature
from worker.turn.capability import wire_unfit
from worker.types import (
    JsonSchemaFormat,
    Message,
    NamedTool,
    Reasoning,
    Tool,
    ToolCall,
    TurnRequest,
)
from worker.types.request import parse_turn_request

REGION = "eu-west-3"
PING = Tool(name="ping", description="Ping the host", parameters={"type": "object"})


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("RELEVO_TEST_KEY", SECRET)  # the chain kit's providers
    use_simulated_aws(monkeypatch, tmp_path)


def wire(api: str, sim: Simulator, client: httpx.AsyncClient) -> Adapter:
    if api == "bedrock":
        base = f"{sim.url}/bedrock-runtime/{REGION}"
        return BedrockAdapter(
            ProviderSettings(kind="bedrock", region=REGION, base_url=base), client
        )
    return adapter(api, sim.url, client)


def model_for(api: str) -> str:
    """A model id of `api`'s vendor that no other test uses."""
    tag = uuid.uuid4().hex[:8]
    return {
        "anthropic": f"claude-sonnet-4-5@t{tag}",
        "bedrock": f"anthropic.claude-sonnet-4-5-t{tag}-v1:0",
        "gemini": f"gemini-2.5-flash-t{tag}",
        "openai": f"gpt-4o-t{tag}",
    }[api]


async def accepted(
    sim: Simulator, client: httpx.AsyncClient, api: str, call: ProviderCall
) -> tuple[dict[str, Any], Completion]:
    """The body the simulator answered with 200 for `call`, and the answer."""
    done = [e async for e in wire(api, sim, client).send(call)][-1]
    assert isinstance(done, Completion)
    record = sim.requests(call.model_id)[-1]
    assert record.status == 200, record
    return dict(record.body), done


def ask(model: str, *messages: Message, **fields: Any) -> ProviderCall:
    fields.setdefault("tools", ())
    fields.setdefault("stream", False)
    return ProviderCall(model, messages, max_tokens=200, **fields)


# --- messages that said nothing -------------------------------------------------------


SILENT_TURNS = (
    Message(role="user", content="Run it."),
    Message(role="assistant", tool_calls=(ToolCall(id="toolu_1", name="ping", arguments={}),)),
    Message(role="tool", tool_call_id="toolu_1", content=""),
    Message(role="assistant", content=""),
    Message(role="user", content=""),
    Message(role="assistant", content="  "),
    Message(role="user", content="Again?"),
)


@pytest.mark.parametrize("api", ["anthropic", "bedrock", "gemini"])
async def test_a_message_that_said_nothing_is_left_out_and_its_neighbours_join(
    sim: Simulator, client: httpx.AsyncClient, api: str
) -> None:
    """Anthropic refuses a message with empty content (but the last assistant's), Converse
    a blank text block, Gemini an empty text part or a turn with no parts: an assistant
    that said nothing and an empty user message are left out; a tool's empty output stays."""
    body, _ = await accepted(sim, client, api, ask(model_for(api), *SILENT_TURNS, tools=(PING,)))
    # Anthropic joins two user messages in a row itself; Converse and Gemini get one.
    # Gemini takes blank text that is not empty, so the blank assistant stays there.
    key, roles = {
        "anthropic": ("messages", ["user", "assistant", "user", "user"]),
        "bedrock": ("messages", ["user", "assistant", "user"]),
        "gemini": ("contents", ["user", "model", "user", "model", "user"]),
    }[api]
    assert [m["role"] for m in body[key]] == roles
    assert "Again?" in str(body[key][-1])


# --- OpenAI's reasoning models behind any host ------------------------------------------


@pytest.mark.parametrize("model", ["o3", "gpt-5-mini", "openai/o4-mini"])
async def test_an_openai_reasoning_model_gets_max_completion_tokens_on_any_host(
    sim: Simulator, client: httpx.AsyncClient, model: str
) -> None:
    """OpenAI's reasoning models refuse `max_tokens` ("Use 'max_completion_tokens'
    instead"): behind a gateway or Azure's v1 endpoint, a host relevo does not know, they
    get the new name; another model there keeps the name every server knows."""
    called = f"{model}-t{uuid.uuid4().hex[:8]}"
    body, _ = await accepted(sim, client, "openai", ask(called, Message(role="user", content="Hi")))
    assert (body.get("max_completion_tokens"), "max_tokens" in body) == (200, False)
    other = ask(model_for("openai"), Message(role="user", content="Hi"))
    body, _ = await accepted(sim, client, "openai", other)
    assert (body.get("max_tokens"), "max_completion_tokens" in body) == (200, False)


# --- tool-call ids another vendor wrote ---------------------------------------------------


async def test_tool_ids_converse_refuses_map_to_stable_ids_that_still_pair(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """ToolUseId is 1 to 64 of [a-zA-Z0-9_.:-]: a longer id, or one with other characters
    (another vendor's), goes as a stable id that fits, the same in toolUse and toolResult;
    an id that fits goes as it is."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolUseBlock.html
    ids = ("call_" + "x" * 70, "fc|abc=1", "tooluse_ok-1.2:3")
    calls = tuple(ToolCall(id=i, name="ping", arguments={}) for i in ids)
    history = (
        Message(role="user", content="Ping thrice."),
        Message(role="assistant", tool_calls=calls),
        *(Message(role="tool", tool_call_id=i, content="pong") for i in ids),
    )
    model = model_for("bedrock")
    body, _ = await accepted(sim, client, "bedrock", ask(model, *history, tools=(PING,)))
    used = [b["toolUse"]["toolUseId"] for b in body["messages"][1]["content"]]
    answered = [b["toolResult"]["toolUseId"] for b in body["messages"][2]["content"]]
    assert used == answered
    assert used[2] == ids[2]
    assert all(len(i) <= 64 and "|" not in i for i in used)
    again, _ = await accepted(sim, client, "bedrock", ask(model, *history, tools=(PING,)))
    assert [b["toolUse"]["toolUseId"] for b in again["messages"][1]["content"]] == used


# --- tool names Gemini refuses --------------------------------------------------------------


async def test_a_tool_name_gemini_refuses_skips_gemini_and_the_next_model_answers(
    sim: Simulator,
) -> None:
    """FunctionDeclaration.name must start with a letter or an underscore; relevo's tool
    names may start with a digit or a dash. Gemini and Gemini on Vertex are unfit for such
    a turn (`incapable`, naming the tool), and the next model in the chain answers it."""
    # https://ai.google.dev/api/caching#FunctionDeclaration
    verify = Tool(name="2fa_verify", description="Verify a code", parameters={"type": "object"})
    turn = TurnRequest(
        tenant_id="acme",
        messages=(Message(role="user", content="Verify 123456."),),
        tools=(verify,),
    )
    for api in ("gemini", "vertex"):
        unfit = wire_unfit(turn, api, "gemini-2.5-pro")
        assert unfit is not None
        assert "'2fa_verify' (it must start with a letter or _)" in unfit.detail
    assert wire_unfit(turn, "anthropic", "claude-sonnet-4-5") is None
    result = await run(settings(sim.url, ("google/gamma", "anthropic/beta")), turn)
    assert [(a.model, a.outcome, a.error_class) for a in result.attempts] == [
        ("google/gamma", "skipped", "incapable"),
        ("anthropic/beta", "ok", None),
    ]
    assert sim.calls("gamma") == 0


# --- a tool without arguments ---------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "bedrock", "gemini", "openai"])
async def test_a_tool_with_empty_parameters_goes_as_an_object_with_no_properties(
    sim: Simulator, client: httpx.AsyncClient, api: str
) -> None:
    """`parameters: {}` is a tool with no arguments: Anthropic requires `input_schema.type`
    "object", Converse a schema of type object, Gemini one that describes an object."""
    clock = Tool(name="get_time", description="The time", parameters={})
    body, _ = await accepted(
        sim, client, api, ask(model_for(api), Message(role="user", content="Time?"), tools=(clock,))
    )
    schema = {
        "anthropic": lambda: body["tools"][0]["input_schema"],
        "bedrock": lambda: body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"],
        "gemini": lambda: body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
        "openai": lambda: body["tools"][0]["function"]["parameters"],
    }[api]()
    assert schema == {"type": "object", "properties": {}}


@pytest.mark.parametrize("kind", ["string", ["object", "null"], "array"])
def test_a_tool_whose_parameters_are_not_an_object_is_refused_at_intake(kind: Any) -> None:
    """No provider takes a tool whose arguments are not an object: the turn is refused
    before any call, the message naming the tool."""
    turn = {
        "tenant_id": "acme",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "lookup", "parameters": {"type": kind}}],
    }
    with pytest.raises(InputError, match=r"tools\.0\.parameters: .*tool 'lookup'.*\"object\""):
        parse_turn_request(turn)


# --- schemas fitted to Claude's structured outputs ------------------------------------------


SHIPMENT = JsonSchemaFormat(
    name="shipment",
    schema={
        "type": "object",
        "properties": {
            "address": {
                "type": ["object", "null"],
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "item": {"$ref": "#/definitions/Item"},
        },
        "required": ["address", "item"],
        "definitions": {
            "Item": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        },
    },
)


async def test_a_nullable_object_is_closed_and_draft7_definitions_stay_where_refs_point(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Structured outputs refuse an object (nullable too) not closed with
    `additionalProperties: false`, and a `$ref` that resolves to nothing: draft 7's
    `definitions` are kept, fitted, as `$defs` are."""
    # https://platform.claude.com/docs/en/build-with-claude/structured-outputs
    call = ask(
        model_for("anthropic"), Message(role="user", content="Ship?"), response_format=SHIPMENT
    )
    body, done = await accepted(sim, client, "anthropic", call)
    schema = body["output_config"]["format"]["schema"]
    assert schema["properties"]["address"]["additionalProperties"] is False
    assert schema["definitions"]["Item"]["additionalProperties"] is False
    assert schema["properties"]["item"] == {"$ref": "#/definitions/Item"}
    assert Draft7Validator(SHIPMENT.json_schema).is_valid(json.loads(done.text))


# --- structured output for Claude on Converse ---------------------------------------------


INVOICE = JsonSchemaFormat(
    name="invoice",
    schema={
        "type": "object",
        "properties": {"number": {"type": "string", "maxLength": 20}, "total": {"minimum": 0}},
        "required": ["number", "total"],
    },
)
LINES = JsonSchemaFormat(name="lines", schema={"type": "array", "items": {"type": "string"}})


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
async def test_converse_fits_the_schema_to_claude_and_forces_a_tool_before_claude_4_5(
    sim: Simulator, client: httpx.AsyncClient, stream: bool
) -> None:
    """Claude's structured outputs on Bedrock (Claude 4.5 and later) decode against
    Claude's subset: the schema goes fitted (objects closed, bounds into descriptions).
    An earlier Claude has none: a forced tool carries the answer, as on Anthropic's own
    API, and its input comes back as the reply's text (a non-object answer unwrapped)."""
    # https://docs.aws.amazon.com/bedrock/latest/userguide/structured-output.html
    tag = uuid.uuid4().hex[:8]
    newer = f"anthropic.claude-sonnet-4-5-2025{tag}-v1:0"
    body, done = await accepted(
        sim,
        client,
        "bedrock",
        ask(newer, Message(role="user", content="Bill?"), response_format=INVOICE, stream=stream),
    )
    fitted = json.loads(body["outputConfig"]["textFormat"]["structure"]["jsonSchema"]["schema"])
    assert fitted["additionalProperties"] is False
    assert "maxLength" not in fitted["properties"]["number"]
    assert Draft7Validator(INVOICE.json_schema).is_valid(json.loads(done.text))
    for wanted in (INVOICE, LINES):
        older = f"anthropic.claude-3-7-sonnet-2025{tag}-v1:0"
        call = ask(
            older, Message(role="user", content="Bill?"), response_format=wanted, stream=stream
        )
        body, done = await accepted(sim, client, "bedrock", call)
        assert "outputConfig" not in body
        assert body["toolConfig"]["toolChoice"] == {"any": {}}
        assert body["toolConfig"]["tools"][0]["toolSpec"]["name"] == wanted.name
        assert (done.tool_calls, done.finish_reason) == ((), "stop")
        assert Draft7Validator(wanted.json_schema).is_valid(json.loads(done.text))


# --- what Converse gives only some families -----------------------------------------------


FAILED_PING = (
    Message(role="user", content="Ping."),
    Message(role="assistant", tool_calls=(ToolCall(id="t1", name="ping", arguments={}),)),
    Message(role="tool", tool_call_id="t1", content="host unreachable", is_error=True),
)


@pytest.mark.parametrize(
    ("family", "status"),
    [
        ("anthropic.claude-sonnet-4", True),
        ("amazon.nova-pro", True),
        ("meta.llama3-3-70b-instruct", False),
    ],
)
async def test_a_failed_tools_status_goes_only_to_claude_and_nova_and_is_named_left_out(
    sim: Simulator, client: httpx.AsyncClient, family: str, status: bool
) -> None:
    """ToolResultBlock.status: "only supported by Amazon Nova and Anthropic Claude 3 and 4
    models". Another family gets the error as the result's text alone, and the attempt's
    row names `is_error` left out."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolResultBlock.html
    call = ask(f"{family}-t{uuid.uuid4().hex[:8]}-v1:0", *FAILED_PING, tools=(PING,))
    body, _ = await accepted(sim, client, "bedrock", call)
    result = body["messages"][2]["content"][0]["toolResult"]
    assert ("status" in result, result["content"]) == (status, [{"text": "host unreachable"}])
    assert ("is_error" in left_out("bedrock", call)) is not status


def test_a_named_tool_choice_makes_converse_unfit_but_for_claude_and_nova() -> None:
    """SpecificToolChoice: "Only supported by Anthropic Claude 3 and Amazon Nova models";
    `any` would let another tool be called, so another family is unfit for the turn."""
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolChoice.html
    turn = TurnRequest(
        tenant_id="acme",
        messages=(Message(role="user", content="Ping."),),
        tools=(PING,),
        tool_choice=NamedTool(name="ping"),
    )
    unfit = wire_unfit(turn, "bedrock", "meta.llama3-3-70b-instruct-v1:0")
    assert unfit is not None
    assert unfit.detail == "its bedrock API cannot carry a named tool_choice"
    for model in ("anthropic.claude-sonnet-4-20250514-v1:0", "us.amazon.nova-pro-v1:0"):
        assert wire_unfit(turn, "bedrock", model) is None


async def test_claudes_unsigned_reasoning_does_not_go_back_on_converse(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Claude refuses thinking without its signature: unsigned reasoning is dropped, as
    the Anthropic adapter drops it; signed reasoning goes back."""
    # https://platform.claude.com/docs/en/build-with-claude/extended-thinking
    said = Message(
        role="assistant",
        content="Four.",
        reasoning=(
            Reasoning(origin="anthropic", text="unsigned"),
            Reasoning(origin="anthropic", text="signed", signature=thinking_signature("signed")),
        ),
    )
    history = (Message(role="user", content="2+2?"), said, Message(role="user", content="Sure?"))
    body, _ = await accepted(sim, client, "bedrock", ask(model_for("bedrock"), *history))
    sent = [
        b["reasoningContent"]["reasoningText"]["text"]
        for b in body["messages"][1]["content"]
        if "reasoningContent" in b
    ]
    assert sent == ["signed"]
