"""relevo as the model of the OpenAI Agents SDK (`pip install 'relevo[agents]'`).

`RelevoModel` answers each of an agent's model calls with a relevo turn, on an engine of
`worker.frameworks` (a chain in this process, or the fleet); `RelevoProvider` gives it
for every model name. `AgentsInputError` is what relevo refuses to carry,
`AgentsTurnNotAnswered` a turn it gives no reply for.
"""

from worker.frameworks.openai_agents.errors import AgentsInputError, AgentsTurnNotAnswered
from worker.frameworks.openai_agents.model import RelevoModel, RelevoProvider

__all__ = ["AgentsInputError", "AgentsTurnNotAnswered", "RelevoModel", "RelevoProvider"]
