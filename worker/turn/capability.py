"""Can this model do this turn? Tools and context window, decided before any call.

A backup that cannot call the turn's tools is skipped, unless the configuration
lets it run read-only (without the side-effecting tools). A backup whose window
is too small gets a trimmed history: whole exchanges dropped oldest first, the
system prompt and the current exchange (from the latest user message on) kept,
and a tool call never separated from its results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from worker.settings import ModelSettings
from worker.types import Message, Tool, TurnRequest

__all__ = ["Fit", "Unfit", "estimate_tokens", "fit_turn", "trim_history"]

# A rough, provider-neutral count: about four characters per token, plus a
# little framing per message. Good enough to decide trimming and to reserve
# a worst-case budget; the provider's reported usage settles the real cost.
_CHARS_PER_TOKEN = 4
_TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True, slots=True)
class Fit:
    """How to call a model for this turn."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    input_tokens: int
    trimmed_messages: int = 0
    read_only: bool = False
    dropped_tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Unfit:
    """Why a model cannot do this turn: `incapable` or `context_too_small`."""

    reason: str
    detail: str


def estimate_tokens(messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
    """An upper-leaning estimate of the prompt's size in tokens."""
    chars = 0
    for message in messages:
        chars += len(message.content)
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(call.arguments))
    for tool in tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    return -(-chars // _CHARS_PER_TOKEN) + _TOKENS_PER_MESSAGE * len(messages)


def fit_turn(request: TurnRequest, model: ModelSettings, *, min_window: int = 0) -> Fit | Unfit:
    """Decide the tools and messages to send `model`, or why it cannot be used."""
    if model.context_window < min_window:
        return Unfit(
            "context_too_small",
            f"window {model.context_window} is not larger than one that was already too small",
        )
    tools = _tools_for(request.tools, model)
    if isinstance(tools, Unfit):
        return tools
    room = model.context_window - request.max_tokens - estimate_tokens((), tools)
    trimmed = trim_history(request.messages, room)
    if trimmed is None:
        return Unfit(
            "context_too_small",
            f"the turn does not fit a {model.context_window}-token window even trimmed",
        )
    dropped = tuple(t.name for t in request.tools if t not in tools)
    return Fit(
        messages=trimmed,
        tools=tools,
        input_tokens=estimate_tokens(trimmed, tools),
        trimmed_messages=len(request.messages) - len(trimmed),
        read_only=bool(dropped),
        dropped_tools=dropped,
    )


def _tools_for(tools: tuple[Tool, ...], model: ModelSettings) -> tuple[Tool, ...] | Unfit:
    if not tools or model.tools == "full":
        return tools
    allowed = tuple(t for t in tools if not t.side_effects) if model.tools == "read_only" else ()
    if allowed == tools:
        return tools
    if model.degrade_to_read_only:
        return allowed
    needed = ", ".join(t.name for t in tools if t not in allowed)
    return Unfit("incapable", f"cannot call the turn's tools ({needed})")


def trim_history(messages: tuple[Message, ...], room_tokens: int) -> tuple[Message, ...] | None:
    """Drop whole exchanges, oldest first, until the messages fit `room_tokens`.

    Returns None when even the system prompt and the current exchange do not fit.
    """
    if estimate_tokens(messages) <= room_tokens:
        return messages
    system = [m for m in messages if m.role == "system"]
    rest = [m for m in messages if m.role != "system"]
    latest_user = max((i for i, m in enumerate(rest) if m.role == "user"), default=0)
    current = rest[latest_user:]
    units = _units(rest[:latest_user])
    while units:
        units.pop(0)
        # Providers want the history to open with a user message.
        while units and units[0][0].role != "user":
            units.pop(0)
        kept = (*system, *(m for unit in units for m in unit), *current)
        if estimate_tokens(kept) <= room_tokens:
            return kept
    kept = (*system, *current)
    return kept if estimate_tokens(kept) <= room_tokens else None


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """Group messages so an assistant's tool calls and their results stay together."""
    units: list[list[Message]] = []
    for message in messages:
        if message.role == "tool" and units and units[-1][0].tool_calls:
            units[-1].append(message)
        else:
            units.append([message])
    return units
