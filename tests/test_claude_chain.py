"""examples/claude.toml: the same Claude on Anthropic, Bedrock and Vertex AI, then GPT-5.

An Anthropic outage played over real HTTP against the simulator: the turn is answered by
the same model on Bedrock, and `step` and `effective_provider` say so."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cloudkit import simulated_service_account, use_simulated_aws
from worker.adapters import make_client
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Message, Status, TurnRequest, TurnResult

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "claude.toml"
CLAUDE = "anthropic/claude-sonnet-4-5"
ON = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5"}
# The simulator's own route for each provider kind.
ROUTES = {"anthropic": "", "openai": "/v1", "vertex": "", "bedrock": "/bedrock-runtime/{region}"}


@pytest.fixture
def example(sim: Simulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Settings]:
    """examples/claude.toml as written, every provider pointed at the simulator."""
    raw: dict[str, Any] = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    for provider in raw["providers"].values():
        provider["base_url"] = sim.url + ROUTES[provider["kind"]].format(**provider)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789abcdef")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    use_simulated_aws(monkeypatch, tmp_path)
    account = simulated_service_account(f"{sim.url}/token", tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(account))
    yield load_settings(data=raw)
    sim.clear()


def serving(settings: Settings, provider: str) -> str:
    """The model id under which `provider` serves Claude in the example."""
    (model_id,) = (s.model_id for s in settings.models[CLAUDE].serve if s.provider == provider)
    return model_id


async def turn(settings: Settings, *, stream: bool) -> TurnResult:
    request = TurnRequest(
        tenant_id="acme",
        messages=(
            Message(role="system", content="You are terse."),
            Message(role="user", content="Is the build green?"),
        ),
        stream=stream,
    )
    async with make_client() as http:
        return await Chain.from_settings(settings, http).run(request)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_outage_is_answered_by_the_same_claude_on_bedrock(
    sim: Simulator, example: Settings, stream: bool
) -> None:
    sim.set_faults(ON["anthropic"], Fault(status=500))
    bedrock, vertex = serving(example, "bedrock"), serving(example, "vertex")
    before = {model: sim.calls(model) for model in (bedrock, vertex, ON["openai"])}
    result = await turn(example, stream=stream)
    assert (result.status, result.effective_model, result.step) == (Status.OK, CLAUDE, 0)
    assert result.effective_provider == "bedrock"
    assert [(a.provider, a.outcome, a.http_status) for a in result.attempts] == [
        ("anthropic", "error", 500),
        ("anthropic", "error", 500),  # one retry on the same provider, then failover
        ("bedrock", "ok", 200),
    ]
    assert result.reply is not None
    assert result.reply.text.startswith(f"Answer from {bedrock}.")
    # The same conversation went to Bedrock, in Converse's own shape.
    sent = sim.requests(bedrock)[-1]
    assert sent.stream is stream
    assert sent.body["system"] == [{"text": "You are terse."}]
    assert sent.body["messages"] == [{"role": "user", "content": [{"text": "Is the build green?"}]}]
    after = {model: sim.calls(model) for model in before}
    assert {model: after[model] - before[model] for model in before} == {
        bedrock: 1,
        vertex: 0,
        ON["openai"]: 0,
    }


async def test_with_bedrock_down_too_claude_answers_on_vertex(
    sim: Simulator, example: Settings
) -> None:
    sim.set_faults(ON["anthropic"], Fault(status=529))
    sim.set_faults(serving(example, "bedrock"), Fault(status=503))
    result = await turn(example, stream=False)
    assert (result.status, result.effective_model, result.step) == (Status.OK, CLAUDE, 0)
    assert result.effective_provider == "vertex"
    assert [a.provider for a in result.attempts] == ["anthropic", "bedrock", "vertex"]


async def test_only_claude_down_everywhere_moves_to_another_model(
    sim: Simulator, example: Settings
) -> None:
    for provider in ("anthropic", "bedrock", "vertex"):
        sim.set_faults(serving(example, provider), Fault(status=529))
    result = await turn(example, stream=False)
    assert (result.status, result.effective_model, result.step) == (Status.OK, "openai/gpt-5", 1)
    assert result.effective_provider == "openai"
