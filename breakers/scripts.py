"""The breaker Lua scripts in ``breakers/lua``, loaded the one way (`rediskit.LuaScripts`).

Every operation is one EVALSHA. Its ``*_on(pipe, ...)`` form queues that command on a
caller's pipeline and returns a `Parse`: an async function taking the raw reply (or the
exception in its place, from ``pipe.execute(raise_on_error=False)`` or from a failed
``execute``) and returning the result. The plain async form runs the same command on a
pipeline of its own (still one round trip) and loads the scripts once if Redis lost them.
"""

from __future__ import annotations

from rediskit import LuaScripts

__all__ = ["SCRIPTS"]

SCRIPTS = LuaScripts("breakers")
