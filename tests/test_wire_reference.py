"""Every request body relevo builds uses only the fields and enum values its API publishes.

`tests/wire_reference.json` holds, for each API, the request shapes of the provider's own
published types, pinned to a version and naming the file and class of each: openai-python's
`types/chat` and `types/responses`, anthropic-sdk-python's `types`, googleapis/python-genai's
`types.py` (camelCased, as it sends them), botocore's bedrock-runtime `service-2.json`. Each
body relevo builds for a set of turns (every optional field, attachments, tool loops with
reasoning, failed tools, streaming) on every wire and model generation is walked against
it: a field or an enum value the reference does not have fails, naming where it is. The
Responses API's stream event types the adapter reads are checked against the SDK's
`ResponseStreamEvent` union the same way.
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from worker.adapters import ProviderCall, build_adapter
from worker.adapters.reasoning_models import reasons
from worker.errors import InvalidRequest
from worker.settings import ProviderSettings
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
)

REFERENCE = json.loads((Path(__file__).parent / "wire_reference.json").read_text("utf-8"))
PNG = (  # one pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDw+PgplbmRvYmoKdHJhaWxlcgo8PD4+CiUlRU9GCg=="
WEATHER = Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": ["string", "null"]}}},
)
SCHEMA = JsonSchemaFormat(
    name="order",
    json_schema={"type": "object", "properties": {"id": {"type": "integer"}}},
    strict=True,
)

# (wire, provider settings, the model ids of each generation it serves)
TARGETS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "openai": ({"kind": "openai", "base_url": "https://api.openai.com/v1"}, ("gpt-4.1", "o3")),
    "azure": (
        {
            "kind": "openai",
            "base_url": "https://r.openai.azure.com/openai",
            "azure_api_version": "2025-04-01-preview",
        },
        ("gpt-4o", "gpt-5-mini"),
    ),
    "openai-responses": (
        {"kind": "openai", "api": "responses", "base_url": "https://api.openai.com/v1"},
        ("gpt-4.1", "gpt-5"),
    ),
    "anthropic": (
        {"kind": "anthropic", "base_url": "https://api.anthropic.com"},
        ("claude-3-5-haiku-20241022", "claude-sonnet-4-5", "claude-opus-4-7"),
    ),
    "gemini": (
        {"kind": "gemini", "base_url": "https://generativelanguage.googleapis.com"},
        ("gemini-2.5-flash", "gemini-3-pro-preview"),
    ),
    "vertex": (
        {"kind": "vertex", "region": "us-east5", "project": "relevo-test"},
        ("gemini-2.5-pro", "gemini-3-flash", "claude-sonnet-4-5@20250929", "claude-opus-4-7"),
    ),
    "bedrock": (
        {"kind": "bedrock", "region": "us-east-1"},
        (
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "us.anthropic.claude-opus-4-7",
            "amazon.nova-pro-v1:0",
        ),
    ),
}


def _conversation() -> tuple[Message, ...]:
    """A tool loop with every kind of content: two calls, reasoning of every
    vendor, attachments by data and by URL in the question and in a result."""
    calls = (
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}, signature="sig"),
        ToolCall(id="call_2", name="get_weather", arguments={"city": "Rome"}),
    )
    reasoning = (
        Reasoning(origin="openai", id="rs_1", text="summary", encrypted="gAAAx"),
        Reasoning(origin="anthropic", text="thinking", signature="s1"),
        Reasoning(origin="anthropic", redacted="ZW5j"),
        Reasoning(origin="google", signature="g1"),
        Reasoning(origin="bedrock", text="nova thinking", signature="b1"),
    )
    question = (
        TextPart(text="Compare these."),
        ImagePart(media_type="image/png", data=PNG),
        DocumentPart(data=PDF, name="Q3_report.pdf"),
    )
    result = (TextPart(text="map"), ImagePart(media_type="image/png", data=PNG))
    return (
        Message(role="system", content="Be brief."),
        Message(role="user", content=question),
        Message(role="assistant", content="Checking.", tool_calls=calls, reasoning=reasoning),
        Message(role="tool", tool_call_id="call_1", content=result),
        Message(role="tool", tool_call_id="call_2", content="no station", is_error=True),
        Message(role="user", content="And tomorrow?"),
    )


def _urls() -> tuple[Message, ...]:
    parts = (
        TextPart(text="Read these."),
        ImagePart(url="https://example.com/a.png"),
        DocumentPart(url="https://example.com/a.pdf"),
    )
    return (Message(role="user", content=parts),)


# The turn's variants: each optional field, and the conversations above.
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "stream": {"stream": True},
    "tools-auto": {"tools": (WEATHER,), "tool_choice": "auto", "parallel_tool_calls": False},
    "tools-required": {"tools": (WEATHER,), "tool_choice": "required"},
    "tools-named": {"tools": (WEATHER,), "tool_choice": NamedTool(name="get_weather")},
    "tools-none": {"tools": (WEATHER,), "tool_choice": "none"},
    "json-schema": {"response_format": SCHEMA},
    "json-schema-tools": {"response_format": SCHEMA, "tools": (WEATHER,)},
    "json-object": {"response_format": JsonObjectFormat()},
    "sampling": {"temperature": 0.5, "stop": ("END",), "seed": 7},
    "top-p": {"top_p": 0.9},
    "effort": {"reasoning_effort": "high", "max_tokens": 8000, "reasoning": True},
    "budget": {"thinking_budget_tokens": 2048, "max_tokens": 8000},
    "conversation": {"messages": _conversation(), "tools": (WEATHER,), "reasoning_effort": "low"},
    "urls": {"messages": _urls()},
}


def bodies() -> Iterator[tuple[str, str, str, Mapping[str, Any]]]:
    """(api, model id, variant, body) for every body relevo builds for these turns."""
    client = httpx.AsyncClient()
    for provider, models in TARGETS.values():
        settings = ProviderSettings(**provider)
        adapter = build_adapter(settings, client)
        for model_id in models:
            base = ProviderCall(
                model_id=model_id,
                messages=(Message(role="user", content="Hi"),),
                tools=(),
                max_tokens=1000,
                stream=False,
                reasoning=reasons(model_id, None),
            )
            for variant, fields in VARIANTS.items():
                call = replace(base, **fields)
                try:
                    body = adapter.request(call).body  # type: ignore[attr-defined]
                except InvalidRequest:
                    continue  # capability fit keeps such a turn off this wire
                yield _api(settings.wire, model_id), model_id, variant, body


def _api(wire: str, model_id: str) -> str:
    if wire == "vertex":
        return "vertex-anthropic" if model_id.startswith("claude-") else "vertex-google"
    return wire


def strays(value: Any, shapes: Mapping[str, Any], name: str, at: str) -> Iterator[str]:
    """Where `value` has a field, an enum value or a variant shape `name` does not."""
    shape = shapes[name]
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from strays(item, shapes, name, f"{at}[{i}]")
        return
    if not isinstance(value, dict):
        if "values" in shape and value not in shape["values"]:
            yield f"{at}: {value!r} is none of {shape['values']}"
        return
    if "by" in shape:
        variant = shape["variants"].get(value.get(shape["by"]))
        if variant is None:
            yield f"{at}.{shape['by']}: {value.get(shape['by'])!r} is no variant of {name}"
            return
        yield from strays(value, shapes, variant, at)
        return
    for key, item in value.items():
        if key not in shape["fields"]:
            yield f"{at}.{key} (not in {shape['from']})"
            continue
        enum = shape.get("enums", {}).get(key)
        if enum is not None:
            for one in item if isinstance(item, list) else [item]:
                if one not in enum:
                    yield f"{at}.{key}: {one!r} is none of {enum}"
        child = shape.get("children", {}).get(key)
        if child is not None:
            yield from strays(item, shapes, child, f"{at}.{key}")


def test_every_body_relevo_builds_is_in_its_apis_published_reference() -> None:
    checked: dict[str, int] = {}
    problems: list[str] = []
    for api, model_id, variant, body in bodies():
        reference = REFERENCE["apis"][api]
        checked[api] = checked.get(api, 0) + 1
        problems.extend(
            f"{api} {model_id} [{variant}]: {p}"
            for p in strays(body, reference["shapes"], reference["root"], "body")
        )
    assert not problems, "\n".join(problems)
    # Every API was checked, on many bodies (not skipped for lack of a builder).
    assert set(checked) == set(REFERENCE["apis"]), checked
    assert min(checked.values()) >= 10, checked


def test_the_walk_finds_a_field_and_a_value_the_reference_does_not_have() -> None:
    """The check itself can fail: a stray field, enum value or variant is named."""
    reference = REFERENCE["apis"]["gemini"]
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Hi", "thought_signature": "x"}]}],
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "EXTREME"}},
        "tools": [{"functionDeclarations": [{"name": "f", "schema": {}}]}],
    }
    found = list(strays(body, reference["shapes"], reference["root"], "body"))
    assert any("parts[0].thought_signature" in p for p in found), found
    assert any("'EXTREME'" in p for p in found), found
    assert any("functionDeclarations[0].schema" in p for p in found), found
    responses = REFERENCE["apis"]["openai-responses"]
    odd = {"input": [{"type": "reasoning_summary", "id": "x"}], "tool_choice": "any"}
    found = list(strays(odd, responses["shapes"], responses["root"], "body"))
    assert len(found) == 2, found


def test_the_reference_names_its_pinned_sources() -> None:
    for api, reference in REFERENCE["apis"].items():
        assert any(
            v in reference["reference"]
            for v in ("v3.3.1", "v0.121.0", "v2.19.0", "botocore 1.44.8")
        ), api
        for name, shape in reference["shapes"].items():
            assert shape.get("from"), (api, name)


def test_the_bedrock_reference_is_the_installed_service_models() -> None:
    """The pinned ConverseRequest table holds nothing the installed botocore lacks."""
    from botocore.loaders import create_loader

    model = create_loader().load_service_model("bedrock-runtime", "service-2")["shapes"]
    shapes = REFERENCE["apis"]["bedrock"]["shapes"]
    for name, shape in shapes.items():
        if name not in model:
            continue  # Claude's own fields, passed through additionalModelRequestFields
        assert set(shape["fields"]) <= set(model[name]["members"]), name


def _events_read() -> set[str]:
    """The event types the Responses adapter's stream decoder compares an event's type with."""
    settings = ProviderSettings(**TARGETS["openai-responses"][0])
    decoder = build_adapter(settings, httpx.AsyncClient()).decoder()
    tree = ast.parse(inspect.getsource(type(decoder)))
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id == "kind"
        ):
            for right in node.comparators:
                for constant in ast.walk(right):
                    if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
                        found.add(constant.value)
    return found


def test_the_responses_events_relevo_reads_are_the_sdks_event_types() -> None:
    read = _events_read()
    assert {"response.output_text.delta", "response.completed", "error"} <= read
    published = REFERENCE["responses_events"]["types"]
    assert read <= set(published), read - set(published)


@pytest.mark.parametrize("api", sorted(REFERENCE["apis"]))
def test_each_apis_root_shape_is_in_its_table(api: str) -> None:
    reference = REFERENCE["apis"][api]
    shapes = reference["shapes"]
    assert reference["root"] in shapes
    for shape in shapes.values():
        for child in (*shape.get("children", {}).values(), *shape.get("variants", {}).values()):
            assert child in shapes, (api, child)
