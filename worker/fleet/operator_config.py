"""`--config FILE` as commands read it: every error names the file (or the variable).

Commands that run turns read the whole configuration (`load_config`). Operator commands
need only where Redis is: `operator_config` reads the `[redis]` section of the file, and
the few other sections a command asks for, each on its own, so a file with nothing but
`[redis]` serves them. As for workers, `RELEVO_<SECTION>__<KEY>` overrides the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

import breakers
import budgets
from budgets.keys import check_namespace
from worker.errors import ConfigError
from worker.settings import RedisSettings, Settings, environment, load_settings
from worker.settings.variables import PREFIX, nearest_key

__all__ = ["OperatorConfig", "load_config", "operator_config", "redis_settings"]

Section = TypeVar("Section", bound=BaseModel)


def load_config(path: str | Path, *, require_secrets: bool = True) -> Settings:
    """The whole configuration in `path`; an error names the file."""
    try:
        return load_settings(path, require_secrets=require_secrets)
    except ConfigError as exc:
        raise ConfigError(_naming(path, str(exc))) from None


@dataclass(frozen=True)
class OperatorConfig:
    """What `--config FILE` (or, without one, the environment) tells an operator command."""

    path: str | None
    raw: Mapping[str, Any]
    redis: RedisSettings

    def section(self, name: str, model: type[Section]) -> Section:
        """The file's `[name]` (or its defaults) with the environment's overrides."""
        return _section(self.path, self.raw, name, model)

    def chain_settings(self) -> Settings | None:
        """The whole configuration when the file describes a chain, else None."""
        if self.path is None or "chain" not in self.raw:
            return None
        return load_config(self.path, require_secrets=False)


def operator_config(path: str | None) -> OperatorConfig:
    """`[redis]` of `path`, else `RELEVO_REDIS__*` or the defaults; checked here."""
    raw = {} if path is None else _read(path)
    redis = _section(path, raw, "redis", RedisSettings)
    for check in (breakers.validate_name, check_namespace):
        try:
            check(redis.namespace)
        except (breakers.InvalidNameError, budgets.InvalidNameError) as exc:
            where = "RELEVO_REDIS__NAMESPACE" if path is None else f"{path}: redis.namespace"
            raise ConfigError(f"{where}: {exc}") from None
    return OperatorConfig(path, raw, redis)


def redis_settings(path: str | None) -> RedisSettings:
    """Where Redis is, for a command that needs nothing else."""
    return operator_config(path).redis


def _read(path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _section(path: str | None, raw: Mapping[str, Any], name: str, model: type[Section]) -> Section:
    given = raw.get(name, {})
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: {name}: must be a table ([{name}])")
    overrides = _env_overrides(name, model)
    try:
        return model.model_validate({**given, **overrides})
    except ValidationError as exc:
        problems = [_problem(path, name, model, error, overrides) for error in exc.errors()]
        raise ConfigError("; ".join(problems)) from None


def _problem(
    path: str | None,
    name: str,
    model: type[BaseModel],
    error: Any,
    overrides: Mapping[str, str],
) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a check across fields says which one it is about
        field, _, message = message.partition(": ")
    else:
        field = str(error["loc"][0])
    if field in overrides:
        return f"{environment.variable(name, field)}: not a valid value ({message})"
    if error["type"] == "extra_forbidden":
        nearest = nearest_key(model, error["loc"])
        message += f" (did you mean {nearest!r}?)" if nearest else ""
    prefix = "" if path is None else f"{path}: "
    return f"{prefix}{name}.{field}: {message}"


def _env_overrides(name: str, model: type[BaseModel]) -> dict[str, str]:
    return environment.section_overrides(name, model.model_fields)


def _naming(path: str | Path, message: str) -> str:
    # A variable's problem is not the file's.
    if str(path) in message or message.upper().startswith(PREFIX):
        return message
    return f"{path}: {message}"
