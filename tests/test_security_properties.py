"""Point 6: properties, over generated inputs (the classifier's are in test_policy_properties.py).

Trimming never separates a tool call from its result and never exceeds the
room. The TurnRequest parser never accepts what the chain cannot run: whatever
it accepts fits (or is refused by) a normal model without an error, and every
adapter builds a request from it that can be sent as UTF-8 JSON.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.adapters import ADAPTERS, ProviderCall
from worker.errors import InputError
from worker.settings import LimitsSettings, ModelSettings, ProviderSettings
from worker.turn.capability import Fit, fit_turn, trim_history
from worker.turn.intake import checked_turn
from worker.turn.tokens import estimate_tokens
from worker.types import Message, ToolCall, TurnRequest, parse_turn_request

TRIM_EXAMPLES = 400
PARSER_EXAMPLES = 400

# --- trimming ---------------------------------------------------------------------------

words = st.text(alphabet="abc xyz", max_size=60)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    """A valid history: exchanges of user text, tool calls with all their results, answers."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message(role="system", content=draw(words)))
    calls = 0
    for _ in range(draw(st.integers(0, 8))):
        out.append(Message(role="user", content=draw(words)))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{calls + i}" for i in range(draw(st.integers(1, 3)))]
            calls += len(ids)
            made = tuple(ToolCall(id=i, name="f", arguments={"q": draw(words)}) for i in ids)
            out.append(Message(role="assistant", content=draw(words), tool_calls=made))
            out.extend(Message(role="tool", tool_call_id=i, content=draw(words)) for i in ids)
        if draw(st.booleans()):
            out.append(Message(role="assistant", content=draw(words)))
    out.append(Message(role="user", content=draw(words)))
    return tuple(out)


def pairs_whole(messages: tuple[Message, ...]) -> bool:
    """Every kept tool call has its results kept, and every kept result its call."""
    called = {c.id for m in messages for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    return called == answered


@settings(max_examples=TRIM_EXAMPLES, deadline=None)
@given(history=conversations(), room=st.integers(0, 400))
def test_trimming_keeps_tool_calls_with_their_results_and_fits_the_room(
    history: tuple[Message, ...], room: int
) -> None:
    assert pairs_whole(history)
    trimmed = trim_history(history, room)
    if trimmed is None:
        return
    assert estimate_tokens(trimmed) <= room
    assert pairs_whole(trimmed)
    rest = iter(history)
    assert all(any(m is h for h in rest) for m in trimmed)  # only drops, keeps the order
    assert trimmed[-1] == history[-1]
    assert [m for m in history if m.role == "system"] == [m for m in trimmed if m.role == "system"]


# --- the parser -------------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc80"])
plain = st.one_of(st.text(max_size=20), st.sampled_from(["", "acme", "f", "c1"]))
text = st.integers(0, 9).flatmap(lambda roll: SURROGATES if roll == 0 else plain)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), text
)
json_ish = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right shape (nine times in ten), sometimes anything."""
    return st.integers(0, 9).flatmap(lambda roll: json_ish if roll == 0 else value)


tool_calls = st.fixed_dictionaries(
    {"id": maybe(text), "name": maybe(st.sampled_from(["f", "g", "bad name"]))},
    optional={"arguments": maybe(st.dictionaries(text, json_ish, max_size=3))},
)
messages = st.fixed_dictionaries(
    {"role": maybe(st.sampled_from(["system", "user", "assistant", "tool"]))},
    optional={
        "content": maybe(text),
        "tool_calls": maybe(st.lists(tool_calls, max_size=2)),
        "tool_call_id": maybe(text),
    },
)
tools = st.fixed_dictionaries(
    {"name": maybe(st.sampled_from(["f", "g", "h-1", "x y"]))},
    optional={
        "description": maybe(text),
        "parameters": maybe(st.dictionaries(text, json_ish, max_size=3)),
        "side_effects": maybe(st.booleans()),
    },
)
LAST = {"role": "user", "content": "and now?"}
requests = st.fixed_dictionaries(
    {
        "tenant_id": maybe(st.sampled_from(["acme", "acme", "acme", "_", "org:1234", "a|b", ""])),
        # Ending on a user message, as a runnable turn must, most of the time.
        "messages": maybe(st.lists(messages, max_size=4).map(lambda m: [*m, LAST])),
    },
    optional={
        "tools": maybe(st.lists(tools, max_size=3)),
        "max_tokens": maybe(st.integers(-5, 300_000)),
        "stream": maybe(st.booleans()),
        "deadline_s": maybe(st.one_of(st.floats(0, 4000), st.floats(allow_nan=True))),
        "turn_id": maybe(st.sampled_from(["t-1", "t-2", "t:1", "x" * 200])),
    },
)

NORMAL = ModelSettings(
    vendor="openai", serve=[{"provider": "p", "model_id": "m"}], context_window=128_000
)
CLIENT = httpx.AsyncClient()
PROVIDERS = {
    "openai": ProviderSettings(kind="openai", base_url="http://127.0.0.1:1/v1"),
    "azure": ProviderSettings(
        kind="openai", base_url="http://127.0.0.1:1/openai", azure_api_version="2024-10-21"
    ),
    "anthropic": ProviderSettings(kind="anthropic", base_url="http://127.0.0.1:1"),
    "gemini": ProviderSettings(kind="gemini", base_url="http://127.0.0.1:1"),
    "vertex": ProviderSettings(
        kind="vertex", base_url="http://127.0.0.1:1", region="us-east5", project="my-project"
    ),
    "bedrock": ProviderSettings(kind="bedrock", region="us-east-1"),
}
ADAPTERS_BUILT = {name: ADAPTERS[p.kind](p, CLIENT) for name, p in PROVIDERS.items()}


def runs_in_the_chain(request: TurnRequest) -> None:
    """What the chain does with a request before and around the HTTP call, minus the call."""
    request.model_dump_json()  # the kill switch holds it; a hand-off stores it
    fit = fit_turn(request, NORMAL)
    if not isinstance(fit, Fit):
        return  # a skip the chain reports, not an error
    call = ProviderCall("m", fit.messages, fit.tools, request.max_tokens, request.stream)
    for adapter in ADAPTERS_BUILT.values():
        built = adapter.request(call)
        json.dumps(built.body, ensure_ascii=False).encode()  # exactly as `send` encodes it
        httpx.URL(built.url)


@settings(
    max_examples=PARSER_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=requests)
def test_whatever_the_parser_accepts_the_chain_can_run(data: dict[str, Any]) -> None:
    try:
        request = parse_turn_request(data)
    except InputError:
        return  # refused, naming the field
    runs_in_the_chain(request)
    again = checked_turn(data, LimitsSettings())  # the worker's own entry point agrees
    assert again.model_dump(exclude={"turn_id"}) == request.model_dump(exclude={"turn_id"})


@settings(max_examples=PARSER_EXAMPLES // 4, deadline=None)
@given(data=json_ish)
def test_arbitrary_json_is_refused_with_an_input_error_or_runs(data: Any) -> None:
    try:
        request = checked_turn(data, LimitsSettings())
    except InputError:
        return
    runs_in_the_chain(request)


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    asyncio.run(CLIENT.aclose())
