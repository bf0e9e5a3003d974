"""The simulated providers, spoken to over real HTTP on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import worker.simulator
from worker.simulator import CallOutcome, Fault, RequestRecord, Simulator, SimulatorClient

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TEXT_8 = "Answer from {model}. alpha bravo charlie delta echo"
SECRET = "sk-simulated-secret-0123456789"

Event = tuple[str | None, Any]


@pytest.fixture(scope="module")
def running() -> Iterator[Simulator]:
    with Simulator(seed=7) as sim:
        yield sim


@pytest.fixture
def sim(running: Simulator) -> Simulator:
    running.reset()
    return running


@pytest.fixture
def http(running: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=running.url, timeout=5) as client:
        yield client


# --- request builders, one per API ------------------------------------------------------------


def openai_call(model: str, *, stream: bool = False, **extra: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {"model": model, "messages": MESSAGES, "stream": stream, **extra}


def anthropic_call(model: str, *, stream: bool = False, **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {"model": model, "max_tokens": 256, "messages": MESSAGES, "stream": stream, **extra}
    return "/v1/messages", body


def gemini_call(model: str, *, stream: bool = False, **extra: Any) -> tuple[str, dict[str, Any]]:
    contents = [{"role": "user", "parts": [{"text": MESSAGES[0]["content"]}]}]
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"/v1beta/models/{model}:{method}", {"contents": contents, **extra}


CALLS: dict[str, Callable[..., tuple[str, dict[str, Any]]]] = {
    "openai": openai_call,
    "anthropic": anthropic_call,
    "gemini": gemini_call,
}
AUTH = {
    "openai": {"Authorization": f"Bearer {SECRET}"},
    "anthropic": {"x-api-key": SECRET, "anthropic-version": "2023-06-01"},
    "gemini": {"x-goog-api-key": SECRET},
}


def post(http: httpx.Client, api: str, model: str, **kw: Any) -> httpx.Response:
    path, body = CALLS[api](model, **kw)
    return http.post(path, json=body, headers=AUTH[api])


def parse_sse(raw: str) -> list[Event]:
    """(event name, parsed data) per SSE frame; CRLF or LF framing."""
    events: list[Event] = []
    for frame in raw.replace("\r\n", "\n").split("\n\n"):
        if not frame.strip():
            continue
        name = None
        data = []
        for line in frame.split("\n"):
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                data.append(line.removeprefix("data:").strip())
        text = "\n".join(data)
        events.append((name, text if text == "[DONE]" else json.loads(text)))
    return events


def stream(http: httpx.Client, api: str, model: str, **kw: Any) -> list[Event]:
    path, body = CALLS[api](model, stream=True, **kw)
    with http.stream("POST", path, json=body, headers=AUTH[api]) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return parse_sse(response.read().decode())


def wait_for(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def read_until_silent(response: httpx.Response) -> str:
    """Everything a stream sent before it went silent; fails if it ended instead."""
    received = b""
    try:
        for chunk in response.iter_raw():
            received += chunk
    except httpx.ReadTimeout:
        return received.decode()
    pytest.fail("the stream ended instead of going silent")


def openai_text(events: list[Event]) -> str:
    return "".join(
        d["choices"][0]["delta"].get("content") or ""
        for _, d in events
        if isinstance(d, dict) and d.get("choices")
    )


def anthropic_text(events: list[Event]) -> str:
    return "".join(
        d["delta"]["text"]
        for _, d in events
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "text_delta"
    )


def gemini_text(events: list[Event]) -> str:
    return "".join(
        p.get("text", "") for _, d in events for p in d["candidates"][0]["content"]["parts"]
    )


# --- OpenAI -----------------------------------------------------------------------------------


def test_openai_reply_is_a_chat_completion_with_usage(sim: Simulator, http: httpx.Client) -> None:
    body = post(http, "openai", "gpt-a").json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": TEXT_8.format(model="gpt-a"),
        "refusal": None,
    }
    assert choice["finish_reason"] == "stop"
    prompt = len(json.dumps(MESSAGES)) // 4
    assert body["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": 8,
        "total_tokens": prompt + 8,
    }


def test_openai_stream_sends_role_deltas_finish_usage_then_done(
    sim: Simulator, http: httpx.Client
) -> None:
    events = stream(http, "openai", "gpt-a", stream_options={"include_usage": True})
    chunks = [d for _, d in events[:-1]]
    assert events[-1] == (None, "[DONE]")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert openai_text(events) == TEXT_8.format(model="gpt-a")
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_openai_stream_without_include_usage_has_no_usage(
    sim: Simulator, http: httpx.Client
) -> None:
    events = stream(http, "openai", "gpt-a")
    assert all("usage" not in d for _, d in events[:-1])
    assert events[-2][1]["choices"][0]["finish_reason"] == "stop"


def test_openai_tool_call_arguments_are_a_json_string(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("gpt-t", Fault(reply_tool="get_weather", tool_args={"city": "Paris"}))
    message = post(http, "openai", "gpt-t").json()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["message"]["content"] is None
    (call,) = message["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_openai_streamed_tool_call_reassembles_by_index(sim: Simulator, http: httpx.Client) -> None:
    args = {"city": "Paris", "units": "metric", "days": 3}
    sim.set_faults("gpt-t", Fault(reply_tool="forecast", tool_args=args, tool_with_text=True))
    events = stream(http, "openai", "gpt-t")
    name, arguments, ids = "", "", set()
    for _, d in events[:-1]:
        for call in d["choices"][0]["delta"].get("tool_calls", []):
            assert call["index"] == 0
            ids.add(call.get("id"))
            name += call.get("function", {}).get("name", "")
            arguments += call["function"]["arguments"]
    assert name == "forecast"
    assert json.loads(arguments) == args
    assert len(ids - {None}) == 1
    assert openai_text(events) == TEXT_8.format(model="gpt-t")
    assert events[-2][1]["choices"][0]["finish_reason"] == "tool_calls"


def test_azure_route_takes_the_deployment_as_model_and_records_api_key_header(
    sim: Simulator, http: httpx.Client
) -> None:
    response = http.post(
        "/openai/deployments/my-gpt/chat/completions",
        params={"api-version": "2024-10-21"},
        json={"messages": MESSAGES},
        headers={"api-key": SECRET},
    )
    assert response.status_code == 200
    assert response.json()["model"] == "my-gpt"
    (record,) = sim.requests("my-gpt")
    assert (record.api, record.auth_header) == ("azure", "api-key")
    assert record.query == {"api-version": "2024-10-21"}


# --- Anthropic --------------------------------------------------------------------------------


def test_anthropic_reply_is_a_message_with_blocks(sim: Simulator, http: httpx.Client) -> None:
    body = post(http, "anthropic", "claude-a").json()
    assert (body["type"], body["role"], body["stop_reason"]) == ("message", "assistant", "end_turn")
    assert body["content"] == [{"type": "text", "text": TEXT_8.format(model="claude-a")}]
    assert body["usage"]["output_tokens"] == 8
    assert body["usage"]["input_tokens"] == len(json.dumps([None, MESSAGES])) // 4


def test_anthropic_stream_follows_the_event_sequence(sim: Simulator, http: httpx.Client) -> None:
    events = stream(http, "anthropic", "claude-a")
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[3:11] == ["content_block_delta"] * 8
    assert names[11:] == ["content_block_stop", "message_delta", "message_stop"]
    assert anthropic_text(events) == TEXT_8.format(model="claude-a")
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"] == {"output_tokens": 8}


def test_anthropic_streamed_tool_use_follows_the_text_block(
    sim: Simulator, http: httpx.Client
) -> None:
    args = {"query": "weather", "limit": 5}
    sim.set_faults(
        "claude-t", Fault(reply_tool="search", tool_args=args, tool_with_text=True, tokens=2)
    )
    events = stream(http, "anthropic", "claude-t")
    starts = [d for _, d in events if d["type"] == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    tool = starts[1]["content_block"]
    assert (tool["name"], tool["input"], starts[1]["index"]) == ("search", {}, 1)
    partial = "".join(
        d["delta"]["partial_json"]
        for _, d in events
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == args
    assert anthropic_text(events) == "Answer from"
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_tool_use_block_in_json_reply(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("claude-t", Fault(reply_tool="search", tool_args={"q": "x"}))
    body = post(http, "anthropic", "claude-t").json()
    assert body["stop_reason"] == "tool_use"
    (block,) = body["content"]
    assert block["type"] == "tool_use"
    assert block["id"].startswith("toolu_")
    assert (block["name"], block["input"]) == ("search", {"q": "x"})


def test_anthropic_refuses_a_request_without_max_tokens(sim: Simulator, http: httpx.Client) -> None:
    response = http.post("/v1/messages", json={"model": "claude-a", "messages": MESSAGES})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"]


# --- Gemini -----------------------------------------------------------------------------------


def test_gemini_reply_has_candidates_and_usage_metadata(sim: Simulator, http: httpx.Client) -> None:
    body = post(http, "gemini", "gemini-a").json()
    candidate = body["candidates"][0]
    [part] = candidate["content"]["parts"]
    assert part["text"] == TEXT_8.format(model="gemini-a")
    assert part["thoughtSignature"]  # Gemini 3 signs the last part of a reply
    assert candidate["content"]["role"] == "model"
    assert candidate["finishReason"] == "STOP"
    usage = body["usageMetadata"]
    assert usage["candidatesTokenCount"] == 8
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + 8


def test_gemini_stream_is_crlf_framed_generate_content_responses(
    sim: Simulator, http: httpx.Client
) -> None:
    path, body = gemini_call("gemini-a", stream=True)
    with http.stream("POST", path, json=body, headers=AUTH["gemini"]) as response:
        raw = response.read().decode()
    assert raw.count("\r\n\r\n") == 9
    events = parse_sse(raw)
    assert gemini_text(events) == TEXT_8.format(model="gemini-a")
    assert all("finishReason" not in d["candidates"][0] for _, d in events[:-1])
    assert events[-1][1]["candidates"][0]["finishReason"] == "STOP"
    assert events[-1][1]["usageMetadata"]["candidatesTokenCount"] == 8


def test_gemini_function_call_arrives_whole(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("gemini-t", Fault(reply_tool="lookup", tool_args={"id": 42}))
    parts = post(http, "gemini", "gemini-t").json()["candidates"][0]["content"]["parts"]
    call = {"functionCall": {"name": "lookup", "args": {"id": 42}}}
    [signed] = parts
    signature = signed.pop("thoughtSignature")
    assert signature
    assert signed == call
    events = stream(http, "gemini", "gemini-t")
    calls = [
        p for _, d in events for p in d["candidates"][0]["content"]["parts"] if "functionCall" in p
    ]
    assert [{k: v for k, v in c.items() if k != "thoughtSignature"} for c in calls] == [call]
    assert [c["thoughtSignature"] for c in calls] == [
        signature
    ]  # the same call, the same signature


# --- shape of the healthy reply ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "limit", "finish"),
    [
        ("openai", {"max_tokens": 3}, lambda b: b["choices"][0]["finish_reason"] == "length"),
        ("anthropic", {"max_tokens": 3}, lambda b: b["stop_reason"] == "max_tokens"),
        (
            "gemini",
            {"generationConfig": {"maxOutputTokens": 3}},
            lambda b: b["candidates"][0]["finishReason"] == "MAX_TOKENS",
        ),
    ],
)
def test_reply_is_cut_at_max_tokens(
    sim: Simulator, http: httpx.Client, api: str, limit: dict[str, Any], finish: Any
) -> None:
    sim.set_faults("m", Fault(tokens=20))
    body = post(http, api, "m", **limit).json()
    assert finish(body)
    assert json.dumps(body).count("Answer from m.") == 1
    assert "alpha" not in json.dumps(body)


@pytest.mark.parametrize("api", ["openai", "anthropic", "gemini"])
def test_tokens_sets_the_number_of_streamed_pieces(
    sim: Simulator, http: httpx.Client, api: str
) -> None:
    sim.set_faults("m", Fault(tokens=12))
    text = {"openai": openai_text, "anthropic": anthropic_text, "gemini": gemini_text}[api]
    assert len(text(stream(http, api, "m")).split()) == 12


# --- faults -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "status", "field"),
    [
        ("openai", 429, lambda b: b["error"]["code"] == "rate_limit_exceeded"),
        ("openai", 500, lambda b: b["error"]["type"] == "server_error"),
        ("anthropic", 529, lambda b: b["error"]["type"] == "overloaded_error"),
        ("anthropic", 401, lambda b: b["error"]["type"] == "authentication_error"),
        ("gemini", 503, lambda b: b["error"]["status"] == "UNAVAILABLE"),
        ("gemini", 429, lambda b: b["error"]["status"] == "RESOURCE_EXHAUSTED"),
    ],
)
def test_error_status_gets_the_api_error_envelope(
    sim: Simulator, http: httpx.Client, api: str, status: int, field: Any
) -> None:
    sim.set_faults(
        "m", Fault(status=status, headers={"Retry-After": "2", "retry-after-ms": "1500"})
    )
    response = post(http, api, "m", stream=True)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert (response.headers["retry-after"], response.headers["retry-after-ms"]) == ("2", "1500")
    assert field(response.json())
    assert sim.calls("m", CallOutcome.ERROR) == 1
    assert sim.requests("m")[0].status == status


def test_error_body_may_be_given_json_html_or_empty(sim: Simulator, http: httpx.Client) -> None:
    given = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    sim.set_faults(
        "m",
        Fault(status=400, body=given, times=1),
        Fault(status=502, body="<html><body>Bad Gateway</body></html>", times=1),
        Fault(status=503, body="", times=1),
    )
    first = post(http, "gemini", "m")
    assert (first.status_code, first.json()) == (400, given)
    second = post(http, "gemini", "m")
    assert second.headers["content-type"].startswith("text/html")
    assert "Bad Gateway" in second.text
    third = post(http, "gemini", "m")
    assert (third.status_code, third.content) == (503, b"")


def test_faults_apply_in_order_then_the_model_is_healthy(
    sim: Simulator, http: httpx.Client
) -> None:
    sim.set_faults("m", Fault(status=529, times=1), Fault(status=500, times=2))
    statuses = [post(http, "anthropic", "m").status_code for _ in range(5)]
    assert statuses == [529, 500, 500, 200, 200]
    assert (sim.calls("m"), sim.calls("m", "error"), sim.calls("m", "ok")) == (5, 3, 2)


def test_a_fault_without_times_lasts_until_cleared(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(status=503))
    assert [post(http, "openai", "m").status_code for _ in range(3)] == [503] * 3
    sim.clear()
    assert post(http, "openai", "m").status_code == 200
    assert sim.calls("m") == 4


def test_rate_makes_a_flaky_model(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(status=500, rate=0.5))
    statuses = [post(http, "openai", "m").status_code for _ in range(40)]
    assert 5 <= statuses.count(500) <= 35
    assert statuses.count(500) + statuses.count(200) == 40
    sim.set_faults("never", Fault(status=500, rate=0.0))
    assert post(http, "openai", "never").status_code == 200


def test_latency_delays_the_answer(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(latency_s=0.3))
    started = time.monotonic()
    assert post(http, "openai", "m").status_code == 200
    assert time.monotonic() - started >= 0.3


def test_first_byte_stall_sends_nothing_and_counts_stalled_when_the_client_leaves(
    sim: Simulator, http: httpx.Client
) -> None:
    sim.set_faults("m", Fault(stall_first_byte_s=60))
    path, body = openai_call("m")
    with pytest.raises(httpx.ReadTimeout):
        http.post(path, json=body, timeout=httpx.Timeout(5, read=0.3))
    wait_for(lambda: sim.calls("m", CallOutcome.STALLED) == 1)
    assert sim.requests("m")[0].outcome is CallOutcome.STALLED


@pytest.mark.parametrize(
    ("api", "preamble"),
    [("openai", 1), ("anthropic", 3), ("gemini", 0)],
)
def test_stall_before_content_opens_the_stream_then_stays_silent(
    sim: Simulator, http: httpx.Client, api: str, preamble: int
) -> None:
    sim.set_faults("m", Fault(stall_before_content_s=60))
    path, body = CALLS[api]("m", stream=True)
    started = time.monotonic()
    with http.stream(
        "POST", path, json=body, headers=AUTH[api], timeout=httpx.Timeout(5, read=0.4)
    ) as response:
        assert response.status_code == 200
        assert time.monotonic() - started < 0.4
        received = read_until_silent(response)
    assert len(parse_sse(received)) == preamble
    assert "Answer" not in received
    wait_for(lambda: sim.calls("m", CallOutcome.STALLED) == 1)


def test_stall_after_tokens_goes_silent_mid_stream(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(stall_after_tokens=3, stall_after_s=60))
    path, body = anthropic_call("m", stream=True)
    with http.stream("POST", path, json=body, timeout=httpx.Timeout(5, read=0.4)) as response:
        received = read_until_silent(response)
    assert anthropic_text(parse_sse(received)) == "Answer from m."
    wait_for(lambda: sim.calls("m", CallOutcome.STALLED) == 1)


def test_a_short_stall_after_tokens_then_the_answer_completes(
    sim: Simulator, http: httpx.Client
) -> None:
    sim.set_faults("m", Fault(stall_after_tokens=2, stall_after_s=0.2))
    started = time.monotonic()
    assert gemini_text(stream(http, "gemini", "m")) == TEXT_8.format(model="m")
    assert time.monotonic() - started >= 0.2
    assert sim.calls("m", "ok") == 1


@pytest.mark.parametrize(
    ("api", "event", "error"),
    [
        ("openai", None, {"type": "server_error"}),
        ("anthropic", "error", {"type": "overloaded_error", "message": "Overloaded"}),
        ("gemini", None, {"code": 503, "status": "UNAVAILABLE"}),
    ],
)
def test_error_after_tokens_sends_the_api_mid_stream_error(
    sim: Simulator, http: httpx.Client, api: str, event: str | None, error: dict[str, Any]
) -> None:
    sim.set_faults("m", Fault(error_after_tokens=2))
    events = stream(http, api, "m")
    text = {"openai": openai_text, "anthropic": anthropic_text, "gemini": gemini_text}[api]
    assert text(events[:-1]) == "Answer from"
    name, data = events[-1]
    assert name == event
    assert data["error"].items() >= error.items()
    assert sim.calls("m", CallOutcome.STREAM_ERROR) == 1


def test_a_given_stream_error_payload_is_sent(sim: Simulator, http: httpx.Client) -> None:
    payload = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    sim.set_faults("m", Fault(error_after_tokens=1, stream_error=payload))
    assert stream(http, "anthropic", "m")[-1] == ("error", payload)


def test_drop_cuts_the_connection_after_tokens(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(error_after_tokens=2, drop=True))
    path, body = openai_call("m", stream=True)
    lines: list[str] = []
    with (
        http.stream("POST", path, json=body) as response,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        lines.extend(response.iter_lines())
    assert openai_text(parse_sse("\n".join(lines))) == "Answer from"
    assert sim.calls("m", CallOutcome.DROPPED) == 1


def test_non_streaming_error_after_tokens_tears_the_body(
    sim: Simulator, http: httpx.Client
) -> None:
    sim.set_faults("m", Fault(error_after_tokens=2))
    with pytest.raises(httpx.RemoteProtocolError):
        post(http, "anthropic", "m")
    wait_for(lambda: sim.calls("m", CallOutcome.DROPPED) == 1)


def test_client_leaving_mid_stream_counts_abandoned(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("m", Fault(tokens=200, token_interval_s=0.02))
    path, body = openai_call("m", stream=True)
    with http.stream("POST", path, json=body) as response:
        next(response.iter_lines())
    wait_for(lambda: sim.calls("m", CallOutcome.ABANDONED) == 1)


@pytest.mark.parametrize("api", ["openai", "anthropic", "gemini"])
def test_echo_key_puts_the_request_key_in_the_body_but_never_in_records(
    sim: Simulator, http: httpx.Client, api: str
) -> None:
    sim.set_faults("m", Fault(status=401, echo_key=True))
    assert SECRET in post(http, api, "m").text
    sim.set_faults("m", Fault(status=400, echo_key=True, body="bad key $API_KEY here"))
    assert post(http, api, "m").text == f"bad key {SECRET} here"
    records = sim.requests("m")
    assert [r.auth_header for r in records] == [next(iter(AUTH[api])).lower()] * 2
    assert SECRET not in repr(records)


@pytest.mark.parametrize("api", ["openai", "anthropic", "gemini"])
def test_every_canned_catalogue_error_goes_out_as_given(
    sim: Simulator, http: httpx.Client, api: Any
) -> None:
    from worker.simulator.catalogue import NAMES, STREAM_NAMES, canned, canned_stream

    for name in NAMES[api]:
        error = canned(api, name, retry_after_s=1.5)
        sim.set_faults("m", Fault(status=error.status, body=error.body, headers=error.headers))
        response = post(http, api, "m")
        assert response.status_code == error.status, name
        for header, value in error.headers.items():
            assert response.headers[header] == value, (name, header)
        if isinstance(error.body, dict):
            assert response.json() == error.body, name
        else:
            assert response.content == error.body_bytes(), name
    for name in STREAM_NAMES[api]:
        payload = canned_stream(api, name)
        sim.set_faults("m", Fault(error_after_tokens=1, stream_error=payload))
        assert stream(http, api, "m")[-1][1] == payload, name


# --- counting and inspection ------------------------------------------------------------------


def test_requests_record_tools_and_message_counts_per_api(
    sim: Simulator, http: httpx.Client
) -> None:
    schema = {"type": "object", "properties": {}}
    post(
        http,
        "openai",
        "o",
        tools=[{"type": "function", "function": {"name": "a", "parameters": schema}}],
    )
    post(http, "anthropic", "c", tools=[{"name": "b", "input_schema": schema}], system="Be brief.")
    post(http, "gemini", "g", tools=[{"functionDeclarations": [{"name": "c"}, {"name": "d"}]}])
    assert [(r.tools, r.message_count) for m in "ocg" for r in sim.requests(m)] == [
        (("a",), 1),
        (("b",), 1),
        (("c", "d"), 1),
    ]
    (record,) = sim.requests("c")
    assert record.body["system"] == "Be brief."
    assert (record.api, record.stream, record.outcome, record.status) == (
        "anthropic",
        False,
        "ok",
        200,
    )


def test_records_keep_headers_but_never_key_values(sim: Simulator, http: httpx.Client) -> None:
    path, body = gemini_call("g")
    http.post(path, params={"key": SECRET}, json=body, headers={"x-client": "relevo"})
    http.post("/v1/messages", json=anthropic_call("c")[1], headers=AUTH["anthropic"])
    (gemini,) = sim.requests("g")
    assert (gemini.auth_header, gemini.query, gemini.headers["x-client"]) == ("key", {}, "relevo")
    (claude,) = sim.requests("c")
    assert claude.headers["anthropic-version"] == "2023-06-01"
    assert "x-api-key" not in claude.headers
    assert SECRET not in repr([gemini, claude])


def test_large_requests_are_accepted(sim: Simulator, http: httpx.Client) -> None:
    big = [{"role": "user", "content": "word " * 400_000}]
    response = http.post("/v1/chat/completions", json={"model": "m", "messages": big})
    assert response.status_code == 200
    assert response.json()["usage"]["prompt_tokens"] > 400_000


def test_calls_count_per_model_and_outcome(sim: Simulator, http: httpx.Client) -> None:
    sim.set_faults("primary", Fault(status=529, times=2))
    for _ in range(3):
        post(http, "anthropic", "primary")
    post(http, "openai", "backup")
    assert sim.calls() == 4
    assert (sim.calls("primary"), sim.calls("backup")) == (3, 1)
    assert sim.calls(outcome="ok") == 2
    assert sim.counts() == {
        "primary": {"calls": 3, "error": 2, "ok": 1},
        "backup": {"calls": 1, "ok": 1},
    }


def test_bad_json_is_answered_400_and_counted(sim: Simulator, http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert sim.calls(outcome="error") == 1


def test_fault_rejects_impossible_settings() -> None:
    for bad in (
        {"status": 200},
        {"times": 0},
        {"rate": 1.5},
        {"latency_s": -1},
        {"stall_after_tokens": 2},
        {"drop": True},
    ):
        with pytest.raises(ValueError, match=r"\w"):
            Fault(**bad)


# --- admin API, other processes, shutdown -----------------------------------------------------


def test_admin_api_drives_the_simulator(sim: Simulator, http: httpx.Client) -> None:
    with SimulatorClient(sim.url) as client:
        assert client.healthy()
        client.set_faults(
            "vendor/model-x", Fault(status=429, headers={"retry-after": "1"}, times=1)
        )
        assert (
            http.post(
                "/v1/chat/completions", json={"model": "vendor/model-x", "messages": []}
            ).status_code
            == 429
        )
        post(http, "openai", "vendor/model-x")
        assert client.calls("vendor/model-x") == 2
        assert client.calls("vendor/model-x", CallOutcome.ERROR) == 1
        records = client.requests("vendor/model-x")
        assert all(isinstance(r, RequestRecord) for r in records)
        assert [r.status for r in records] == [429, 200]
        assert records == sim.requests("vendor/model-x")
        client.set_faults("m", Fault(status=500))
        client.clear()
        assert post(http, "openai", "m").status_code == 200
        client.reset()
        assert client.calls() == 0


def test_admin_api_rejects_unknown_fault_fields(sim: Simulator, http: httpx.Client) -> None:
    response = http.put("/_sim/faults/m", json={"faults": [{"stauts": 500}]})
    assert response.status_code == 422
    response = http.put("/_sim/faults/m", json={"faults": [{"rate": 2}]})
    assert response.status_code == 422


def test_stop_ends_a_stalled_call_at_once() -> None:
    sim = Simulator().start()
    sim.set_faults("m", Fault(stall_first_byte_s=600))
    path, body = openai_call("m")
    failures: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(sim.url + path, json=body, timeout=30)
        except httpx.TransportError as exc:
            failures.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: sim.calls("m") == 1)
    started = time.monotonic()
    sim.stop()
    assert time.monotonic() - started < 2
    caller.join(5)
    assert not caller.is_alive()
    assert len(failures) == 1
    assert sim.calls("m", CallOutcome.STALLED) == 1
    with pytest.raises(RuntimeError):
        _ = sim.url


def test_serve_runs_in_another_process_and_is_driven_over_http() -> None:
    with Simulator() as probe:  # borrow a free port
        port = int(probe.url.rsplit(":", 1)[1])
    code = f"from worker.simulator import serve; serve('127.0.0.1', {port})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with SimulatorClient(url) as client:
            wait_for(client.healthy, timeout_s=10)
            client.set_faults("claude-x", Fault(status=529, times=1))
            with httpx.Client(base_url=url) as http:
                assert post(http, "anthropic", "claude-x").status_code == 529
                assert post(http, "anthropic", "claude-x").status_code == 200
            assert client.counts() == {"claude-x": {"calls": 2, "error": 1, "ok": 1}}
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert f"listening on {url}" in out.decode()
    assert b"Traceback" not in err


def test_exported_members() -> None:
    assert worker.simulator.__all__ == sorted(worker.simulator.__all__)
    assert set(worker.simulator.__all__) == {
        "Fault",
        "CallOutcome",
        "RequestRecord",
        "Simulator",
        "SimulatorClient",
        "serve",
    }
