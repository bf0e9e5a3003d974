"""Which `RELEVO_*` variables set which settings, and the nearest real name to a wrong one.

pydantic-settings reads `RELEVO_<KEY>` and `RELEVO_<SECTION>__<KEY>` (any case) and
silently ignores every other `RELEVO_` variable; a list or a table must be JSON, and a
value that is not fails deep inside it. This module walks the settings models the way it
reads them, so that a variable that sets nothing, a key misspelt in the file and a
variable that is not JSON can each be named in one line.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from worker.settings.environment import PREFIX

__all__ = [
    "PREFIX",
    "assignments",
    "json_problems",
    "nearest_key",
    "nearest_variable",
    "setting_of",
    "unknown",
]

_DELIMITER = "__"
_FIELD = re.compile(r'field "(\w+)"')


def setting_of(name: str, model: type[BaseModel]) -> tuple[str, ...] | None:
    """The key path `name` sets in `model` (`RELEVO_REDIS__URL`: `("redis", "url")`), or
    None when it sets nothing. Names are read case-insensitively, as pydantic-settings does."""
    if not name.upper().startswith(PREFIX):
        return None
    parts = name[len(PREFIX) :].lower().split(_DELIMITER)
    annotation: Any = model
    for part in parts:
        # Only tables lead further down: a list's items are not addressed one by one.
        if not part or (_model(annotation) is None and _dict_value(annotation) is None):
            return None
        annotation = _below(annotation, part)
    return None if annotation is None else tuple(parts)


def assignments(environ: Mapping[str, str], model: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """The variables of `environ` that set something (empty ones are unset), and what."""
    found = {}
    for name, text in environ.items():
        path = setting_of(name, model) if text else None
        if path is not None:
            found[name] = path
    return found


def unknown(
    environ: Mapping[str, str], model: type[BaseModel], others: Iterable[str] = ()
) -> list[str]:
    """The `RELEVO_` variables of `environ` that pydantic-settings ignores: not under a
    setting, not one of `others` (names relevo reads besides the settings, any case),
    not empty (an empty variable is an unset one), sorted. One under a table that is no
    key of it is not ignored: it fails validation."""
    skip = {name.upper() for name in others}
    return sorted(
        name
        for name, text in environ.items()
        if text
        and name.upper().startswith(PREFIX)
        and name.upper() not in skip
        and not _read(name, model)
    )


def _read(name: str, model: type[BaseModel]) -> bool:
    """Whether pydantic-settings takes `name` in: its first part is a key, and a table's
    when more parts follow."""
    head, *rest = name[len(PREFIX) :].lower().split(_DELIMITER)
    field = model.model_fields.get(head)
    if field is None:
        return False
    return (
        not rest
        or _model(field.annotation) is not None
        or _dict_value(field.annotation) is not None
    )


def nearest_variable(name: str, model: type[BaseModel]) -> str | None:
    """The real variable closest to `name` (`RELEVO_REDIS_URL`: `RELEVO_REDIS__URL`)."""
    # Compared without the prefix they all share, which would make any two look alike.
    real = {variable[len(PREFIX) :]: variable for variable in _variables(model)}
    wanted = name.upper().removeprefix(PREFIX)
    close = difflib.get_close_matches(wanted, list(real), n=1, cutoff=0.75)
    return real[close[0]] if close else None


def _variables(model: type[BaseModel], path: str = PREFIX.rstrip("_")) -> Iterator[str]:
    for key, field in model.model_fields.items():
        here = f"{path}{'_' if path == 'RELEVO' else _DELIMITER}{key.upper()}"
        yield here
        below = _model(field.annotation)
        value = _dict_value(field.annotation)
        if below is not None:
            yield from _variables(below, here)
        elif value is not None and (inner := _model(value)) is not None:
            yield from _variables(inner, f"{here}{_DELIMITER}NAME")


def nearest_key(model: type[BaseModel], loc: Iterable[int | str]) -> str | None:
    """For a key `loc` that `model` does not have, the nearest key its table does have."""
    *parents, last = [str(part) for part in loc]
    annotation: Any = model
    for part in parents:
        annotation = _below(annotation, part)
    table = _model(annotation)
    if table is None:
        return None
    close = difflib.get_close_matches(last, list(table.model_fields), n=1, cutoff=0.6)
    return close[0] if close else None


def _below(annotation: Any, part: str) -> Any:
    """The type one step below `annotation`: a model's field, a dict's value, a list's item."""
    model = _model(annotation)
    if model is not None:
        field = model.model_fields.get(part)
        return None if field is None else field.annotation
    return _dict_value(annotation) or _item(annotation)


def json_problems(message: str, environ: Mapping[str, str], model: type[BaseModel]) -> list[str]:
    """What pydantic-settings could not parse (its `SettingsError` `message`), as one line
    per variable: the variables under the field it names whose list or table is not JSON.
    The values are not repeated: a variable may hold a secret."""
    matched = _FIELD.search(message)
    field = matched.group(1).lower() if matched else None
    problems = []
    for name, path in sorted(assignments(environ, model).items()):
        if field is not None and path[0] != field:
            continue
        expected = _json_kind(model, path)
        if expected is None:
            continue
        try:
            json.loads(environ[name])
        except ValueError:
            problems.append(f"{name}: expects JSON ({expected}) and is not valid JSON")
    return problems


def _json_kind(model: type[BaseModel], path: tuple[str, ...]) -> str | None:
    """What the value at `path` is written as, when the environment needs it as JSON."""
    annotation: Any = model
    for part in path:
        annotation = _below(annotation, part)
    inner = _unwrap(annotation)
    if get_origin(inner) in (list, tuple, set, frozenset):
        return 'a list, e.g. ["vendor/model-a", "vendor/model-b"]'
    if get_origin(inner) is dict or _model(inner) is not None:
        return 'a table, e.g. {"key": "value"}'
    return None


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` as `X`."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _model(annotation: Any) -> type[BaseModel] | None:
    inner = _unwrap(annotation)
    if inspect.isclass(inner) and issubclass(inner, BaseModel):
        return inner
    return None


def _dict_value(annotation: Any) -> Any:
    inner = _unwrap(annotation)
    return get_args(inner)[1] if get_origin(inner) is dict else None


def _item(annotation: Any) -> Any:
    inner = _unwrap(annotation)
    args = get_args(inner)
    return args[0] if get_origin(inner) in (list, tuple) and args else None
