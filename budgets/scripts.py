"""The budgets Lua scripts in ``budgets/lua``, loaded the one way (`rediskit.LuaScripts`)."""

from __future__ import annotations

from rediskit import LuaScripts

__all__ = ["SCRIPTS"]

SCRIPTS = LuaScripts("budgets")
