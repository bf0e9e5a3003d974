"""The reasoning a call carries: its target's family's, and nothing else.

One rule, decided when the attempt is planned rather than in each adapter: every
assistant message keeps only the reasoning items its target can read back
(`worker.adapters.reasoning_family`); the others are left out of that call, never
rewritten, and counted on the attempt's report row (`reasoning_left_out`). The turn's
own messages are not changed: a later call to the vendor that wrote them sends them again.
"""

from __future__ import annotations

from worker.types import Message, Reasoning

__all__ = ["carried_reasoning"]


def carried_reasoning(
    messages: tuple[Message, ...], family: str | None
) -> tuple[tuple[Message, ...], int]:
    """`messages` with only `family`'s reasoning (None: none), and how many items were
    left out."""
    left_out = 0
    out: list[Message] = []
    for message in messages:
        if not message.reasoning:
            out.append(message)
            continue
        kept = tuple(r for r in message.reasoning if r.origin == family)
        left_out += len(message.reasoning) - len(kept)
        out.append(message if len(kept) == len(message.reasoning) else _with(message, kept))
    return (messages if not left_out else tuple(out)), left_out


def _with(message: Message, reasoning: tuple[Reasoning, ...]) -> Message:
    return message.model_copy(update={"reasoning": reasoning})
