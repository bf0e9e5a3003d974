"""Can this model do this turn? Inputs, output, tools and window, decided before any call.

A model that cannot take what the turn carries (an image, a PDF: its `inputs`) or give
what it asks for (`response_format`: its `structured_output`) is skipped, `incapable`,
the detail naming what it lacks: nothing is ever dropped to make a backup fit. A backup
that cannot call the turn's tools is skipped, unless the configuration lets it run
read-only (without the side-effecting tools), and never when the tool the turn forces
(`tool_choice`) would be one of those dropped. A backup whose window
is too small gets a trimmed history: whole exchanges dropped oldest first, the
system prompt and the current exchange (from the latest user message on) kept,
and a tool call never separated from its results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.adapters.wire_limits import WireLimits, image_type, limits_for
from worker.settings import ModelSettings
from worker.turn.media import MediaRule, media_rule
from worker.turn.tokens import (
    TOKENS_PER_REQUEST,
    message_tokens,
    options_tokens,
    tools_tokens,
    unsized_tokens,
)
from worker.types import ImagePart, Message, NamedTool, Tool, TurnRequest

__all__ = ["INCAPABLE", "Fit", "Unfit", "fit_turn", "trim_history", "wire_unfit"]

# Why a model is skipped when it cannot do what the turn needs (the detail says what).
INCAPABLE = "incapable"


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
    lacking = _lacking(request, model)
    if lacking is not None:
        return lacking
    tools = _tools_for(request, model)
    if isinstance(tools, Unfit):
        return tools
    tool_tokens = tools_tokens(tools) + options_tokens(request, tools)
    room = model.context_window - request.max_tokens - tool_tokens
    media = _media(model) if request.attachment_kinds else _TEXT_ONLY
    kept = _trim(request.messages, room, media)
    if kept is None:
        return Unfit(
            "context_too_small",
            f"the turn does not fit a {model.context_window}-token window even trimmed",
        )
    dropped = tuple(t.name for t in request.tools if t not in tools)
    trimmed, message_tokens = kept
    input_tokens = message_tokens + tool_tokens
    if request.attachment_kinds:
        # Trimming fits what can be measured; an attachment of unknown size is the
        # provider's to measure (a prompt over the window is refused, unbilled), so it
        # holds at most what the window leaves.
        unsized = unsized_tokens(trimmed, media)
        input_tokens += min(unsized, max(0, model.context_window - input_tokens))
    return Fit(
        messages=trimmed,
        tools=tools,
        input_tokens=input_tokens,
        trimmed_messages=len(request.messages) - len(trimmed),
        read_only=bool(dropped),
        dropped_tools=dropped,
    )


def wire_unfit(request: TurnRequest, wire: str, model_id: str) -> Unfit | None:
    """Why the provider API `wire` cannot carry the turn to `model_id`, if it cannot
    (`worker.adapters.wire_limits`); checked per provider, after the model's fit."""
    limits = limits_for(wire, model_id)
    if limits is None:
        return None
    problems = _field_problems(request, limits)
    if request.attachment_kinds:
        problems += _attachment_problems(request, limits)
    if not problems:
        return None
    unique = ", ".join(dict.fromkeys(problems))
    return Unfit(INCAPABLE, f"its {wire} API cannot carry {unique}")


def _field_problems(request: TurnRequest, limits: WireLimits) -> list[str]:
    problems: list[str] = []
    temperature, ceiling = request.temperature, limits.max_temperature
    if temperature is not None and ceiling is not None and temperature > ceiling:
        problems.append(f"a temperature over {ceiling:g}")
    both = temperature is not None and request.top_p is not None
    if both and not limits.temperature_with_top_p:
        problems.append("both temperature and top_p")
    if request.max_tokens < limits.min_max_tokens:
        problems.append(f"max_tokens under {limits.min_max_tokens}")
    if request.tool_choice == "none" and request.tools and not limits.tool_choice_none:
        problems.append('tool_choice "none" with tools')
    if isinstance(request.tool_choice, NamedTool) and not limits.named_tool_choice:
        problems.append("a named tool_choice")
    if limits.tool_name_letter_first:
        # Renaming the tools for this API would have to rename the model's calls back, in
        # the history and in every answer: the turn goes to a wire that takes its names.
        called = (c.name for m in request.messages for c in m.tool_calls)
        names = dict.fromkeys((*(t.name for t in request.tools), *called))
        problems.extend(
            f"the tool name {name!r} (it must start with a letter or _)"
            for name in names
            if not (name[:1].isascii() and (name[:1].isalpha() or name[:1] == "_"))
        )
    return problems


def _attachment_problems(request: TurnRequest, limits: WireLimits) -> list[str]:
    problems: list[str] = []
    images = documents = 0
    for message in request.messages:
        needs_text = limits.document_needs_text and not message.text
        if needs_text and any(not isinstance(p, ImagePart) for p in message.attachments):
            problems.append("a document without text beside it")
        for part in message.attachments:
            image = isinstance(part, ImagePart)
            images += image
            documents += not image
            what = "an image" if image else "a document"
            if message.role == "tool" and not limits.tool_result_attachments:
                problems.append(f"{what} in a tool result")
            if part.url is not None and not (limits.image_url if image else limits.document_url):
                problems.append(f"{what} by URL")
            elif isinstance(part, ImagePart):
                problems += _image_type_problem(part, limits)
            cap = limits.max_image_bytes if image else limits.max_document_bytes
            size = part.size_bytes
            if size is not None and cap is not None and size > cap:
                problems.append(f"{what} over {cap} bytes")
    if limits.max_images is not None and images > limits.max_images:
        problems.append(f"{images} images (at most {limits.max_images})")
    if limits.max_documents is not None and documents > limits.max_documents:
        problems.append(f"{documents} documents (at most {limits.max_documents})")
    return problems


def _image_type_problem(part: ImagePart, limits: WireLimits) -> list[str]:
    mime = image_type(part)
    if mime is None:
        return ["an image by URL that names no type"] if limits.image_url_typed else []
    if limits.image_types is not None and mime not in limits.image_types:
        return [f"an {mime} image"]
    return []


def _lacking(request: TurnRequest, model: ModelSettings) -> Unfit | None:
    """What the turn needs that the model does not declare: an input kind, JSON output."""
    kinds = request.attachment_kinds
    if not kinds and request.response_format is None:
        return None
    needs: list[str] = []
    if "image" in kinds and "image" not in model.inputs:
        needs.append("image input")
    if "document" in kinds and "pdf" not in model.inputs:
        needs.append("PDF input")
    if request.response_format is not None and not model.structured_output:
        needs.append("structured output")
    if not needs:
        return None
    return Unfit(INCAPABLE, f"the turn needs {' and '.join(needs)}, which the model lacks")


def _tools_for(request: TurnRequest, model: ModelSettings) -> tuple[Tool, ...] | Unfit:
    tools = request.tools
    if not tools or model.tools == "full":
        return tools
    allowed = tuple(t for t in tools if not t.side_effects) if model.tools == "read_only" else ()
    if allowed == tools:
        return tools
    forced = request.tool_choice
    if isinstance(forced, NamedTool) and all(t.name != forced.name for t in allowed):
        return Unfit(INCAPABLE, f"cannot call the tool the turn forces ({forced.name})")
    if forced == "required" and not allowed:
        return Unfit(INCAPABLE, "cannot call any of the turn's tools, and the turn requires one")
    if model.degrade_to_read_only:
        return allowed
    needed = ", ".join(t.name for t in tools if t not in allowed)
    return Unfit(INCAPABLE, f"cannot call the turn's tools ({needed})")


def trim_history(
    messages: tuple[Message, ...], room_tokens: int, media: MediaRule | None = None
) -> tuple[Message, ...] | None:
    """Drop whole exchanges, oldest first, until the messages fit `room_tokens`, images
    and PDFs counted by `media` (unset: as the vendor that bills the most).

    Returns None when even the system prompt and the current exchange do not fit.
    """
    kept = _trim(messages, room_tokens, media or media_rule(""))
    return None if kept is None else kept[0]


def _media(model: ModelSettings) -> MediaRule:
    return media_rule(model.vendor, model.image_token_multiplier)


# Any rule does for a turn without attachments: they are never read.
_TEXT_ONLY = media_rule("")


def _trim(
    messages: tuple[Message, ...], room: int, media: MediaRule
) -> tuple[tuple[Message, ...], int] | None:
    """`trim_history`, with the estimate of what it kept; each message estimated once."""
    sized = [(m, message_tokens(m, media)) for m in messages]
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
