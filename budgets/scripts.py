"""The Lua scripts, read from `budgets/lua/` with the shared helpers prepended."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

__all__ = ["SCRIPTS", "LuaScript"]

_NAMES = ("reserve", "settle", "release", "report")


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A script's full text and its SHA1, the name EVALSHA calls it by."""

    name: str
    body: str
    sha: str


def _read(name: str) -> str:
    return (resources.files("budgets") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def _load(name: str, lib: str) -> LuaScript:
    body = lib + "\n" + _read(name)
    sha = hashlib.sha1(body.encode(), usedforsecurity=False).hexdigest()
    return LuaScript(name=name, body=body, sha=sha)


def _load_all() -> dict[str, LuaScript]:
    lib = _read("lib")
    return {name: _load(name, lib) for name in _NAMES}


SCRIPTS = _load_all()
