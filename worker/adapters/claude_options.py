"""A turn's options in a Messages body: tool_choice, sampling, thinking, the answer's format.

Claude's generations do not all take the same body (platform.claude.com/docs/en/about-
claude/models/migration-guide): Claude 4 and later refuse `temperature` with `top_p`;
Claude Opus 4.7 and later, and the Claude 5 models, refuse the sampling fields and a
thinking budget (`thinking: {"type": "adaptive"}` with `output_config.effort` instead);
structured outputs (`output_config.format`) came with Claude 4.5. Which generation a
model is comes from its id (`generation`): an id this cannot read (an alias behind a
gateway) is taken for a current model that still takes a thinking budget.

What each field becomes is tabled in docs/providers.md ("Anthropic Messages").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from worker.adapters.base import ProviderCall
from worker.adapters.claude_schema import claude_schema
from worker.errors import InvalidRequest
from worker.types import JsonSchemaFormat, NamedTool

__all__ = [
    "EFFORT_BUDGET_TOKENS",
    "AnswerTool",
    "Generation",
    "answer_tool",
    "generation",
    "options",
    "thinking_budget",
]

EFFORT_BUDGET_TOKENS: Mapping[str, int] = MappingProxyType(
    {"low": 1024, "medium": 4096, "high": 16384}
)
"""The thinking budget a `reasoning_effort` asks for, capped at half of `max_tokens` (the
answer keeps the other half); under the API's minimum of 1024 no thinking is asked."""
_MIN_BUDGET_TOKENS = 1024

# (version since which, families that have it whatever their version number)
_ADAPTIVE_ONLY = ((4, 7), frozenset({"mythos", "fable"}))
_STRUCTURED_OUTPUTS = ((4, 5), frozenset({"mythos", "fable"}))
# claude-3-5-sonnet-20241022, claude-opus-4-1@20250805, anthropic.claude-sonnet-5, ...
_MODEL_ID = re.compile(
    r"claude-(?:(?P<old>\d)(?:-(?P<old_minor>\d))?-)?(?P<family>[a-z]+)"
    r"(?:-(?P<major>\d{1,2})(?!\d)(?:-(?P<minor>\d{1,2})(?!\d))?)?"
)
_FORCING = frozenset({"any", "tool"})


@dataclass(frozen=True, slots=True)
class Generation:
    """What a Claude model's Messages API takes, as far as a turn's options go."""

    adaptive_only: bool  # thinking only adaptive; temperature, top_p refused
    structured_outputs: bool  # output_config.format


@dataclass(frozen=True, slots=True)
class AnswerTool:
    """The forced tool that carries a `response_format` where it is not sent natively:
    the answer is its input (`answer` inside it when the schema is not an object's)."""

    name: str
    input_schema: Mapping[str, Any]
    wrapped: bool

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": "Give your answer by calling this tool: its input is the answer.",
            "input_schema": dict(self.input_schema),
        }


def generation(model_id: str) -> Generation:
    """What `model_id` takes, read from its version (an unreadable id: a current model)."""
    found = _MODEL_ID.search(model_id)
    if found is None:
        return Generation(adaptive_only=False, structured_outputs=True)
    major, minor = found["old"] or found["major"], found["old_minor"] or found["minor"]
    version = None if major is None else (int(major), int(minor or 0))

    def since(rule: tuple[tuple[int, int], frozenset[str]], unknown: bool) -> bool:
        if found["family"] in rule[1]:
            return True
        return unknown if version is None else version >= rule[0]

    return Generation(
        adaptive_only=since(_ADAPTIVE_ONLY, False),
        structured_outputs=since(_STRUCTURED_OUTPUTS, True),
    )


def answer_tool(call: ProviderCall, *, native: bool) -> AnswerTool | None:
    """The forced tool that carries the call's `response_format`, if it needs one: always
    for `json_object` (Claude has no schema-less JSON mode), for a schema where the API
    (`native`: the wire has structured outputs) or the model cannot take it; never when
    the turn forces one of its own tools (the answer comes on a later turn)."""
    wanted = call.response_format
    if wanted is None or _forces_own(call) or _native_format(call, native=native):
        return None
    if isinstance(wanted, JsonSchemaFormat):
        schema, name = wanted.json_schema, wanted.name
    else:
        schema, name = {"type": "object"}, "json_answer"
    taken = {t.name for t in call.tools}
    name = next((n for n in (name, f"{name}_answer"[:64], "relevo_answer") if n not in taken), "")
    if not name:
        raise InvalidRequest("no free tool name for the answer's format: rename the turn's tools")
    combined = any(k in schema for k in ("anyOf", "oneOf", "allOf"))
    if schema.get("type") == "object" and not combined:
        return AnswerTool(name, schema, wrapped=False)
    # A tool's input is an object: any other answer goes inside one ($defs stay at the root).
    inner = {k: v for k, v in schema.items() if k != "$defs"}
    wrapper = {"type": "object", "properties": {"answer": inner}, "required": ["answer"]}
    if "$defs" in schema:
        wrapper["$defs"] = schema["$defs"]
    return AnswerTool(name, wrapper, wrapped=True)


def options(call: ProviderCall, *, native: bool, may_think: bool) -> dict[str, Any]:
    """The body fields for the call's options, the answer tool among its tools when
    there is one. `native`: the wire has structured outputs; `may_think`: the
    conversation lets Claude think (`anthropic.may_think`)."""
    body: dict[str, Any] = {}
    answer = answer_tool(call, native=native)
    tools = [answer.definition()] if answer is not None else []
    tools.extend(
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in call.tools
    )
    if tools:
        body["tools"] = tools
    choice = _tool_choice(call, answer)
    if choice is not None:
        body["tool_choice"] = choice
    model = generation(call.model_id)
    forced = choice is not None and choice["type"] in _FORCING
    thinking = _thinking(call, model) if may_think and not forced else None
    if thinking is not None:
        body["thinking"] = thinking
    if call.stop:
        body["stop_sequences"] = list(call.stop)
    # Claude refuses sampling while thinking, and newer models always (adaptive-only).
    if thinking is None and not model.adaptive_only:
        # Capability fit skips a Claude wire for a temperature over 1, or with both set
        # (`worker.adapters.wire_limits`): nothing is clamped or dropped here.
        if call.temperature is not None and call.top_p is not None:
            raise InvalidRequest("Claude takes temperature or top_p, not both")
        if call.temperature is not None:
            body["temperature"] = call.temperature
        elif call.top_p is not None:
            body["top_p"] = call.top_p
    output: dict[str, Any] = {}
    if model.adaptive_only and call.reasoning and call.reasoning_effort is not None:
        output["effort"] = call.reasoning_effort
    wanted = call.response_format
    if isinstance(wanted, JsonSchemaFormat) and _native_format(call, native=native):
        output["format"] = {"type": "json_schema", "schema": claude_schema(wanted.json_schema)}
    if output:
        body["output_config"] = output
    return body


def _native_format(call: ProviderCall, *, native: bool) -> bool:
    return (
        native
        and isinstance(call.response_format, JsonSchemaFormat)
        and generation(call.model_id).structured_outputs
    )


def _forces_own(call: ProviderCall) -> bool:
    return call.tool_choice == "required" or isinstance(call.tool_choice, NamedTool)


def _tool_choice(call: ProviderCall, answer: AnswerTool | None) -> dict[str, Any] | None:
    """`tool_choice` in the API's shape; none without tools (the API refuses it then)."""
    choice = call.tool_choice
    if answer is not None:
        # The answer is the forced tool's input; the turn's own tools stay callable.
        forced = {"type": "any"} if call.tools and choice != "none" else None
        shaped: dict[str, Any] = forced or {"type": "tool", "name": answer.name}
    elif not call.tools:
        return None
    elif isinstance(choice, NamedTool):
        shaped = {"type": "tool", "name": choice.name}
    elif choice is None:
        if call.parallel_tool_calls is None:
            return None
        shaped = {"type": "auto"}
    else:
        shaped = {"type": {"required": "any"}.get(choice, choice)}
    if call.parallel_tool_calls is not None and shaped["type"] != "none":
        shaped["disable_parallel_tool_use"] = not call.parallel_tool_calls
    return shaped


def _thinking(call: ProviderCall, model: Generation) -> dict[str, Any] | None:
    """Extended thinking, when the model's settings or the turn's effort ask for it (the
    API refuses it with a forced tool, and on a tool loop that another vendor began)."""
    effort = call.reasoning_effort if call.reasoning else None
    configured = call.thinking_budget_tokens
    if configured is None and effort is None:
        return None
    if model.adaptive_only:
        return {"type": "adaptive"}
    budget = thinking_budget(call)
    return None if budget is None else {"type": "enabled", "budget_tokens": budget}


def thinking_budget(call: ProviderCall) -> int | None:
    """The thinking budget of a Claude call on any wire: the model's configured budget
    (sent when below `max_tokens`), else the turn's effort (`EFFORT_BUDGET_TOKENS`, at
    most half of `max_tokens`); None when under the API's minimum, or neither is set."""
    configured = call.thinking_budget_tokens
    effort = call.reasoning_effort if call.reasoning else None
    if configured is not None:
        budget = configured if configured < call.max_tokens else 0
    elif effort is not None:
        budget = min(EFFORT_BUDGET_TOKENS[effort], call.max_tokens // 2)
    else:
        return None
    return budget if budget >= _MIN_BUDGET_TOKENS else None
