"""relevo as a pydantic-ai `Model`: an agent's every request is one relevo turn.

    from pydantic_ai import Agent
    from worker.frameworks import InProcess
    from worker.frameworks.pydantic_ai import RelevoModel

    model = RelevoModel(InProcess.from_settings(settings), tenant_id="acme")
    agent = Agent(model, tools=[...])

The turn runs on the engine given (a chain in this process, or the fleet), with
relevo's retries, fallback, breakers and budgets; the response names the relevo model
that answered (`ModelResponse.model_name`), and its `provider_details` say how
(`status`, `step`, `effective_provider`, `turn_id`, and each attempt's model and outcome).
`aclose` closes the engine; an agent run never does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    FinishReason,
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    ModelResponseStreamEvent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.settings import ModelSettingName, ModelSettings
from pydantic_ai.usage import RequestUsage

from worker.frameworks.engine import Engine, OnDegraded, TurnNotAnswered
from worker.frameworks.options import TurnOptions
from worker.frameworks.pydantic_ai.errors import PydanticAIInputError, TurnNotAnsweredError
from worker.frameworks.pydantic_ai.reasoning import RELEVO, seal
from worker.frameworks.pydantic_ai.turn import to_turn
from worker.types import Reply, TurnRequest, TurnResult

__all__ = ["RelevoModel", "RelevoStreamedResponse"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}
_MICROS_PER_USD = Decimal(1_000_000)


class RelevoModel(Model):
    """A pydantic-ai model whose requests run as relevo turns on `engine`.

    - `tenant_id`: whose budget the turns spend.
    - `on_degraded`: `"raise"` (`TurnNotAnsweredError`) or `"message"` (the degradation
      message as the model's text) for a turn degraded without a reply.
    - `deadline_s`: each turn's deadline (None: relevo's, 60 s).
    - `side_effect_tools`: the names of the tools that change the world (besides those
      whose `metadata` says `side_effects`).
    - `on_result`: called with each turn's `TurnResult`, answered or not.
    - `chain`: the chain its turns run on (None: `default`); `PydanticAIInputError` (a
      `UserError`) for one the engine does not have. `model_name` is the chain's name
      unless given.
    - `metadata`: string pairs every turn carries (`{"agent": "planner"}`).
    - `model_name`, `settings`: pydantic-ai's.

    The options are the same for every framework (`worker.frameworks.TurnOptions`).
    """

    # relevo maps these to nothing a provider would honour the same way on every model of
    # a chain: pydantic-ai warns when a request sets one that changes what it guarantees.
    unsupported_settings: ClassVar[frozenset[ModelSettingName]] = frozenset(
        {
            "top_k",
            "timeout",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "extra_headers",
            "extra_body",
            "service_tier",
            "citations",
            "cache",
        }
    )

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
        model_name: str | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        profile = ModelProfile(
            supports_tools=True,
            supports_json_schema_output=True,
            supports_json_object_output=False,
            supports_image_input=True,
            supports_document_input=True,
            supported_document_media_types=frozenset({"application/pdf"}),
            supports_thinking=True,
        )
        super().__init__(settings=settings, profile=profile)
        self.engine = engine
        self.options = TurnOptions.on(
            engine,
            chain,
            PydanticAIInputError,
            tenant_id=tenant_id,
            deadline_s=deadline_s,
            side_effect_tools=side_effect_tools,
            on_degraded=on_degraded,
            on_result=on_result,
            metadata=metadata,
        )
        self._model_name = model_name or self.options.chain or RELEVO

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def system(self) -> str:
        return RELEVO

    @property
    def provider(self) -> None:
        return None

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        turn, _ = self._turn(messages, model_settings, model_request_parameters, stream=False)
        result = await self.engine.run(turn)
        return _response(result, self._reply(result))

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        turn, params = self._turn(messages, model_settings, model_request_parameters, stream=True)
        source = self.engine.stream(turn)
        try:
            yield RelevoStreamedResponse(params, _source=source, _model=self)
        finally:
            await _close(source)

    def _turn(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        params: ModelRequestParameters,
        *,
        stream: bool,
    ) -> tuple[TurnRequest, ModelRequestParameters]:
        model_settings, params = self.prepare_request(model_settings, params)
        parts = self._get_instruction_parts(messages, params) or []
        instructions = [part.content for part in parts]
        turn = to_turn(
            messages,
            model_settings,
            params,
            instructions=instructions,
            options=self.options,
            stream=stream,
        )
        return turn, params

    def _reply(self, result: TurnResult) -> Reply:
        try:
            return self.options.reply(result)
        except TurnNotAnswered:
            raise TurnNotAnsweredError(result) from None

    async def aclose(self) -> None:
        """Close the engine (an agent run never does: the engine may serve several)."""
        await self.engine.aclose()


@dataclass
class RelevoStreamedResponse(StreamedResponse):
    """A turn's text as it streams; its tool calls, reasoning and usage when it ends."""

    _source: AsyncIterator[str | TurnResult]
    _model: RelevoModel
    _result: TurnResult | None = None
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        streamed = ""
        async for item in self._source:
            if isinstance(item, str):
                streamed += item
                for event in self._parts_manager.handle_text_delta(vendor_part_id=0, content=item):
                    yield event
            else:
                self._result = item
        if self._result is None:  # an engine always ends with the result: this is a bug
            raise RuntimeError("the turn's stream ended without its result")
        reply = self._model._reply(self._result)
        # A degradation message, or text a fleet worker held back, comes with the result.
        words = _words(reply)
        rest = words[len(streamed) :] if words.startswith(streamed) else ""
        if rest:
            for event in self._parts_manager.handle_text_delta(vendor_part_id=0, content=rest):
                yield event
        for index, part in enumerate(_parts(reply, text=False)):
            yield self._parts_manager.handle_part(vendor_part_id=("part", index), part=part)
        self._usage = _usage(self._result)
        self.finish_reason = _FINISH.get(self._result.finish_reason or "")
        self.provider_details = _details(self._result)

    async def close_stream(self) -> None:
        await _close(self._source)

    @property
    def model_name(self) -> str:
        """The relevo model that answered, once the turn has ended."""
        result = self._result
        if result is not None and result.effective_model:
            return result.effective_model
        return self._model.model_name

    @property
    def provider_name(self) -> str:
        return RELEVO

    @property
    def provider_url(self) -> None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._timestamp


def _response(result: TurnResult, reply: Reply) -> ModelResponse:
    return ModelResponse(
        parts=_parts(reply, text=True),
        usage=_usage(result),
        model_name=result.effective_model or result.primary_model,
        provider_name=RELEVO,
        provider_response_id=result.turn_id,
        provider_details=_details(result),
        finish_reason=_FINISH.get(result.finish_reason or ""),
    )


def _parts(reply: Reply, *, text: bool) -> list[ModelResponsePart]:
    parts: list[ModelResponsePart] = [
        ThinkingPart(content=r.text, signature=seal(r), provider_name=RELEVO)
        for r in reply.reasoning
    ]
    if text and _words(reply):
        parts.append(TextPart(content=_words(reply)))
    for call in reply.tool_calls:
        signed = call.signature is not None
        parts.append(
            ToolCallPart(
                tool_name=call.name,
                args=call.arguments,
                tool_call_id=call.id,
                provider_name=RELEVO if signed else None,
                provider_details={"signature": call.signature} if signed else None,
            )
        )
    return parts


def _words(reply: Reply) -> str:
    # A refusal is what the model said: the agent sees it, never an empty answer.
    return reply.text or reply.refusal or ""


async def _close(source: AsyncIterator[str | TurnResult]) -> None:
    close = getattr(source, "aclose", None)
    if close is not None:
        await close()


def _usage(result: TurnResult) -> RequestUsage:
    usage = result.usage
    return RequestUsage(
        input_tokens=usage.prompt_tokens,  # pydantic-ai's input count includes the cache's
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        output_reasoning_tokens=usage.reasoning_tokens,
        cost=Decimal(result.cost_micros) / _MICROS_PER_USD,
    )


def _details(result: TurnResult) -> dict[str, Any]:
    return {
        "turn_id": result.turn_id,
        "status": str(result.status),
        "step": result.step,
        "primary_model": result.primary_model,
        "effective_provider": result.effective_provider,
        "degradation": result.degradation,
        "attempts": [
            {
                "model": a.model,
                "outcome": str(a.outcome),
                "http_status": a.http_status,
                "error_class": a.error_class,
            }
            for a in result.attempts
        ],
    }
