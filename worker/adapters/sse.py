"""An incremental Server-Sent Events parser: bytes in, `SseEvent`s out.

Push-style (`feed` each chunk as it arrives) so the caller keeps control of
the byte stream and of its lifetime. It follows the WHATWG event-stream rules
that matter to LLM APIs: `event:` and multi-line `data:` fields, comments,
and LF, CRLF or CR line ends, even when a chunk boundary splits them. A line
longer than the cap or bytes that are not UTF-8 raise `MalformedResponse`.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import MalformedResponse

__all__ = ["MAX_LINE_BYTES", "SseEvent", "SseParser"]

MAX_LINE_BYTES = 1024 * 1024
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its type (`message` unless named) and its data."""

    event: str
    data: str


class SseParser:
    """Feed raw bytes; get back the events they complete."""

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max_line = max_line_bytes
        self._tail = b""
        self._skip_lf = False  # the last chunk ended on CR: a leading LF belongs to it
        self._first_line = True
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Parse `chunk`; return every event completed by it, in order."""
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        buffer = self._tail + chunk if self._tail else chunk
        lines = buffer.splitlines(keepends=True)
        self._tail = b""
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._tail = lines.pop()
            if len(self._tail) > self._max_line:
                raise MalformedResponse(f"event-stream line longer than {self._max_line} bytes")
        elif lines and lines[-1].endswith(b"\r"):
            self._skip_lf = True
        events: list[SseEvent] = []
        for raw in lines:
            if len(raw) > self._max_line + 2:
                raise MalformedResponse(f"event-stream line longer than {self._max_line} bytes")
            event = self._line(raw.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, raw: bytes) -> SseEvent | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedResponse("event-stream is not valid UTF-8") from None
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # `id`, `retry` and unknown fields mean nothing to a one-shot API stream.
        return None

    def _dispatch(self) -> SseEvent | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:
            return None
        return SseEvent(event=event, data="\n".join(data))
