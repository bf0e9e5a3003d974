"""What a caller sends: the turn request, its tools, tool choice and answer format, and how
it is validated."""

from __future__ import annotations

import json
import uuid
from functools import cached_property
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from worker.errors import InputError
from worker.types.base import (
    MAX_METADATA_PAIRS,
    ChainName,
    Frozen,
    MetadataKey,
    MetadataValue,
    TenantId,
    ToolName,
    TurnId,
)
from worker.types.messages import Message


class Tool(Frozen):
    """A tool the model may call. `side_effects` marks tools that change the world.

    `parameters` is a JSON Schema for an object (the call's arguments): `{}`, a tool with
    no arguments, is the object with no properties, as every provider wants it said; a
    schema of another type is refused, since no provider takes one."""

    name: ToolName
    description: str = Field(default="", max_length=4096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    side_effects: bool = False

    @field_validator("parameters")
    @classmethod
    def _an_object(cls, parameters: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if not parameters:
            return {"type": "object", "properties": {}}
        kind = parameters.get("type", "object")
        if kind != "object":
            tool = info.data.get("name", "?")
            raise ValueError(
                f'tool {tool!r}: parameters must be a JSON Schema of type "object" (the '
                f"call's arguments), not {json.dumps(kind)}"
            )
        return parameters


class NamedTool(Frozen):
    """`tool_choice` forcing one tool, by name (it must be one of the turn's tools)."""

    name: ToolName


ToolChoice = Literal["auto", "none", "required"] | NamedTool


class JsonSchemaFormat(Frozen):
    """Answer with JSON that validates against `schema` (a JSON Schema object)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )

    type: Literal["json_schema"] = "json_schema"
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool = False  # as OpenAI: true asks for its strict subset of JSON Schema

    @model_validator(mode="after")
    def _a_schema(self) -> JsonSchemaFormat:
        try:
            Draft202012Validator.check_schema(self.json_schema)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(f"not a JSON Schema (at {where}: {exc.message[:200]})") from None
        return self


class JsonObjectFormat(Frozen):
    """Answer with a JSON object, of no particular schema."""

    type: Literal["json_object"] = "json_object"


ResponseFormat = Annotated[JsonSchemaFormat | JsonObjectFormat, Field(discriminator="type")]


class TurnRequest(Frozen):
    """One agent turn: one LLM request with its messages and tools.

    The sampling fields, `seed`, `reasoning_effort` and `parallel_tool_calls` are sent
    only when set: unset, each provider's own default applies.
    """

    turn_id: TurnId = Field(default_factory=lambda: uuid.uuid4().hex)
    tenant_id: TenantId
    messages: tuple[Message, ...] = Field(min_length=1)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    max_tokens: int = Field(default=1024, ge=1, le=200_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    # Four: the fewest any provider takes (OpenAI's Chat Completions).
    stop: tuple[Annotated[str, StringConstraints(min_length=1, max_length=256)], ...] | None = (
        Field(default=None, min_length=1, max_length=4)
    )
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    deadline_s: float = Field(default=60.0, gt=0, le=3600)
    # Written only when set: a turn naming none is as relevo 0.1.0's workers read it.
    chain: ChainName | None = Field(default=None, exclude_if=lambda name: name is None)
    """The chain to run on (`[chains.NAME]`, or `default`); unset, the tenant's default
    chain, else `default` (docs/routing.md)."""
    metadata: dict[MetadataKey, MetadataValue] = Field(
        default_factory=dict,
        max_length=MAX_METADATA_PAIRS,
        exclude_if=lambda pairs: not pairs,
    )
    """A few string pairs the turn carries for attribution (`{"agent": "triage"}`): into
    its result, its log lines and its trace, never into a metric label."""

    @cached_property
    def attachment_kinds(self) -> frozenset[str]:
        """The kinds of attachment the turn carries (`image`, `document`), for fitting."""
        return frozenset(p.type for m in self.messages for p in m.attachments)

    @model_validator(mode="before")
    @classmethod
    def _encodable(cls, data: Any) -> Any:
        # Python's JSON decoder (Celery's) lets lone surrogates through; no request can carry them.
        where = lone_surrogate(data)
        if where is not None:
            raise ValueError(f"{where}: text with a lone surrogate is not valid Unicode")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TurnRequest:
        if self.messages[-1].role not in ("user", "tool"):
            raise ValueError("the last message must come from the user or a tool")
        names = [tool.name for tool in self.tools]
        if len(names) != len(set(names)):
            raise ValueError("tool names must be unique")
        choice = self.tool_choice
        if isinstance(choice, NamedTool) and choice.name not in names:
            raise ValueError(f"tool_choice names {choice.name!r}, which is not one of the tools")
        if choice == "required" and not self.tools:
            raise ValueError("tool_choice is 'required' but the turn has no tools")
        if self.parallel_tool_calls is not None and not self.tools:
            raise ValueError("parallel_tool_calls is set but the turn has no tools")
        return self


def lone_surrogate(value: object) -> str | None:
    """The path of a string (or key) in `value` that cannot be encoded as UTF-8, if any."""
    stack: list[tuple[str, object]] = [("(root)", value)]
    while stack:  # a loop, not recursion: the nesting depth is the sender's choice
        where, item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return where
        elif isinstance(item, dict):
            for key, child in item.items():
                shown = str(key).encode("utf-8", "backslashreplace").decode()
                path = shown if where == "(root)" else f"{where}.{shown}"
                stack.extend(((path, key), (path, child)))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}.{i}".removeprefix("(root)."), c) for i, c in enumerate(item))
    return None


def parse_turn_request(
    data: bytes | str | dict[str, Any], *, ignore_unknown: bool = False
) -> TurnRequest:
    """Validate a turn request from JSON or a dict; `InputError` names the bad field.

    A field the request does not know is refused, as any other mistake of its sender's;
    `ignore_unknown` drops it instead, for a turn a newer release queued (a worker's read).
    """
    extra: Literal["ignore", "forbid"] = "ignore" if ignore_unknown else "forbid"
    try:
        if isinstance(data, dict):
            return TurnRequest.model_validate(data, extra=extra)
        return TurnRequest.model_validate_json(data, extra=extra)
    except ValidationError as exc:
        raise InputError(describe_validation_error(exc)) from None


def _shown(part: object) -> str:
    text = str(part)
    return text if text.isprintable() and len(text) <= 100 else repr(text[:100])


def describe_validation_error(exc: ValidationError, *, most: int | None = None) -> str:
    """One line per problem (the first `most`), each naming its field; never echoes the
    input value."""
    errors = exc.errors(include_input=False, include_url=False)
    lines = []
    for error in errors[:most]:
        # A field name is the sender's (a metadata key, an unknown field): shown as a
        # Python literal when it holds a character that could break the line.
        where = ".".join(_shown(part) for part in error["loc"]) or "(root)"
        message = error["msg"]
        if error["type"] == "union_tag_invalid":  # pydantic's message quotes the tag given
            ctx = error.get("ctx", {})
            message = f"{ctx.get('discriminator')} is not one of {ctx.get('expected_tags')}"
        lines.append(f"{where}: {message}")
    if len(errors) > len(lines):
        lines.append(f"and {len(errors) - len(lines)} more")
    return "; ".join(lines)
