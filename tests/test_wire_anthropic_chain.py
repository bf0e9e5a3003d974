"""Turns with images, PDFs and a JSON schema, through the chain to Claude and back.

Over real HTTP to the simulator: Claude on Anthropic's API (structured outputs natively,
platform.claude.com/docs/en/build-with-claude/structured-outputs) and on Vertex AI (the
answer as a forced tool's input); an answer that does not match the schema moves the
turn to the next model; Claude's streaming refusal ends the turn as a content filter
(platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-
refusals).
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.chainkit import run, settings
from tests.cloudkit import GCP_PROJECT, simulated_service_account
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import (
    DocumentPart,
    ImagePart,
    JsonSchemaFormat,
    Message,
    Status,
    TextPart,
    TurnRequest,
)

pytestmark = pytest.mark.usefixtures("fresh_sim", "provider_key")


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 24).decode()
PDF = base64.b64encode(b"%PDF-1.7\n%%EOF\n").decode()
TICKET = JsonSchemaFormat(
    name="ticket",
    schema={
        "type": "object",
        "properties": {"priority": {"enum": ["low", "high"]}, "summary": {"type": "string"}},
        "required": ["priority", "summary"],
    },
)
CAPABLE = {"inputs": ["text", "image", "pdf"], "structured_output": True}


def two_claudes(url: str) -> tuple[Settings, str, str]:
    """A chain of two Claude models on Anthropic's API, both taking images, PDFs, schemas."""
    first, second = (f"claude-sonnet-4-5@t{uuid.uuid4().hex[:8]}" for _ in range(2))
    models = {
        "anthropic/first": claude("an", first),
        "anthropic/second": claude("an", second),
    }
    return settings(url, ("anthropic/first", "anthropic/second"), models=models), first, second


def claude(provider: str, model_id: str) -> dict[str, Any]:
    return {
        "vendor": "anthropic",
        "context_window": 200_000,
        "serve": [{"provider": provider, "model_id": model_id}],
        **CAPABLE,
    }


def ticket_turn(*, stream: bool = False) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme",
        messages=(
            Message(
                role="user",
                content=(
                    TextPart(text="File a ticket for this screenshot and the invoice."),
                    ImagePart(media_type="image/png", data=PNG),
                    DocumentPart(data=PDF, name="invoice.pdf"),
                ),
            ),
        ),
        response_format=TICKET,
        stream=stream,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_schema_turn_with_an_image_and_a_pdf_is_parsed(
    sim: Simulator, stream: bool
) -> None:
    config, first, _ = two_claudes(sim.url)
    streamed: list[str] = []
    result = await run(config, ticket_turn(stream=stream), on_text=streamed.append)
    assert result.status is Status.OK, result.error
    assert result.reply is not None
    assert result.reply.parsed == {"priority": "low", "summary": "x"}
    assert "".join(streamed) == (result.reply.text if stream else "")
    sent = sim.requests(first)[-1].body
    kinds = [block["type"] for block in sent["messages"][0]["content"]]
    assert kinds == ["text", "image", "document"]
    assert sent["output_config"]["format"]["type"] == "json_schema"


async def test_an_answer_that_misses_the_schema_moves_the_turn_to_the_next_model(
    sim: Simulator,
) -> None:
    config, first, second = two_claudes(sim.url)
    sim.set_faults(first, Fault(invalid_output=True))
    result = await run(config, ticket_turn())
    assert result.status is Status.OK, result.error
    assert (result.step, result.effective_model) == (1, "anthropic/second")
    assert [(a.model, a.error_class) for a in result.attempts] == [
        ("anthropic/first", "output_invalid"),
        ("anthropic/second", None),
    ]
    assert result.reply is not None
    assert result.reply.parsed == {"priority": "low", "summary": "x"}
    assert (sim.calls(first), sim.calls(second)) == (1, 1)


async def test_on_vertex_the_schema_travels_as_a_forced_tool_and_comes_back_parsed(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    account = simulated_service_account(f"{sim.url}/token", tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(account))
    model_id, backup = (f"claude-sonnet-4-5@t{uuid.uuid4().hex[:8]}" for _ in range(2))
    provider = {"kind": "vertex", "region": "us-east5", "project": GCP_PROJECT}
    config = load_settings(
        data={
            "chain": {"models": ["anthropic/claude", "anthropic/backup"]},
            "providers": {"vx": {**provider, "base_url": sim.url, "first_byte_timeout_s": 2}},
            "models": {
                "anthropic/claude": claude("vx", model_id),
                "anthropic/backup": claude("vx", backup),
            },
        }
    )
    result = await run(config, ticket_turn(stream=True))
    assert result.status is Status.OK, result.error
    assert result.reply is not None
    assert (result.reply.parsed, result.reply.tool_calls) == (
        {"priority": "low", "summary": "x"},
        (),
    )
    assert result.finish_reason == "stop"
    sent = sim.requests(model_id)[-1].body
    assert sent["tool_choice"] == {"type": "tool", "name": "ticket"}
    assert "output_config" not in sent
    assert sim.calls(backup) == 0


async def test_a_streaming_refusal_fails_the_turn_without_a_fallback(sim: Simulator) -> None:
    config, first, second = two_claudes(sim.url)
    sim.set_faults(first, Fault(content_filter_after_tokens=0))
    request = ticket_turn(stream=True).model_copy(update={"response_format": None})
    result = await run(config, request)
    assert (result.status, result.reason, result.finish_reason) == (
        Status.FAILED,
        "content_filter",
        "content_filter",
    )
    assert sim.calls(second) == 0
