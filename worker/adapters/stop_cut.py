"""Stop sequences applied by relevo, for a model whose API refuses them.

OpenAI's reasoning models answer 400 to `stop` ("Unsupported parameter"). Rather than
drop the caller's stop sequences, the adapter does not send them and cuts the answer
itself, as the API documents its own cut: the text ends before the first stop sequence,
which is not part of it. The model may write past it (those tokens are billed: usage
stays the provider's); none of that text reaches the caller, streamed or not.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Sequence

from worker.adapters.base import Completion, Event, TextDelta
from worker.adapters.finish import FinishReason

__all__ = ["cut_at_stops"]


class _StopCut:
    """Streamed text, released up to the first stop sequence.

    Text that could be the start of a stop sequence is held back until the next piece
    shows whether it is one; so is a stop sequence found after such text, since a longer
    one beginning earlier would be the first (`["a", "bac"]` in "ba|c" cuts at "bac").
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.cut = False

    def feed(self, text: str) -> str:
        """The part of `text` (with what was held back) that is answer for sure."""
        if self.cut:
            return ""
        pending = self._held + text
        kept, found = _cut_text(pending, self._stops)
        # Where a stop sequence that has not ended yet may begin.
        undecided = len(pending) - max((_overlap(pending, s) for s in self._stops), default=0)
        if found and len(kept) <= undecided:
            self.cut, self._held = True, ""
            return kept
        self._held = pending[undecided:]
        return pending[:undecided]

    def flush(self) -> str:
        """What was held back, once the text has ended, up to its first stop sequence."""
        held, self._held = self._held, ""
        kept, self.cut = _cut_text(held, self._stops)
        return kept


def cut_at_stops(
    events: AsyncGenerator[Event, None], stops: Sequence[str]
) -> AsyncGenerator[Event, None]:
    """`events` with the answer's text cut before its first stop sequence.

    The `Completion` carries the text the deltas streamed before it, and the finish
    reason `stop` when a sequence was found.
    """
    return _cut(events, tuple(s for s in stops if s))


async def _cut(
    events: AsyncGenerator[Event, None], stops: tuple[str, ...]
) -> AsyncGenerator[Event, None]:
    streamed = _StopCut(stops)
    async with contextlib.aclosing(events) as inner:  # closing us closes the HTTP response
        async for event in inner:
            if isinstance(event, TextDelta):
                kept = streamed.feed(event.text)
                if kept:
                    yield TextDelta(kept)
            elif isinstance(event, Completion):
                rest = streamed.flush()
                if rest:
                    yield TextDelta(rest)
                text, found = _cut_text(event.text, stops)
                finish = FinishReason.STOP if found else event.finish_reason
                yield dataclasses.replace(event, text=text, finish_reason=finish)
            else:
                yield event


def _cut_text(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """`text` before its first stop sequence, and whether there was one."""
    found = [at for at in (text.find(s) for s in stops) if at >= 0]
    return (text[: min(found)], True) if found else (text, False)


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop` (shorter than it)."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0
