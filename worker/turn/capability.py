"""Can this model do this turn? Tools and context window, decided before any call.

A backup that cannot call the turn's tools is skipped, unless the configuration
lets it run read-only (without the side-effecting tools). A backup whose window
is too small gets a trimmed history: whole exchanges dropped oldest first, the
system prompt and the current exchange (from the latest user message on) kept,
and a tool call never separated from its results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.settings import ModelSettings
from worker.turn.tokens import TOKENS_PER_REQUEST, message_tokens, tools_tokens
from worker.types import Message, Tool, TurnRequest

__all__ = ["Fit", "Unfit", "fit_turn", "trim_history"]


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
    tool_tokens = tools_tokens(tools)
    room = model.context_window - request.max_tokens - tool_tokens
    kept = _trim(request.messages, room)
    if kept is None:
        return Unfit(
            "context_too_small",
            f"the turn does not fit a {model.context_window}-token window even trimmed",
        )
    dropped = tuple(t.name for t in request.tools if t not in tools)
    trimmed, message_tokens = kept
    return Fit(
        messages=trimmed,
        tools=tools,
        input_tokens=message_tokens + tool_tokens,
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
    kept = _trim(messages, room_tokens)
    return None if kept is None else kept[0]


def _trim(messages: tuple[Message, ...], room: int) -> tuple[tuple[Message, ...], int] | None:
    """`trim_history`, with the estimate of what it kept; each message estimated once."""
    sized = [(m, message_tokens(m)) for m in messages]
    total = TOKENS_PER_REQUEST + sum(size for _, size in sized)
    if total <= room:
        return messages, total
    system = [pair for pair in sized if pair[0].role == "system"]
    rest = [pair for pair in sized if pair[0].role != "system"]
    latest_user = max((i for i, (m, _) in enumerate(rest) if m.role == "user"), default=0)
    current = rest[latest_user:]
    units = _units(rest[:latest_user])
    fixed = TOKENS_PER_REQUEST + sum(size for _, size in (*system, *current))
    history = total - fixed
    while units:
        history -= sum(size for _, size in units.pop(0))
        # Providers want the history to open with a user message.
        while units and units[0][0][0].role != "user":
            history -= sum(size for _, size in units.pop(0))
        if fixed + history <= room:
            kept = (*system, *(pair for unit in units for pair in unit), *current)
            return tuple(m for m, _ in kept), fixed + history
    return (tuple(m for m, _ in (*system, *current)), fixed) if fixed <= room else None


def _units(messages: Sequence[tuple[Message, int]]) -> list[list[tuple[Message, int]]]:
    """Group messages so an assistant's tool calls and their results stay together."""
    units: list[list[tuple[Message, int]]] = []
    for pair in messages:
        message = pair[0]
        if message.role == "tool" and units and units[-1][0][0].tool_calls:
            units[-1].append(pair)
        else:
            units.append([pair])
    return units
