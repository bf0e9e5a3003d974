"""Text from outside (a reason, a name, a model's reply) shown to people, never acting.

Direction overrides and isolates, zero-width and control characters would act on the
text around them: "all clear [U+202E]FFO ton od" read as "all clear do not OFF", or
ESC[2K erasing the line a terminal shows. The console's pages (`worker.console.filters`)
and every line the `relevo` commands print write them out as "[U+202E]" instead; a
terminal also gets a carriage return written out, which would return to the line's
start. Newlines, tabs and joiners inside emoji and scripts are left as they are, except
inside one field of a line (`one_line`: a reason, a name), where a newline would forge a
line of its own. JSON
output keeps its data: there they are written as JSON escapes (`\\u202e`).
"""

from __future__ import annotations

import re
from typing import Any, TextIO

__all__ = [
    "ACTING",
    "LINE_ACTING",
    "TERMINAL_ACTING",
    "VisibleStream",
    "json_visible",
    "one_line",
    "visible",
]

_SET = (
    "\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b\u200e\u200f"
    "\u202a-\u202e\u2028\u2029\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000e0000-\U000e007f"
)
ACTING = re.compile(f"[{_SET}]")
"""What acts in a web page's text (a carriage return there is only white space)."""
TERMINAL_ACTING = re.compile(f"[{_SET}\r]")
"""What acts in a terminal."""
LINE_ACTING = re.compile(f"[{_SET}\r\n\t]")
"""What acts in one field of a line: a newline there would start a line of its own."""


def _written(found: re.Match[str]) -> str:
    return f"[U+{ord(found.group()):04X}]"


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character past U+FFFF as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def visible(text: str, *, acting: re.Pattern[str] = TERMINAL_ACTING) -> str:
    """`text` with the characters that would act written out as "[U+XXXX]"."""
    return acting.sub(_written, text) if acting.search(text) else text


def one_line(text: str) -> str:
    """`text` for one field of a printed line (a reason, a name): newlines and tabs
    written out too, so "ok\nkill switch: off" cannot print a line of its own."""
    return visible(text, acting=LINE_ACTING)


def json_visible(text: str) -> str:
    """JSON text with those characters as JSON escapes: the same data, shown inert."""
    return TERMINAL_ACTING.sub(_escaped, text) if TERMINAL_ACTING.search(text) else text


class VisibleStream:
    """A text stream (stdout, stderr) that writes everything through `visible`."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(visible(text))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...
        return getattr(self.raw, name)
