"""The turn's fields a call's body does not carry, named for its attempt's report row.

Each API takes the turn's optional fields its own way, and some not at all: Converse has
no seed, a reasoning model refuses the sampling fields, a model that does not reason
refuses an effort, Claude refuses sampling while it thinks. What a wire leaves out is
read from the body the wire's own builder makes for the call, against the table below
(where each field goes on each wire), so the row names what was really not sent and
cannot drift from the builders. Only the conversation's tail goes into that body (from
its last assistant turn on, which is all that decides whether Claude may think): what a
field becomes never depends on the messages before it, and a long history is not
built twice (`bench/left_out.py`). A field relevo applies itself (stop sequences cut from
the answer where the API has none) is not left out; `parallel_tool_calls` means
nothing without tools, and is not counted then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from worker.adapters.anthropic import may_think
from worker.adapters.base import ProviderCall
from worker.adapters.bedrock import reasoning_origin
from worker.adapters.claude_options import options
from worker.adapters.converse_body import converse_body
from worker.adapters.gemini_body import request_body
from worker.adapters.openai import chat_options
from worker.adapters.responses_body import responses_body
from worker.adapters.vertex import publisher
from worker.adapters.wire_limits import converse_tool_family
from worker.errors import InvalidRequest
from worker.types import Message

__all__ = ["NO_TOOL_ERROR", "SENT_AS", "left_out"]

Path = tuple[str, ...]
# Applied by relevo to the answer where the body has no field for it.
APPLIED: tuple[Path, ...] = ((),)

_GEMINI: Mapping[str, tuple[Path, ...]] = {
    "temperature": (("generationConfig", "temperature"),),
    "top_p": (("generationConfig", "topP"),),
    "stop": (("generationConfig", "stopSequences"),),
    "seed": (("generationConfig", "seed"),),
    "reasoning_effort": (("generationConfig", "thinkingConfig"),),
    "parallel_tool_calls": (),
}
_CLAUDE: Mapping[str, tuple[Path, ...]] = {
    "temperature": (("temperature",),),
    "top_p": (("top_p",),),
    "stop": (("stop_sequences",),),
    "seed": (),
    "reasoning_effort": (("thinking",), ("output_config", "effort")),
    "parallel_tool_calls": (("tool_choice", "disable_parallel_tool_use"),),
}
SENT_AS: Mapping[str, Mapping[str, tuple[Path, ...]]] = MappingProxyType(
    {
        "openai": {
            "temperature": (("temperature",),),
            "top_p": (("top_p",),),
            "stop": (("stop",), *APPLIED),  # cut from a reasoning model's answer
            "seed": (("seed",),),
            "reasoning_effort": (("reasoning_effort",),),
            "parallel_tool_calls": (("parallel_tool_calls",),),
        },
        "openai-responses": {
            "temperature": (("temperature",),),
            "top_p": (("top_p",),),
            "stop": APPLIED,
            "seed": (),
            "reasoning_effort": (("reasoning", "effort"),),
            "parallel_tool_calls": (("parallel_tool_calls",),),
        },
        "anthropic": _CLAUDE,
        "vertex-anthropic": _CLAUDE,
        "gemini": _GEMINI,
        "vertex-google": _GEMINI,
        "bedrock": {
            "temperature": (("inferenceConfig", "temperature"),),
            "top_p": (("inferenceConfig", "topP"),),
            "stop": (("inferenceConfig", "stopSequences"),),
            "seed": (),
            "reasoning_effort": (
                ("additionalModelRequestFields", "thinking"),
                ("outputConfig", "effort"),
            ),
            "parallel_tool_calls": (),
        },
    }
)
"""Per wire, where each of the turn's optional fields goes in the body: any of these
paths present means it was sent; none (an empty tuple) means the API has no field for it."""
# The wires with no field for a failed tool (`Message.is_error`): its error goes as output.
# Converse has one (ToolResultBlock.status) for Claude and Nova only.
NO_TOOL_ERROR = frozenset({"openai", "openai-responses"})


def left_out(wire: str, call: ProviderCall) -> tuple[str, ...]:
    """The names of the turn's fields set on `call` that `wire`'s body does not carry."""
    try:
        body, table = _body(wire, replace(call, messages=_tail(call.messages)))
    except InvalidRequest:
        return ()  # the call itself is refused before it is sent
    missing: list[str] = []
    no_status = wire == "bedrock" and not converse_tool_family(call.model_id)
    if (wire in NO_TOOL_ERROR or no_status) and any(m.is_error for m in _tail(call.messages)):
        missing.append("is_error")
    for name, paths in table.items():
        if getattr(call, name) is None or (name == "parallel_tool_calls" and not call.tools):
            continue
        if not any(_has(body, path) for path in paths):
            missing.append(name)
    return tuple(missing)


def _body(
    wire: str, call: ProviderCall
) -> tuple[Mapping[str, Any], Mapping[str, tuple[Path, ...]]]:
    if wire == "vertex":
        wire = f"vertex-{publisher(call.model_id)}"
    table = SENT_AS[wire]
    match wire:
        case "openai":
            return chat_options(call), table
        case "openai-responses":
            return responses_body(call), table
        case "anthropic" | "vertex-anthropic":
            # Vertex takes no structured outputs from Claude: a forced answer tool instead.
            native = wire == "anthropic"
            return options(call, native=native, may_think=may_think(call.messages)), table
        case "gemini" | "vertex-google":
            return request_body(call, vertex=wire == "vertex-google"), table
        case _:
            return converse_body(call, reasoning_origin(call.model_id)), table


def _tail(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=None)
    return messages[-1:] if last is None else messages[last:]


def _has(body: Mapping[str, Any], path: Path) -> bool:
    node: Any = body
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True
