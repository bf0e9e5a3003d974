"""Vertex AI (Gemini and Claude) against the simulator, signed in by google-auth's real flow.

A service-account file whose `token_uri` is the simulator's token endpoint stands in for
application-default credentials, so google-auth signs JWTs, posts them and parses the
tokens exactly as it would against Google; the simulator checks each Bearer token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tests.chainkit import fault
from tests.cloudkit import GCP_PROJECT, simulated_service_account
from tests.netkit import free_port
from tests.test_adapters import CONVERSATION, WEATHER, ask, collect, drain_into, expected_body
from worker.adapters import (
    Completion,
    ProviderCall,
    TextDelta,
    VertexAdapter,
    build_adapter,
    make_client,
)
from worker.adapters.base import Event
from worker.adapters.vertex import VERTEX_ANTHROPIC_VERSION, publisher
from worker.errors import (
    AuthFailed,
    ConfigError,
    ConnectionFailed,
    ContextTooLong,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    ProviderError,
    RateLimited,
    ServerError,
)
from worker.observability.redact import redact_text
from worker.settings import ProviderSettings, load_settings
from worker.simulator import Fault, Simulator
from worker.simulator.catalogue import canned
from worker.simulator.oauth import TOKEN_ENDPOINT
from worker.turn.chain import Chain
from worker.turn.policy import Decision, rule_for
from worker.types import Message, Status, TurnRequest

PROJECT = GCP_PROJECT
REGION = "us-east5"
TOKEN_SHAPE = "ya29.sim-"
PUBLISHERS = ("google", "anthropic")


@pytest.fixture(scope="module")
def service_account(sim: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A service-account key file whose token endpoint is the simulator's."""
    return simulated_service_account(f"{sim.url}/token", tmp_path_factory.mktemp("gcp"))


@pytest.fixture(autouse=True)
def credentials(
    service_account: Path, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account))
    yield
    sim.set_token_lifetime(3600)
    sim.set_faults(TOKEN_ENDPOINT)


def vertex(base: str, **overrides: Any) -> ProviderSettings:
    return ProviderSettings(
        kind="vertex", region=REGION, project=PROJECT, base_url=base, **overrides
    )


def model_of(chosen: str) -> str:
    """A model id of `chosen` publisher no other test uses."""
    tag = uuid.uuid4().hex[:8]
    return f"claude-t{tag}@20250514" if chosen == "anthropic" else f"gemini-t{tag}"


def token_calls(sim: Simulator) -> int:
    return sim.calls(TOKEN_ENDPOINT, "ok")


# --- configuration ------------------------------------------------------------------


def config(provider: dict[str, Any]) -> dict[str, Any]:
    serve = [{"provider": "vx", "model_id": "gemini-2.5-pro"}]
    model = {"vendor": "google", "context_window": 1_000_000, "serve": serve}
    return {
        "chain": {"models": ["google/a", "google/b"]},
        "providers": {"vx": provider},
        "models": {"google/a": model, "google/b": model},
    }


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("us-east5", "https://us-east5-aiplatform.googleapis.com"),
        ("global", "https://aiplatform.googleapis.com"),
    ],
)
def test_the_endpoint_follows_the_region_unless_base_url_overrides_it(
    region: str, endpoint: str
) -> None:
    settings = load_settings(data=config({"kind": "vertex", "region": region, "project": PROJECT}))
    assert settings.providers["vx"].base_url == endpoint
    url = "http://127.0.0.1:9"
    provider = {"kind": "vertex", "region": region, "project": PROJECT, "base_url": url}
    assert load_settings(data=config(provider)).providers["vx"].base_url == url


@pytest.mark.parametrize(
    ("provider", "named"),
    [
        ({"project": PROJECT}, "providers.vx: region: needed"),
        ({"region": REGION}, "providers.vx: project: needed"),
        ({"region": "US East", "project": PROJECT}, "providers.vx.region"),
        ({"region": REGION, "project": "My Project"}, "providers.vx.project"),
        ({"region": REGION, "project": PROJECT, "api_key_env": "K"}, "api_key_env"),
    ],
)
def test_a_vertex_provider_without_what_it_needs_is_a_config_error(
    provider: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(data=config({"kind": "vertex", **provider}))


def test_without_google_auth_installed_a_vertex_config_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)
    with pytest.raises(ConfigError, match=r"pip install 'relevo\[vertex\]'"):
        load_settings(data=config({"kind": "vertex", "region": REGION, "project": PROJECT}))


def test_build_adapter_gives_a_vertex_provider_the_vertex_adapter() -> None:
    assert type(build_adapter(vertex("http://127.0.0.1:9"), make_client())) is VertexAdapter


def test_the_model_id_chooses_the_publisher() -> None:
    assert publisher("claude-sonnet-4@20250514") == "anthropic"
    assert publisher("claude-3-5-haiku@20241022") == "anthropic"
    assert publisher("gemini-2.5-pro") == "google"


# --- answers ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("chosen", PUBLISHERS)
async def test_each_publisher_answers_with_text_usage_and_a_finish_reason(
    chosen: str, stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of(chosen)
    events = await collect(VertexAdapter(vertex(sim.url), client).send(ask(model, stream=stream)))
    *deltas, done = events
    assert isinstance(done, Completion)
    assert done.text.startswith(f"Answer from {model}.")
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == (
        done.text if stream else ""
    )
    assert done.usage.input_tokens > 0
    assert done.usage.output_tokens == 8
    assert done.finish_reason == "stop"
    (record,) = sim.requests(model)
    method = {
        ("google", False): "generateContent",
        ("google", True): "streamGenerateContent",
        ("anthropic", False): "rawPredict",
        ("anthropic", True): "streamRawPredict",
    }[(chosen, stream)]
    base = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/{chosen}/models/{model}"
    assert record.path == f"{base}:{method}"
    assert record.query == ({"alt": "sse"} if stream and chosen == "google" else {})
    assert record.auth_header == "authorization"
    assert record.outcome == "ok"


@pytest.mark.parametrize("chosen", PUBLISHERS)
async def test_a_conversation_with_tools_is_the_publishers_own_body(
    chosen: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of(chosen)
    call = ProviderCall(model, CONVERSATION, (WEATHER,), max_tokens=100, stream=False)
    await collect(VertexAdapter(vertex(sim.url), client).send(call))
    body = dict(sim.requests(model)[-1].body)
    if chosen == "google":
        assert body == expected_body("gemini", model)
    else:
        expected = {**expected_body("anthropic", model), "anthropic_version": "vertex-2023-10-16"}
        del expected["model"]
        assert body == expected
        assert VERTEX_ANTHROPIC_VERSION == "vertex-2023-10-16"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("chosen", PUBLISHERS)
async def test_a_tool_call_comes_back_and_its_result_goes_out(
    chosen: str, stream: bool, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of(chosen)
    adapter = VertexAdapter(vertex(sim.url), client)
    sim.set_faults(model, Fault(reply_tool="get_weather", tool_args={"city": "Paris"}, times=1))
    done = (await collect(adapter.send(ask(model, stream=stream, tools=(WEATHER,)))))[-1]
    assert isinstance(done, Completion)
    (tool_call,) = done.tool_calls
    assert (tool_call.name, tool_call.arguments) == ("get_weather", {"city": "Paris"})
    assert done.finish_reason == "tool_calls"
    messages = (
        Message(role="user", content="Weather in Paris?"),
        Message(role="assistant", content="", tool_calls=done.tool_calls),
        Message(role="tool", tool_call_id=tool_call.id, content="18C"),
    )
    call = ProviderCall(model, messages, (WEATHER,), max_tokens=100, stream=stream)
    answer = (await collect(adapter.send(call)))[-1]
    assert isinstance(answer, Completion)
    assert answer.text.startswith(f"Answer from {model}.")
    sent = json.dumps(sim.requests(model)[-1].body)
    assert '"18C"' in sent
    assert ("tool_use_id" if chosen == "anthropic" else "functionResponse") in sent


# --- errors: Vertex's own, and Claude's ---------------------------------------------

ERRORS = [
    ("google", "resource_exhausted", RateLimited, Decision.WAIT_OR_NEXT),
    ("anthropic", "claude_request_quota", RateLimited, Decision.WAIT_OR_NEXT),
    ("anthropic", "claude_token_quota", RateLimited, Decision.WAIT_OR_NEXT),
    ("google", "model_not_found", ModelNotFound, Decision.NEXT),
    ("anthropic", "model_not_allowed", ModelNotFound, Decision.NEXT),
    ("google", "permission_denied", AuthFailed, Decision.FAIL),
    ("anthropic", "access_token_expired", AuthFailed, Decision.FAIL),
    ("google", "invalid_argument", InvalidRequest, Decision.FAIL),
    ("google", "context_too_long", ContextTooLong, Decision.LARGER_WINDOW),
    ("google", "context_too_long_unable", ContextTooLong, Decision.LARGER_WINDOW),
    ("anthropic", "claude_prompt_too_long", ContextTooLong, Decision.LARGER_WINDOW),
    ("anthropic", "claude_invalid_request", InvalidRequest, Decision.FAIL),
    ("google", "internal", ServerError, Decision.RETRY_THEN_NEXT),
    ("anthropic", "unavailable", Overloaded, Decision.NEXT),
    ("google", "deadline_exceeded", ServerError, Decision.RETRY_THEN_NEXT),
    ("anthropic", "claude_overloaded", Overloaded, Decision.NEXT),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    ("chosen", "name", "expected", "decision"), ERRORS, ids=[e[1] for e in ERRORS]
)
async def test_an_error_response_is_classified_and_decided(  # noqa: PLR0917 - parameters
    chosen: str,
    name: str,
    expected: type[ProviderError],
    decision: Decision,
    stream: bool,
    sim: Simulator,
    client: httpx.AsyncClient,
) -> None:
    model = model_of(chosen)
    sim.set_faults(model, fault("vertex", name, times=1))
    with pytest.raises(ProviderError) as caught:
        await collect(VertexAdapter(vertex(sim.url), client).send(ask(model, stream=stream)))
    assert type(caught.value) is expected
    assert caught.value.status == canned("vertex", name).status
    assert rule_for(caught.value).decision is decision


async def test_a_quota_429_carries_the_retry_delay(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of("google")
    sim.set_faults(model, fault("vertex", "resource_exhausted", times=1, retry_after_s=0.25))
    with pytest.raises(RateLimited) as caught:
        await collect(VertexAdapter(vertex(sim.url), client).send(ask(model, stream=False)))
    assert caught.value.retry_after_s == 0.25


@pytest.mark.parametrize("chosen", PUBLISHERS)
async def test_an_error_mid_stream_comes_after_the_content_sent(
    chosen: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of(chosen)
    sim.set_faults(model, Fault(error_after_tokens=2, times=1))
    events: list[Event] = []
    with pytest.raises(Overloaded):
        await drain_into(
            events, VertexAdapter(vertex(sim.url), client).send(ask(model, stream=True))
        )
    assert [type(e) for e in events] == [TextDelta, TextDelta]


# --- the token ----------------------------------------------------------------------


async def test_concurrent_calls_share_one_refresh(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    sim.set_faults(TOKEN_ENDPOINT, Fault(latency_s=0.2))
    adapter = VertexAdapter(vertex(sim.url), client)
    before = token_calls(sim)
    models = [model_of(chosen) for chosen in PUBLISHERS * 10]
    results = await asyncio.gather(*(collect(adapter.send(ask(m, stream=False))) for m in models))
    assert all(isinstance(events[-1], Completion) for events in results)
    assert token_calls(sim) - before == 1


async def test_the_token_is_refreshed_before_it_expires(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    """Tokens good for 301 s are past the 300 s margin after a second: refreshed, not sent."""
    sim.set_token_lifetime(301)
    adapter = VertexAdapter(vertex(sim.url), client)
    model = model_of("google")
    before = token_calls(sim)
    await collect(adapter.send(ask(model, stream=False)))
    await collect(adapter.send(ask(model, stream=False)))
    assert token_calls(sim) - before == 1
    await asyncio.sleep(1.1)
    await collect(adapter.send(ask(model, stream=True)))
    assert token_calls(sim) - before == 2
    assert [r.outcome for r in sim.requests(model)] == ["ok", "ok", "ok"]


async def test_a_refused_token_is_replaced_on_the_next_call(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    adapter = VertexAdapter(vertex(sim.url), client)
    model = model_of("anthropic")
    await collect(adapter.send(ask(model, stream=False)))
    before = token_calls(sim)
    sim.set_faults(model, fault("vertex", "access_token_expired", times=1))
    with pytest.raises(AuthFailed):
        await collect(adapter.send(ask(model, stream=False)))
    await collect(adapter.send(ask(model, stream=False)))
    assert token_calls(sim) - before == 1


def jwt_grant() -> dict[str, str]:
    """A JWT-bearer grant shaped as google-auth sends it (the simulator does not verify it)."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {
        "aud": "https://oauth2.googleapis.com/token",
        "scope": "https://www.googleapis.com/auth/cloud-platform",
    }
    assertion = f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"
    return {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}


def test_the_simulator_refuses_missing_unknown_and_expired_tokens(sim: Simulator) -> None:
    model = model_of("google")
    path = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/{model}"
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    sim.set_token_lifetime(0.2)
    with httpx.Client(base_url=sim.url, timeout=5) as http:
        assert http.post("/token", data={"grant_type": "password"}).status_code == 400
        token = http.post("/token", data=jwt_grant()).json()["access_token"]
        assert token.startswith(TOKEN_SHAPE)

        def call(authorization: str | None) -> httpx.Response:
            headers = {"authorization": authorization} if authorization else {}
            return http.post(f"{path}:generateContent", json=body, headers=headers)

        assert call(f"Bearer {token}").status_code == 200
        missing, unknown = call(None), call("Bearer ya29.sim-unknown")
        time.sleep(0.25)
        expired = call(f"Bearer {token}")
    reasons = [
        (r.status_code, r.json()["error"].get("details", [{}])[0].get("reason"))
        for r in (missing, unknown, expired)
    ]
    assert reasons == [(401, "CREDENTIALS_MISSING"), (401, None), (401, "ACCESS_TOKEN_EXPIRED")]
    assert [r.outcome for r in sim.requests(model)] == ["ok", "error", "error", "error"]


async def test_a_refused_service_account_is_auth_failed(
    sim: Simulator, client: httpx.AsyncClient
) -> None:
    invalid = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
    sim.set_faults(TOKEN_ENDPOINT, Fault(status=400, body=invalid, times=1))
    with pytest.raises(AuthFailed, match="invalid_grant") as caught:
        await collect(
            VertexAdapter(vertex(sim.url), client).send(ask(model_of("google"), stream=False))
        )
    assert rule_for(caught.value).decision is Decision.FAIL


async def test_no_credentials_is_auth_failed(
    sim: Simulator, client: httpx.AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    with pytest.raises(AuthFailed, match="application-default credentials"):
        await collect(VertexAdapter(vertex(sim.url), client).send(ask("gemini-x", stream=False)))


async def test_an_unreachable_token_endpoint_is_a_connection_failure(
    service_account: Path,
    tmp_path: Path,
    client: httpx.AsyncClient,
    sim: Simulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = json.loads(service_account.read_bytes())  # noqa: ASYNC240 - a small local file
    info["token_uri"] = f"http://127.0.0.1:{free_port()}/token"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(json.dumps(info).encode())
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(elsewhere))
    with pytest.raises(ConnectionFailed, match="token endpoint"):
        await collect(VertexAdapter(vertex(sim.url), client).send(ask("gemini-x", stream=False)))


@pytest.mark.parametrize("chosen", PUBLISHERS)
async def test_an_echoed_token_never_appears_in_the_error(
    chosen: str, sim: Simulator, client: httpx.AsyncClient
) -> None:
    model = model_of(chosen)
    sim.set_faults(model, Fault(status=401, echo_key=True, times=1))
    with pytest.raises(AuthFailed) as caught:
        await collect(VertexAdapter(vertex(sim.url), client).send(ask(model, stream=False)))
    assert TOKEN_SHAPE not in str(caught.value)
    assert TOKEN_SHAPE not in repr(caught.value.args)
    assert "[redacted]" in str(caught.value)
    assert TOKEN_SHAPE not in repr(sim.requests(model))


def test_a_google_access_token_is_redacted_wherever_it_appears() -> None:
    assert "ya29" not in redact_text("token=ya29.a0AZYkNZhxkOOeKm1TTYwm1Y404v5 expired")
    assert "ya29" not in redact_text("refused ya29.a0AZYkNZhxkOOeKm1TTYwm1Y404v5")


# --- in the chain -------------------------------------------------------------------


async def test_a_claude_turn_moves_to_gemini_on_vertex_and_the_token_stays_out(
    sim: Simulator,
) -> None:
    claude, gemini = model_of("anthropic"), model_of("google")
    provider = {
        "kind": "vertex",
        "region": REGION,
        "project": PROJECT,
        "base_url": sim.url,
        "first_byte_timeout_s": 2,
    }
    settings = load_settings(
        data={
            "chain": {"models": ["anthropic/claude", "google/gemini"]},
            "providers": {"vx": provider},
            "models": {
                f"{vendor}/{name}": {
                    "vendor": vendor,
                    "context_window": 200_000,
                    "serve": [{"provider": "vx", "model_id": model_id}],
                }
                for vendor, name, model_id in (
                    ("anthropic", "claude", claude),
                    ("google", "gemini", gemini),
                )
            },
        }
    )
    sim.set_faults(claude, fault("vertex", "claude_overloaded", times=1))
    request = TurnRequest(tenant_id="acme", messages=(Message(role="user", content="Hi"),))
    with capture_logs() as logs:
        async with make_client() as http:
            result = await Chain.from_settings(settings, http).run(request)
    assert result.status is Status.OK
    assert (result.step, result.effective_model, result.effective_provider) == (
        1,
        "google/gemini",
        "vx",
    )
    assert [a.error_class for a in result.attempts] == ["overloaded", None]
    assert result.reply is not None
    assert result.reply.text.startswith(f"Answer from {gemini}.")
    assert TOKEN_SHAPE not in result.model_dump_json()
    assert TOKEN_SHAPE not in repr(logs)


# --- the simulated wire -------------------------------------------------------------


@pytest.fixture
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        token = client.post("/token", data=jwt_grant()).json()["access_token"]
        client.headers["authorization"] = f"Bearer {token}"
        yield client


def route(chosen: str, model: str, method: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/{chosen}/models/{model}:{method}"


def test_every_vertex_catalogue_error_goes_out_as_given(sim: Simulator, http: httpx.Client) -> None:
    from worker.simulator.catalogue import NAMES, STREAM_NAMES, canned_stream

    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    for name in NAMES["vertex"]:
        error = canned("vertex", name)
        sim.set_faults("gemini-c", fault("vertex", name))
        response = http.post(route("google", "gemini-c", "generateContent"), json=body)
        assert response.status_code == error.status, name
        if isinstance(error.body, dict | list):
            assert response.json() == error.body, name
        else:
            assert response.content == error.body_bytes(), name
    for name in STREAM_NAMES["vertex"]:
        payload = canned_stream("vertex", name)
        sim.set_faults("gemini-c", Fault(error_after_tokens=1, stream_error=payload))
        method = "streamGenerateContent?alt=sse"
        text = http.post(route("google", "gemini-c", method), json=body).text
        assert json.dumps(payload, separators=(",", ":")) in text, name
    sim.set_faults("gemini-c")


def test_claude_on_vertex_takes_the_model_from_the_url_only(http: httpx.Client) -> None:
    body: dict[str, Any] = {"max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]}
    path = route("anthropic", "claude-c@1", "rawPredict")
    assert http.post(path, json=body).status_code == 400  # no anthropic_version
    versioned = {**body, "anthropic_version": VERTEX_ANTHROPIC_VERSION}
    assert http.post(path, json={**versioned, "model": "claude-c@1"}).status_code == 400
    reply = http.post(path, json=versioned)
    assert reply.status_code == 200
    assert reply.json()["id"].startswith("msg_vrtx_")
    assert http.post(route("anthropic", "claude-c@1", "predict"), json=versioned).status_code == 404


def test_the_token_lifetime_is_set_over_the_admin_api(sim: Simulator) -> None:
    from worker.simulator import SimulatorClient

    with SimulatorClient(sim.url) as control, httpx.Client(base_url=sim.url) as http:
        control.set_token_lifetime(42)
        assert http.post("/token", data=jwt_grant()).json()["expires_in"] == 42
        assert http.put("/_sim/tokens", json={"lifetime_s": 0}).status_code == 422
