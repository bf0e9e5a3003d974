"""docs/configuration.md, written from the settings models: every key with its type,
default, environment variable and meaning (the field's docstring).

    python -m worker.cli.config_reference > docs/configuration.md

`tests/test_docs.py` fails when the page differs from what this prints, so a setting
added without its page regenerated (or without a docstring) is caught.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeGuard, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from worker.settings import Settings

__all__ = ["Key", "keys", "main", "reference"]

INTRO = """\
# Configuration

One TOML file, read once and validated at start-up: a bad key fails with a message
naming it. `examples/chain.toml` is a complete, commented example (OpenAI with Azure
failover, Anthropic, Gemini) holding every key below, the optional sections at their
defaults; `examples/simulated.toml` points at `relevo simulate`. Commands take the file
as `--config FILE`, or from the `RELEVO_CONFIG` variable.

Environment variables override the file: `RELEVO_` and the key's path joined by `__`
(`RELEVO_TURN_DEADLINE_S=30`,
`RELEVO_PROVIDERS__OPENAI__BASE_URL=http://127.0.0.1:8900/v1`), lists and tables as
JSON; a variable set to the empty string counts as unset. A provider's name is part of
its variables, so name providers with letters, digits and `_` to override them; a
model's slug holds a `/`, so `[models]` is set in the file only. Amounts are dollars in
the file and integer micro-dollars everywhere else.

`relevo config check --config FILE` reads the file and the environment as a worker
would, runs the same checks, and prints every key's effective value (passwords and
keys redacted) with the variable that set it. A misspelt key is refused with the
nearest real one (`chain.modles: Extra inputs are not permitted (did you mean
'models'?)`); a list or table variable that is not JSON is named with what it expects;
a `RELEVO_` variable that sets nothing (`RELEVO_REDIS_URL`, one underscore) is not an
error, since pydantic-settings ignores it, but every command warns about it on stderr
with the nearest real name. Configuration errors exit 2, in one line.

This page is written by `python -m worker.cli.config_reference` from the settings
models (the `worker.settings` package); each meaning is the field's docstring there.
"""


@dataclass(frozen=True)
class Key:
    """One configuration key as the page lists it."""

    path: str
    type: str
    default: str
    env: str
    meaning: str


# How a dict's key is spelled in a key path and in its environment variable.
_PLACEHOLDERS = {
    "providers": ("NAME", "NAME"),
    "models": ('"SLUG"', None),
    "chains": ("NAME", "NAME"),
}


def keys() -> Iterator[tuple[str, str, list[Key]]]:
    """Each section (title, its model's docstring, its keys) in the order of `Settings`."""
    top = [_key((name,), ("RELEVO", name.upper()), field) for name, field in _leaves(Settings)]
    yield "Top level", "", top
    yield from _sections(Settings, (), ("RELEVO",))


def _leaves(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    for name, field in model.model_fields.items():
        if _section_of(field) is None:
            yield name, field


def _section_of(field: FieldInfo) -> tuple[type[BaseModel], str | None] | None:
    """The model a field opens a section of, and the dict placeholder when it is a table."""
    annotation = field.annotation
    if _is_model(annotation):
        return annotation, None
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        if _is_model(value):
            return value, "dict"
    return None


def _is_model(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


def _sections(
    model: type[BaseModel], path: tuple[str, ...], env: tuple[str, ...] | None
) -> Iterator[tuple[str, str, list[Key]]]:
    for name, field in model.model_fields.items():
        found = _section_of(field)
        if found is None:
            continue
        section, table = found
        here, here_env = (*path, name), None if env is None else (*env, name.upper())
        if table is not None:
            spelled, env_spelled = _PLACEHOLDERS[name]
            here = (*here, spelled)
            here_env = None if here_env is None or env_spelled is None else (*here_env, env_spelled)
        title = "[" + ".".join(here) + "]"
        rows = [
            _key((*here, leaf), None if here_env is None else (*here_env, leaf.upper()), info)
            for leaf, info in _leaves(section)
        ]
        rows += _nested_lists(section, here)
        yield title, inspect.cleandoc(section.__doc__ or ""), rows
        yield from _sections(section, here, here_env)


def _nested_lists(model: type[BaseModel], path: tuple[str, ...]) -> list[Key]:
    """Keys of a list of tables (`serve = [{provider, model_id}]`), one row per field."""
    rows = []
    for name, field in model.model_fields.items():
        args = get_args(field.annotation)
        if get_origin(field.annotation) is tuple and args and _is_model(args[0]):
            for leaf, info in args[0].model_fields.items():
                rows.append(_key((*path, f"{name}[]", leaf), None, info))
    return rows


def _key(path: tuple[str, ...], env: tuple[str, ...] | None, field: FieldInfo) -> Key:
    if not field.description:
        raise ValueError(f"{'.'.join(path)}: no docstring (the worker.settings package)")
    return Key(
        path=".".join(path),
        type=_type(field),
        default=_default(field),
        env="—" if env is None else "`" + "__".join(env).replace("RELEVO__", "RELEVO_") + "`",
        meaning=" ".join(field.description.split()),
    )


def _type(field: FieldInfo) -> str:
    text = _annotation(field.annotation)
    bounds = [
        f"{sign} {_number(getattr(item, attr))}"
        for item in field.metadata
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"))
        if isinstance(item, annotated_types.BaseMetadata) and hasattr(item, attr)
    ]
    lengths = [
        f"{word} {getattr(item, attr)}"
        for item in field.metadata
        for attr, word in (("min_length", "at least"), ("max_length", "at most"))
        if isinstance(item, annotated_types.BaseMetadata) and getattr(item, attr, None)
    ]
    if text.startswith(("list", "text")):
        bounds = []  # a text's max_length is not worth the column
    extra = bounds + (lengths if text.startswith("list") else [])
    return text + (f" ({', '.join(extra)})" if extra else "")


_SIMPLE = {bool: "boolean", int: "integer", float: "number", str: "text", Path: "path"}
_SIMPLE[Decimal] = "decimal"


def _annotation(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if hasattr(annotation, "__metadata__"):  # Annotated[str, pattern]: a name or a slug
        annotation, origin, args = annotation.__origin__, None, ()
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        unset = " or unset" if len(inner) < len(args) else ""
        text = " or ".join(_annotation(a) for a in inner) + unset
    elif origin is Literal:
        text = " \\| ".join(f'`"{a}"`' for a in args)
    elif origin is tuple:
        text = f"list of {_annotation(args[0])}"
    elif origin is dict:
        text = f"table of {_annotation(args[1])}"
    elif _is_model(annotation):
        text = "{" + ", ".join(annotation.model_fields) + "}"
    else:
        text = _SIMPLE.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return text


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    return f"`{_toml(value)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Enum):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, int | float | Decimal):
        return _number(value)
    return str(value)


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if "`" not in text else text.replace(" | ", " \\| ")


def reference() -> str:
    """The whole page."""
    out = [INTRO]
    for title, doc, rows in keys():
        if not rows:
            continue
        out += [f"## {title.replace('[', '`[').replace(']', ']`') if title[0] == '[' else title}"]
        if doc:
            out += ["", doc]
        out += ["", "| key | type | default | environment variable | meaning |"]
        out += ["| --- | --- | --- | --- | --- |"]
        for key in rows:
            cells = (f"`{key.path}`", key.type, key.default, key.env, _cell(key.meaning))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    print(reference(), end="")


if __name__ == "__main__":
    main()
