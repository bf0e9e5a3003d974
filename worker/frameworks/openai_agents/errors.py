"""What an agent of the OpenAI Agents SDK gets when relevo cannot carry or answer a turn:
each error is relevo's and the SDK's at once.

    InputError, agents.UserError
     └── AgentsInputError        refused before any call, naming what cannot be carried
    TurnNotAnswered, agents.AgentsException
     └── AgentsTurnNotAnswered   refused, failed, or degraded without a reply
"""

from __future__ import annotations

from agents.exceptions import AgentsException, UserError

from worker.errors import InputError
from worker.frameworks.engine import TurnNotAnswered

__all__ = ["AgentsInputError", "AgentsTurnNotAnswered"]


class AgentsInputError(InputError, UserError):
    """Something the agent asks for that relevo cannot carry to every model of its chain."""


class AgentsTurnNotAnswered(TurnNotAnswered, AgentsException):
    """relevo gave this agent turn no reply: refused, failed, or degraded without one.

    `result` is the turn's whole report (status, reason, attempts)."""
