"""Can the backup take what the turn carries and give what it asks: decided before any call.

A model that lacks an input kind, structured output or the forced tool is skipped
`incapable`, naming what it lacks; a provider whose API cannot carry the turn's
attachments is skipped the same way; a turn no model can take fails at once, uncalled.
"""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.chainkit import run, settings
from worker.simulator import Simulator
from worker.turn.capability import INCAPABLE, Fit, Unfit, fit_turn, wire_unfit
from worker.types import (
    AttemptOutcome,
    DocumentPart,
    ImagePart,
    JsonSchemaFormat,
    Message,
    NamedTool,
    Status,
    TextPart,
    Tool,
    TurnRequest,
)

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()
IMAGE = ImagePart(media_type="image/png", data=PNG)
PDF = DocumentPart(data=base64.b64encode(b"%PDF-1.7\n%%EOF").decode(), name="invoice.pdf")
SCHEMA = JsonSchemaFormat(
    name="order", json_schema={"type": "object", "properties": {"id": {"type": "string"}}}
)
SEND = Tool(name="send_invoice", side_effects=True)
LOOKUP = Tool(name="lookup_order")


def turn(*parts: Any, **fields: Any) -> TurnRequest:
    content = (TextPart(text="What does this say?"), *parts)
    return TurnRequest(
        tenant_id="acme", messages=(Message(role="user", content=content),), **fields
    )


def with_models(sim: Simulator, **alpha: Any) -> Any:
    """The chain alpha (configured as given), beta (takes everything), gamma (text only)."""
    everything = {"inputs": ["text", "image", "pdf"], "structured_output": True}
    return settings(
        sim.url,
        models={
            "openai/alpha": {**_model("openai", "oa", "alpha"), **alpha},
            "anthropic/beta": {**_model("anthropic", "an", "beta"), **everything},
        },
    )


def _model(vendor: str, provider: str, model_id: str) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "context_window": 100_000,
        "serve": [{"provider": provider, "model_id": model_id}],
    }


@pytest.mark.parametrize(
    ("parts", "fields", "lacks"),
    [
        ((IMAGE,), {}, "image input"),
        ((PDF,), {}, "PDF input"),
        ((), {"response_format": SCHEMA}, "structured output"),
        ((IMAGE, PDF), {"response_format": SCHEMA}, "image input and PDF input and structured"),
    ],
    ids=["image", "pdf", "schema", "all three"],
)
async def test_a_backup_lacking_what_the_turn_needs_is_skipped_naming_it(
    sim: Simulator, parts: tuple[Any, ...], fields: dict[str, Any], lacks: str
) -> None:
    result = await run(with_models(sim), turn(*parts, **fields))
    skipped = result.attempts[0]
    assert (skipped.model, skipped.outcome, skipped.error_class) == (
        "openai/alpha",
        AttemptOutcome.SKIPPED,
        INCAPABLE,
    )
    assert lacks in (skipped.detail or "")
    assert sim.calls("alpha") == 0
    assert sim.calls("beta") == 1  # the backup that can


async def test_a_turn_no_model_can_take_fails_at_once_and_calls_nobody(sim: Simulator) -> None:
    config = settings(sim.url, ("openai/alpha", "google/gamma"))
    result = await run(config, turn(IMAGE))
    assert result.status is Status.FAILED
    assert result.reason == INCAPABLE
    assert [a.outcome for a in result.attempts] == [AttemptOutcome.SKIPPED] * 2
    assert "image input" in (result.error or "")
    assert sim.calls() == 0


def test_a_model_declaring_the_inputs_fits() -> None:
    config_model = {"inputs": ["text", "image"], "structured_output": True}
    from tests.test_fit import model

    fit = fit_turn(turn(IMAGE, response_format=SCHEMA), model(**config_model))
    assert isinstance(fit, Fit)
    lacking = fit_turn(turn(PDF), model(**config_model))
    assert isinstance(lacking, Unfit)
    assert "PDF input" in lacking.detail


def test_read_only_degradation_never_drops_the_tool_the_turn_forces() -> None:
    from tests.test_fit import model

    read_only = model(tools="read_only", degrade_to_read_only=True)
    forced = fit_turn(
        turn(tools=(SEND, LOOKUP), tool_choice=NamedTool(name="send_invoice")), read_only
    )
    assert isinstance(forced, Unfit)
    assert "send_invoice" in forced.detail
    required = fit_turn(turn(tools=(SEND,), tool_choice="required"), read_only)
    assert isinstance(required, Unfit)
    # Forcing a tool the degradation keeps is fine.
    kept = fit_turn(
        turn(tools=(SEND, LOOKUP), tool_choice=NamedTool(name="lookup_order")), read_only
    )
    assert isinstance(kept, Fit)
    assert kept.tools == (LOOKUP,)


@pytest.mark.parametrize(
    ("kind", "part", "role", "cannot"),
    [
        ("openai", DocumentPart(url="https://example.com/a.pdf"), "user", "a document by URL"),
        ("openai", IMAGE, "tool", "an image in a tool result"),
        ("bedrock", ImagePart(url="https://example.com/a.png"), "user", "an image by URL"),
        (
            "bedrock",
            ImagePart(media_type="image/png", data=base64.b64encode(b"x" * 3_800_000).decode()),
            "user",
            "an image over 3750000 bytes",
        ),
    ],
)
def test_a_provider_whose_api_cannot_carry_an_attachment_is_unfit(
    kind: str, part: Any, role: str, cannot: str
) -> None:
    if role == "tool":
        messages = (
            Message(role="user", content="look it up"),
            Message(
                role="assistant",
                tool_calls=({"id": "c1", "name": "lookup_order", "arguments": {}},),  # type: ignore[arg-type]
            ),
            Message(role="tool", tool_call_id="c1", content=(part,)),
        )
        request = TurnRequest(tenant_id="acme", messages=messages, tools=(LOOKUP,))
    else:
        request = turn(part)
    unfit = wire_unfit(request, kind, "m")
    assert unfit is not None
    assert cannot in unfit.detail
    assert wire_unfit(turn(), kind, "m") is None  # text alone: every API carries it


async def test_a_provider_that_cannot_carry_the_turn_is_skipped_for_the_next(
    sim: Simulator,
) -> None:
    """The same model on two providers: Azure's chat API cannot take a document by URL
    either, so both skip; the backup, whose API can, answers."""
    pdf_by_url = DocumentPart(url="https://example.com/invoice.pdf")
    config = settings(
        sim.url,
        ("openai/multi", "anthropic/beta"),
        models={
            "openai/multi": {
                **_model("openai", "oa", "alpha"),
                "serve": [
                    {"provider": "oa", "model_id": "alpha"},
                    {"provider": "az", "model_id": "alpha-az"},
                ],
                "inputs": ["text", "pdf"],
            },
            "anthropic/beta": {**_model("anthropic", "an", "beta"), "inputs": ["text", "pdf"]},
        },
    )
    result = await run(config, turn(pdf_by_url))
    assert [(a.provider, a.error_class) for a in result.attempts[:2]] == [
        ("oa", INCAPABLE),
        ("az", INCAPABLE),
    ]
    assert sim.calls("alpha") == sim.calls("alpha-az") == 0
    assert result.effective_model == "anthropic/beta"


GIF = ImagePart(media_type="image/gif", data=base64.b64encode(b"GIF89a" + b"\0" * 40).decode())


async def test_an_image_format_gemini_does_not_take_skips_it_for_the_backup(
    sim: Simulator,
) -> None:
    """Gemini takes no GIF: capability fit skips it (the adapter would refuse the call,
    and a refusal there fails the turn with no fallback); the OpenAI backup answers."""
    everything = {"inputs": ["text", "image", "pdf"], "structured_output": True}
    config = settings(
        sim.url,
        ("google/gamma", "openai/alpha"),
        models={
            "google/gamma": {**_model("google", "gg", "gamma"), **everything},
            "openai/alpha": {**_model("openai", "oa", "alpha"), **everything},
        },
    )
    result = await run(config, turn(GIF))
    skipped = result.attempts[0]
    assert (skipped.model, skipped.outcome, skipped.error_class) == (
        "google/gamma",
        AttemptOutcome.SKIPPED,
        INCAPABLE,
    )
    assert "an image/gif image" in (skipped.detail or "")
    assert result.status is Status.OK
    assert result.effective_model == "openai/alpha"
    assert (sim.calls("gamma"), sim.calls("alpha")) == (0, 1)


@pytest.mark.parametrize(
    ("kind", "model_id", "part", "cannot"),
    [
        ("gemini", "gemini-2.5-flash", GIF, "an image/gif image"),
        ("vertex", "gemini-2.5-flash", GIF, "an image/gif image"),
        ("gemini", "m", ImagePart(url="https://example.com/cat.gif"), "an image/gif image"),
        ("vertex", "m", ImagePart(url="https://example.com/cat.bmp"), "an image/bmp image"),
        ("vertex", "m", ImagePart(url="https://example.com/cat"), "an image by URL that names"),
    ],
)
def test_an_image_a_wire_would_refuse_to_send_makes_it_unfit(
    kind: str, model_id: str, part: ImagePart, cannot: str
) -> None:
    unfit = wire_unfit(turn(part), kind, model_id)
    assert unfit is not None
    assert cannot in unfit.detail


@pytest.mark.parametrize(
    ("kind", "model_id", "part"),
    [
        ("gemini", "m", ImagePart(url="https://example.com/cat")),  # mimeType is optional
        ("vertex", "m", ImagePart(url="https://example.com/cat", media_type="image/png")),
        ("vertex", "m", ImagePart(url="https://example.com/cat.webp?size=2")),
        ("vertex", "claude-sonnet-4-5@20250929", GIF),  # Claude takes GIF
        ("openai", "m", GIF),
        ("bedrock", "m", GIF),
    ],
)
def test_an_image_the_wire_takes_fits(kind: str, model_id: str, part: ImagePart) -> None:
    assert wire_unfit(turn(part), kind, model_id) is None


@contextmanager
def listening() -> Iterator[tuple[int, list[object]]]:
    """A TCP port on 127.0.0.1 and the connections made to it (any at all, TLS or not)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


async def test_relevo_never_fetches_an_attachment_given_by_url(sim: Simulator) -> None:
    """Fit, the estimate for each vendor and a whole turn over real HTTP with an image and
    a PDF by URL: the host the URLs name sees no connection; the provider gets the URLs."""
    from tests.test_fit import model

    with listening() as (port, accepted):
        image_url, pdf_url = f"https://127.0.0.1:{port}/cat.png", f"https://127.0.0.1:{port}/a.pdf"
        request = turn(ImagePart(url=image_url), DocumentPart(url=pdf_url))
        everything = {"inputs": ["text", "image", "pdf"]}
        for vendor in ("openai", "anthropic", "google", "other"):
            assert isinstance(fit_turn(request, model(vendor=vendor, **everything)), Fit)
        config = settings(
            sim.url,
            ("anthropic/beta", "openai/alpha"),
            models={"anthropic/beta": {**_model("anthropic", "an", "beta"), **everything}},
        )
        result = await run(config, request)
        assert result.status is Status.OK
        # Connections are accepted in order: once this one is in, any fetch before it is.
        with socket.create_connection(("127.0.0.1", port)) as control:
            while not accepted:
                threading.Event().wait(0.01)
            assert accepted == [control.getsockname()]
    content = sim.requests("beta")[-1].body["messages"][-1]["content"]
    sources = [block["source"] for block in content if "source" in block]
    assert sources == [{"type": "url", "url": image_url}, {"type": "url", "url": pdf_url}]


def test_bad_parts_are_input_errors_naming_the_field() -> None:
    from worker.errors import InputError
    from worker.types import parse_turn_request

    cases = {
        "data and url": {
            "type": "image",
            "media_type": "image/png",
            "data": PNG,
            "url": "https://a.b/c.png",
        },
        "no media type": {"type": "image", "data": PNG},
        "plain http": {"type": "image", "url": "http://example.com/a.png"},
        "not base64": {"type": "document", "data": "not base64!"},
    }
    for case, part in cases.items():
        payload = {"tenant_id": "acme", "messages": [{"role": "user", "content": [part]}]}
        with pytest.raises(InputError, match=r"messages\.0\.content") as raised:
            parse_turn_request(payload)
        assert PNG not in str(raised.value), case
    assistant_image = {
        "tenant_id": "acme",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "image", "media_type": "image/png", "data": PNG}],
            },
            {"role": "user", "content": "and?"},
        ],
    }
    with pytest.raises(InputError, match="only user and tool messages carry images"):
        parse_turn_request(assistant_image)
    unknown_tool = {
        "tenant_id": "acme",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "lookup_order"}],
        "tool_choice": {"name": "send_invoice"},
    }
    with pytest.raises(InputError, match="tool_choice names 'send_invoice'"):
        parse_turn_request(unknown_tool)
    not_a_schema = {
        "tenant_id": "acme",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "name": "x", "schema": {"type": "objekt"}},
    }
    with pytest.raises(InputError, match="response_format"):
        parse_turn_request(not_a_schema)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("temperature", 3, "less than or equal to 2"),
        ("temperature", -0.5, "greater than or equal to 0"),
        ("top_p", 0, "greater than 0"),
        ("top_p", 1.5, "less than or equal to 1"),
        ("stop", ["a", "b", "c", "d", "e"], "at most 4 items"),
        ("stop", [], "at least 1 item"),
        ("seed", 2**64, "less than 9223372036854775808"),
        ("seed", 1.5, "valid integer"),
        ("reasoning_effort", "max", "'low', 'medium' or 'high'"),
        ("parallel_tool_calls", "maybe", "valid boolean"),
        ("tool_choice", "sometimes", "'auto', 'none' or 'required'"),
        ("response_format", {"type": "xml"}, "'json_schema', 'json_object'"),
    ],
)
def test_a_bad_option_is_an_input_error_naming_its_field(field: str, value: Any, says: str) -> None:
    from worker.errors import InputError
    from worker.types import parse_turn_request

    payload = {"tenant_id": "acme", "messages": [{"role": "user", "content": "hi"}]}
    if field == "parallel_tool_calls":
        payload["tools"] = [{"name": "lookup_order"}]  # set without tools is its own error
    with pytest.raises(InputError) as raised:
        parse_turn_request({**payload, field: value})
    message = str(raised.value)
    assert message.startswith((f"{field}:", f"{field}.")), message
    assert says in message


@pytest.mark.parametrize(
    ("kind", "model_id", "fields", "cannot"),
    [
        ("anthropic", "claude-x", {"temperature": 1.5}, "a temperature over 1"),
        ("anthropic", "claude-x", {"temperature": 0.5, "top_p": 0.9}, "both temperature and top_p"),
        ("vertex", "claude-x@1", {"temperature": 1.5}, "a temperature over 1"),
        ("bedrock", "m", {"temperature": 1.5}, "a temperature over 1"),
        ("bedrock", "m", {"tools": (LOOKUP,), "tool_choice": "none"}, 'tool_choice "none"'),
    ],
)
def test_a_field_value_an_api_has_no_room_for_makes_it_unfit(
    kind: str, model_id: str, fields: dict[str, Any], cannot: str
) -> None:
    unfit = wire_unfit(turn(**fields), kind, model_id)
    assert unfit is not None
    assert cannot in unfit.detail
    # Gemini on Vertex has the whole range, and both fields.
    assert wire_unfit(turn(**fields), "vertex", "gemini-x") is None or kind == "bedrock"


def test_claude_on_vertex_takes_no_url_source_where_gemini_on_vertex_may() -> None:
    by_url = turn(ImagePart(url="https://example.com/a.png"))
    unfit = wire_unfit(by_url, "vertex", "claude-sonnet-4-5@20250929")
    assert unfit is not None
    assert "an image by URL" in unfit.detail


def test_temperature_with_top_p_is_its_own_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row that refuses both sampling fields needs no temperature range to say so."""
    from worker.adapters import wire_limits

    rows = dict(wire_limits.WIRE_LIMITS)
    rows["custom"] = wire_limits.WireLimits(temperature_with_top_p=False)
    monkeypatch.setattr(wire_limits, "WIRE_LIMITS", rows)
    unfit = wire_unfit(turn(temperature=0.5, top_p=0.9), "custom", "m")
    assert unfit is not None
    assert "both temperature and top_p" in unfit.detail
