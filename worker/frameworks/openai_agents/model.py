"""The Agents SDK's `Model` and `ModelProvider`, answering with relevo turns.

    engine = InProcess.from_settings(load_settings("chain.toml"))
    agent = Agent(name="support", tools=[...], model=RelevoModel(engine, tenant_id="acme"))
    result = await Runner.run(agent, "Where is my order?")

or, for every agent of a run, `RunConfig(model_provider=RelevoProvider(engine, ...))`.
Each model call of the agent is one relevo turn: it runs through a configured chain
(with `RelevoProvider`, the one the agent's model name names), with its fallbacks,
breakers and budgets.
Which model answered is the turn's report: `on_result` gets each `TurnResult`, the
`ModelResponse.response_id` is the turn's id, and a streamed `response.completed`
carries it in the response's `model` and `metadata`.

A turn relevo refused or degraded without a reply raises `AgentsTurnNotAnswered` (an
`AgentsException` and a `TurnNotAnswered`), or, with `on_degraded="message"`, answers
with its degradation message (not when the agent wants structured output: the message
is not that output, so it raises). `aclose` closes the engine; an agent run never does.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
from agents.tool import Tool as AgentsTool
from openai.types.responses.response_prompt_param import ResponsePromptParam

from worker.errors import InputError
from worker.frameworks.engine import Engine, OnDegraded, TurnNotAnswered, chain_name
from worker.frameworks.openai_agents.errors import AgentsInputError, AgentsTurnNotAnswered
from worker.frameworks.openai_agents.reply import ReplyEvents, model_response
from worker.frameworks.openai_agents.turn import ModelCall, turn_request
from worker.frameworks.options import TurnOptions
from worker.types import Reply, TurnRequest, TurnResult

__all__ = ["RelevoModel", "RelevoProvider"]


class RelevoModel(Model):
    """The Agents SDK's `Model`, answering each call with a relevo turn on `engine`.

    - `tenant_id`: whose budget the turns spend.
    - `on_degraded`: `"raise"` (`AgentsTurnNotAnswered`) or `"message"` (the degradation
      message as the assistant's answer) for a turn degraded without a reply.
    - `deadline_s`: each turn's deadline (None: relevo's, 60 s), unless the agent's
      `ModelSettings.timeout` is set.
    - `side_effect_tools`: the names of the tools that change the world.
    - `on_result`: called with each turn's `TurnResult`, answered or not.
    - `chain`: the chain its turns run on (None: `default`); `AgentsInputError` for one
      the engine does not have.
    - `metadata`: string pairs every turn carries (`{"agent": "triage"}`).

    The options are the same for every framework (`worker.frameworks.TurnOptions`).
    """

    # A plain class, not a dataclass: the SDK reads a dataclass model's fields (deep-copied)
    # into its agents' identities, and an engine holds locks and connections.
    def __init__(
        self,
        engine: Engine,
        *,
        tenant_id: str,
        on_degraded: OnDegraded = "raise",
        deadline_s: float | None = None,
        side_effect_tools: Collection[str] = (),
        on_result: Callable[[TurnResult], None] | None = None,
        chain: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.options = TurnOptions.on(
            engine,
            chain,
            AgentsInputError,
            tenant_id=tenant_id,
            deadline_s=deadline_s,
            side_effect_tools=side_effect_tools,
            on_degraded=on_degraded,
            on_result=on_result,
            metadata=metadata,
        )

    def _request(
        self, call: ModelCall, *, stream: bool, stored: Mapping[str, object]
    ) -> TurnRequest:
        # relevo is stateless on purpose: a turn carries the whole conversation, so that
        # any vendor of the chain can take it. Server-side state cannot move with it.
        for name, value in stored.items():
            if value is not None:
                raise AgentsInputError(f"{name}: relevo keeps no conversation; send it whole")
        return turn_request(self.options, call, stream=stream)

    def _reply(self, result: TurnResult, call: ModelCall) -> Reply:
        try:
            return self.options.reply(result, structured=call.structured)
        except TurnNotAnswered as exc:
            raise AgentsTurnNotAnswered(exc.result) from None

    async def aclose(self) -> None:
        """Close the engine (an agent run never does: the engine may serve several)."""
        await self.engine.aclose()

    def on_chain(self, chain: str | None) -> RelevoModel:
        """This model with its options, on `chain` (same engine)."""
        twin = copy.copy(self)
        twin.options = dataclasses.replace(self.options, chain=chain_name(self.engine, chain))
        return twin

    async def get_response(  # noqa: PLR0917  (the SDK's signature)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[AgentsTool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        call = ModelCall(system_instructions, input, model_settings, tools, output_schema, handoffs)
        stored = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        result = await self.engine.run(self._request(call, stream=False, stored=stored))
        return model_response(result, self._reply(result, call))

    async def stream_response(  # noqa: PLR0917  (the SDK's signature)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[AgentsTool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        call = ModelCall(system_instructions, input, model_settings, tools, output_schema, handoffs)
        stored = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        request = self._request(call, stream=True, stored=stored)
        events = ReplyEvents(request.turn_id)
        yield events.created()
        # Closed here, not left to the garbage collector: an agent that stops reading
        # ends the turn at once.
        async with contextlib.aclosing(self.engine.stream(request)) as pieces:
            async for item in pieces:
                if isinstance(item, str):
                    for event in events.text(item):
                        yield event
                else:
                    for event in events.completed(item, self._reply(item, call)):
                        yield event

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        # relevo has retried and fallen back already; the same turn again gets the same end.
        if isinstance(request.error, TurnNotAnswered):
            return ModelRetryAdvice(suggested=False, reason="relevo already fell back")
        return None


class RelevoProvider(ModelProvider):
    """The Agents SDK's `ModelProvider`: an agent's model name is the chain its turns run
    on (`Agent(model="planner")` runs on `[chains.planner]`; no name, `default`), and a
    name the engine has no chain of is `AgentsInputError` (a `UserError`) at the run's
    first call. It takes `RelevoModel`'s options. `aclose` closes the engine."""

    def __init__(
        self,
        engine: Engine,
        *,
        tenant_id: str,
        on_degraded: OnDegraded = "raise",
        deadline_s: float | None = None,
        side_effect_tools: Collection[str] = (),
        on_result: Callable[[TurnResult], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.model = RelevoModel(
            engine,
            tenant_id=tenant_id,
            on_degraded=on_degraded,
            deadline_s=deadline_s,
            side_effect_tools=side_effect_tools,
            on_result=on_result,
            metadata=metadata,
        )
        self._chains: dict[str, RelevoModel] = {}

    def get_model(self, model_name: str | None) -> Model:
        chosen = self._chosen(model_name)
        if chosen is None:
            return self.model
        if chosen not in self._chains:
            self._chains[chosen] = self.model.on_chain(chosen)
        return self._chains[chosen]

    def _chosen(self, model_name: str | None) -> str | None:
        try:
            return chain_name(self.model.engine, model_name)
        except InputError as exc:
            raise AgentsInputError(str(exc)) from None

    async def aclose(self) -> None:
        await self.model.aclose()
