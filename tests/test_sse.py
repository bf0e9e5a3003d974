"""The incremental SSE parser: framing rules, chunk boundaries anywhere, hostile input."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.adapters.sse import SseEvent, SseParser
from worker.errors import MalformedResponse

STREAM = (
    b": keep-alive comment\n"
    b"event: message_start\n"
    b'data: {"a":1}\n'
    b"\n"
    b"data: line one\r\n"
    b"data: line two\r\n"
    b"\r\n"
    b"event: ping\rdata:no-space\r\r"
    b"id: 7\nretry: 100\nunknown: x\ndata: [DONE]\n\n"
)
EXPECTED = [
    SseEvent("message_start", '{"a":1}'),
    SseEvent("message", "line one\nline two"),
    SseEvent("ping", "no-space"),
    SseEvent("message", "[DONE]"),
]


def parse_all(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_whole_stream_gives_events_with_types_and_joined_data() -> None:
    assert parse_all([STREAM]) == EXPECTED


def test_one_byte_at_a_time_gives_the_same_events() -> None:
    assert parse_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    assert parse_all(chunks) == EXPECTED


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    """A CR at a chunk's end followed by LF in the next must not end the event early."""
    assert parse_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [
        SseEvent("message", "a\nb")
    ]


def test_leading_bom_is_ignored() -> None:
    assert parse_all([b"\xef\xbb\xbfdata: x\n\n"]) == [SseEvent("message", "x")]


def test_event_without_data_is_not_dispatched_and_type_resets() -> None:
    assert parse_all([b"event: ping\n\ndata: x\n\n"]) == [SseEvent("message", "x")]


def test_unterminated_last_event_is_not_dispatched() -> None:
    assert parse_all([b"data: complete\n\ndata: cut off"]) == [SseEvent("message", "complete")]


def test_overlong_line_is_malformed_even_before_it_ends() -> None:
    parser = SseParser(max_line_bytes=64)
    with pytest.raises(MalformedResponse, match="longer than 64"):
        parser.feed(b"data: " + b"x" * 100)


def test_overlong_complete_line_is_malformed() -> None:
    parser = SseParser(max_line_bytes=64)
    with pytest.raises(MalformedResponse):
        parser.feed(b"data: " + b"x" * 100 + b"\n\n")


def test_invalid_utf8_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="UTF-8"):
        SseParser().feed(b"data: \xff\xfe\n\n")
