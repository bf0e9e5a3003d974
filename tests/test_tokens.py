"""The input estimate is an upper bound of what real tokenizers make of a prompt.

Checked against OpenAI's o200k and cl100k and Mistral's Tekken and SentencePiece
tokenizers (tests/tokenkit.py, all loaded offline), on prose, code, JSON, CJK, other
scripts and emoji, and on whole conversations with tools, calls, reasoning, text parts,
a response schema, stop sequences and a forced tool. Images and PDFs are checked against
each vendor's documented formula (tests/test_media_tokens.py).
"""

from __future__ import annotations

import base64
import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import tokenkit
from worker.settings import ModelSettings, Serving
from worker.turn.capability import Fit, fit_turn
from worker.turn.tokens import (
    TOKENS_PER_MESSAGE,
    TOKENS_PER_REQUEST,
    estimate_tokens,
    message_tokens,
    options_tokens,
    text_tokens,
    tools_tokens,
)
from worker.types import (
    JsonSchemaFormat,
    Message,
    NamedTool,
    Reasoning,
    TextPart,
    Tool,
    ToolCall,
    TurnRequest,
)

COUNTERS = tokenkit.counters()


def most_tokens(text: str) -> int:
    return max(count(text) for count in COUNTERS.values())


def _slice(kind: str) -> st.SearchStrategy[str]:
    texts = tokenkit.sources()[kind]

    @st.composite
    def cut(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(texts))
        size = draw(st.sampled_from((20, 200, 2000)))
        start = draw(st.integers(0, max(0, len(text) - size)))
        return text[start : start + size]

    return cut()


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _slice("scripts").map(lambda s: s[:40])
    | st.uuids().map(str)
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.from_regex(r"[a-z][a-zA-Z_]{0,15}", fullmatch=True), inner, max_size=5)
    ),
    max_leaves=30,
)
IDS = st.one_of(
    st.uuids().map(str),
    st.binary(min_size=16, max_size=32).map(bytes.hex),
    st.binary(min_size=3, max_size=120).map(lambda b: base64.b64encode(b).decode()),
    st.binary(min_size=3, max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.from_regex(r"call_[A-Za-z0-9]{8,24}", fullmatch=True),
)
NUMBERS = st.lists(st.integers(0, 10**12) | st.floats(-1e9, 1e9), min_size=1, max_size=30)
SEGMENTS = st.one_of(
    _slice("english"),
    _slice("code"),
    _slice("scripts"),
    JSON_VALUES.map(json.dumps),
    JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False, indent=2)),
    IDS,
    NUMBERS.map(lambda ns: ", ".join(map(str, ns))),
    st.text(st.sampled_from(" \t\n"), max_size=40),
)
TEXTS = st.lists(SEGMENTS, min_size=1, max_size=6).flatmap(
    lambda parts: st.sampled_from(("", " ", "\n")).map(lambda sep: sep.join(parts))
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_no_tokenizer_makes_more_tokens_of_a_text_than_its_estimate(text: str) -> None:
    # The one token more is SentencePiece's leading word mark, which the framing of the
    # message that holds the text covers.
    for name, count in COUNTERS.items():
        assert count(text) <= text_tokens(text) + 1, name


@pytest.mark.parametrize("name", sorted(tokenkit.SAMPLES))
def test_each_script_is_bounded(name: str) -> None:
    text = tokenkit.SAMPLES[name]
    assert most_tokens(text) <= text_tokens(text) + 1


def test_a_non_ascii_character_counts_at_least_its_bytes() -> None:
    # 8,000 Chinese characters: providers bill 1 to 1.5 tokens each, the SentencePiece
    # of Mistral 7B up to 3 (bytes, for characters outside its vocabulary).
    text = (tokenkit.SAMPLES["zh"] * 100)[:8000]
    assert text_tokens(text) >= len(text.encode())
    assert text_tokens(text) >= most_tokens(text)
    assert text_tokens("龘") == 3
    assert text_tokens("🧑🏽‍💻") == len("🧑🏽‍💻".encode())


def render(messages: list[Message], tools: list[Tool]) -> str:
    """Everything of a request a model reads, as one text (a chat template's view)."""
    lines = [f"{t.name}\n{t.description}\n{json.dumps(t.parameters)}" for t in tools]
    for message in messages:
        lines.append(f"<|{message.role}|>{message.tool_call_id or ''}\n{message.text}")
        lines += [f"{c.id} {c.name} {json.dumps(c.arguments)}" for c in message.tool_calls]
        lines += [thought.text for thought in message.reasoning]
    return "\n".join(lines)


TOOLS = st.builds(
    Tool,
    name=st.from_regex(r"[a-z][a-z_]{2,30}", fullmatch=True),
    description=_slice("english").map(lambda s: s[:300]),
    parameters=st.dictionaries(
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True), JSON_VALUES, max_size=4
    ).map(lambda props: {"type": "object", "properties": props}),
)
CALLS = st.builds(
    ToolCall,
    id=IDS,
    name=st.from_regex(r"[a-z][a-z_]{2,30}", fullmatch=True),
    arguments=st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), JSON_VALUES),
)
PARTS = st.lists(TEXTS.map(lambda text: TextPart(text=text)), min_size=1, max_size=4).map(tuple)
MESSAGES = st.one_of(
    st.builds(Message, role=st.sampled_from(("system", "user")), content=TEXTS | PARTS),
    st.builds(
        Message,
        role=st.just("assistant"),
        content=TEXTS,
        tool_calls=st.lists(CALLS, max_size=3).map(tuple),
        reasoning=st.lists(
            st.builds(Reasoning, origin=st.just("anthropic"), text=TEXTS), max_size=2
        ).map(tuple),
    ),
    st.builds(Message, role=st.just("tool"), tool_call_id=IDS, content=TEXTS),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGES, min_size=1, max_size=6), st.lists(TOOLS, max_size=3))
def test_a_whole_request_is_bounded_with_its_framing(
    messages: list[Message], tools: list[Tool]
) -> None:
    assert most_tokens(render(messages, tools)) <= estimate_tokens(messages, tools)


LAST = st.builds(Message, role=st.just("user"), content=PARTS | TEXTS) | st.builds(
    Message, role=st.just("tool"), tool_call_id=IDS, content=PARTS | TEXTS
)
SCHEMAS = st.builds(
    JsonSchemaFormat,
    name=st.from_regex(r"[a-z][a-z_]{2,30}", fullmatch=True),
    schema=st.dictionaries(
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        _slice("scripts").map(lambda text: {"type": "string", "description": text[:200]}),
        max_size=4,
    ).map(lambda props: {"type": "object", "properties": props}),
)
STOPS = st.lists(_slice("scripts").map(lambda s: s[:40] or "END"), min_size=1, max_size=4)
WIDE = ModelSettings(
    vendor="v",
    serve=(Serving(provider="p", model_id="m"),),
    context_window=10**9,
    structured_output=True,
)


@st.composite
def turns(draw: st.DrawFn) -> TurnRequest:
    tools = draw(st.lists(TOOLS, max_size=3, unique_by=lambda t: t.name))
    names = [t.name for t in tools]
    choices = st.sampled_from(["auto", "none"]) | st.none()
    if tools:
        choices |= st.just("required") | st.sampled_from(names).map(lambda n: NamedTool(name=n))
    return TurnRequest(
        tenant_id="t",
        messages=(*draw(st.lists(MESSAGES, max_size=5)), draw(LAST)),
        tools=tuple(tools),
        tool_choice=draw(choices),
        response_format=draw(st.none() | SCHEMAS),
        stop=draw(st.none() | STOPS.map(tuple)),
    )


def render_turn(request: TurnRequest) -> str:
    """A whole turn as a model reads it: the options too, each where a template puts it."""
    lines = [render(list(request.messages), list(request.tools))]
    answer = request.response_format
    if isinstance(answer, JsonSchemaFormat):
        lines.append(f"{answer.name}\n{json.dumps(answer.json_schema, ensure_ascii=False)}")
    lines += request.stop or ()
    if isinstance(request.tool_choice, NamedTool):
        lines.append(f"call {request.tool_choice.name}")
    elif request.tool_choice is not None:
        lines.append(request.tool_choice)
    return "\n".join(lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns())
def test_a_whole_turn_with_parts_and_options_is_bounded(request: TurnRequest) -> None:
    fit = fit_turn(request, WIDE)
    assert isinstance(fit, Fit)
    assert most_tokens(render_turn(request)) <= fit.input_tokens


def test_the_options_count_the_text_they_add() -> None:
    schema = {"type": "object", "properties": {"total": {"type": "number"}}}
    lookup = Tool(name="lookup")
    bare = TurnRequest(tenant_id="t", messages=(Message(role="user", content="hi"),))
    assert options_tokens(bare, ()) == 0
    shaped = bare.model_copy(
        update={"response_format": JsonSchemaFormat(name="invoice", schema=schema)}
    )
    # Without tools, the forced-tool translation brings the tool-use prompt along.
    assert options_tokens(shaped, ()) > 600 + text_tokens(json.dumps(schema))
    assert options_tokens(shaped, (lookup,)) < options_tokens(shaped, ())
    stopped = bare.model_copy(update={"stop": ("END", "終わり")})
    assert options_tokens(stopped, ()) >= text_tokens("END\n終わり")
    forced = TurnRequest(
        tenant_id="t", messages=bare.messages, tools=(lookup,), tool_choice=NamedTool(name="lookup")
    )
    assert options_tokens(forced, forced.tools) > text_tokens("lookup")
    fit = fit_turn(forced, WIDE)
    assert isinstance(fit, Fit)
    assert fit.input_tokens == estimate_tokens(forced.messages, forced.tools) + options_tokens(
        forced, forced.tools
    )


def test_opaque_signatures_count_what_they_decode_to() -> None:
    blob = base64.b64encode(bytes(3000)).decode()
    plain = Message(role="assistant", content="ok")
    signed = Message(
        role="assistant",
        content="ok",
        reasoning=(Reasoning(origin="anthropic", text="", signature=blob, redacted=blob),),
        tool_calls=(ToolCall(id="c1", name="f", signature=blob),),
    )
    call = Message(role="assistant", content="ok", tool_calls=(ToolCall(id="c1", name="f"),))
    assert message_tokens(signed) - message_tokens(call) >= 3 * 3000
    assert message_tokens(call) > message_tokens(plain)


def test_the_estimate_adds_up_by_part() -> None:
    messages = [Message(role="user", content="hello"), Message(role="user", content="你好")]
    tools = [Tool(name="lookup", description="Look it up.")]
    assert estimate_tokens(messages, tools) == estimate_tokens(messages) + tools_tokens(tools)
    assert estimate_tokens(messages) == TOKENS_PER_REQUEST + sum(map(message_tokens, messages))
    assert message_tokens(messages[0]) == TOKENS_PER_MESSAGE + text_tokens("hello")
    assert estimate_tokens([]) == 0


@pytest.mark.parametrize(
    ("kind", "most"),
    [("english", 2.5), ("code", 2.8)],
)
def test_the_bound_is_not_wildly_pessimistic_for_prose_and_code(kind: str, most: float) -> None:
    texts = tokenkit.sources()[kind]
    o200k = tokenkit.counters()["o200k"]
    ratio = sum(map(text_tokens, texts)) / sum(map(o200k, texts))
    assert 1.2 < ratio < most


def test_random_letters_in_short_words_are_bounded_too() -> None:
    # Up to 0.6 tokens a letter, more than a word's third: none is a word of the
    # dictionary, so each counts a token a letter.
    letters = "".join(string.ascii_lowercase[(i * 7919) % 26] for i in range(3000))
    words = " ".join(letters[i : i + 9] for i in range(0, len(letters), 9))
    assert most_tokens(words) > len(letters) / 3
    assert most_tokens(words) <= text_tokens(words)


def test_the_tokenizers_load_with_no_network() -> None:
    # Every connection refused: the encodings come from the packages, never downloaded.
    code = (
        "import socket\n"
        "def refuse(*args, **kwargs): raise OSError('no network in this test')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from tests import tokenkit\n"
        "counts = {name: count('Hello, 世界') for name, count in tokenkit.counters().items()}\n"
        "assert tokenkit.openai_encoding('o200k_base').encode('hello world') == [24912, 2375]\n"
        "print(counts)\n"
    )
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-c", code]
    done = subprocess.run(
        command, check=False, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "o200k" in done.stdout
