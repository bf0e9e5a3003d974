"""A relevo turn's answer in the OpenAI Agents SDK's terms: output items, usage, stream events.

The reply becomes, in this order, an assistant message (`output_text`, or `refusal`),
one reasoning item per `Reasoning`, and one `function_call` item per tool call. What a
vendor wants back on the next turn (its thinking and signatures) travels in a reasoning
item's `encrypted_content`, sealed in relevo's envelope (`worker.frameworks.envelope`: the
JSON of `Carried`) that `open_carried` reads back from the agent's next input: whichever
vendor wrote it, it comes back whole, and the chain's adapters decide who may read it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from agents.items import ModelResponse, TResponseOutputItem, TResponseStreamEvent
from agents.usage import Usage as AgentsUsage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, ConfigDict, Field

from worker.frameworks.envelope import EnvelopeError, is_sealed, open_envelope, seal
from worker.types import Reasoning, Reply, TurnResult, Usage

__all__ = ["Carried", "ReplyEvents", "model_response", "open_carried"]


class Carried(BaseModel):
    """What one reasoning item carries: a model's reasoning, or the signatures of the
    tool calls beside it (Gemini's, by call id)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    reasoning: Reasoning | None = None
    signatures: dict[str, str] = Field(default_factory=dict)


def open_carried(encrypted_content: str | None) -> Carried | None:
    """What a reasoning item sealed by relevo carries; None for anyone else's, and for one
    that was changed (the SDK hands back other models' reasoning the same way)."""
    if encrypted_content is None or not is_sealed(encrypted_content):
        return None
    try:
        return open_envelope(encrypted_content, Carried)
    except EnvelopeError:
        return None


def _reasoning_items(reply: Reply, turn_id: str) -> list[ResponseReasoningItem]:
    carried = [Carried(reasoning=r) for r in reply.reasoning]
    signatures = {c.id: c.signature for c in reply.tool_calls if c.signature}
    if signatures:
        carried.append(Carried(signatures=signatures))
    return [
        ResponseReasoningItem(
            id=f"rs_{turn_id}_{i}",
            type="reasoning",
            summary=[Summary(type="summary_text", text=c.reasoning.text)]
            if c.reasoning is not None and c.reasoning.text
            else [],
            encrypted_content=seal(c),
            status="completed",
        )
        for i, c in enumerate(carried)
    ]


def _calls(reply: Reply, turn_id: str) -> list[ResponseFunctionToolCall]:
    return [
        ResponseFunctionToolCall(
            id=f"fc_{turn_id}_{i}",
            type="function_call",
            call_id=call.id,
            name=call.name,
            arguments=json.dumps(call.arguments, ensure_ascii=False),
            status="completed",
        )
        for i, call in enumerate(reply.tool_calls)
    ]


def _message(reply: Reply, turn_id: str) -> ResponseOutputMessage | None:
    content: list[ResponseOutputText | ResponseOutputRefusal] = []
    if reply.text:
        content.append(ResponseOutputText(type="output_text", text=reply.text, annotations=[]))
    if reply.refusal:
        content.append(ResponseOutputRefusal(type="refusal", refusal=reply.refusal))
    if not content:
        return None
    return ResponseOutputMessage(
        id=f"msg_{turn_id}", type="message", role="assistant", status="completed", content=content
    )


def output_items(reply: Reply, turn_id: str) -> list[TResponseOutputItem]:
    """The reply as the Responses API's output items: message, reasoning, calls."""
    message = _message(reply, turn_id)
    items: list[TResponseOutputItem] = [] if message is None else [message]
    items.extend(_reasoning_items(reply, turn_id))
    items.extend(_calls(reply, turn_id))
    return items


def _usage_parts(usage: Usage) -> dict[str, Any]:
    # The SDK counts input as OpenAI does: every prompt token, the cached ones among them.
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
        "input_tokens_details": InputTokensDetails(
            cached_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens
        ),
        "output_tokens_details": OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
    }


def model_response(result: TurnResult, reply: Reply) -> ModelResponse:
    """The SDK's `ModelResponse` for a turn answered with `reply`; its id is the turn's."""
    usage = AgentsUsage(requests=1, **_usage_parts(result.usage))
    return ModelResponse(
        output=output_items(reply, result.turn_id), usage=usage, response_id=result.turn_id
    )


def _metadata(result: TurnResult) -> dict[str, str]:
    """Which model answered, readable on the streamed `Response`."""
    fields = {
        "relevo_status": str(result.status),
        "relevo_effective_model": result.effective_model,
        "relevo_effective_provider": result.effective_provider,
        "relevo_step": None if result.step is None else str(result.step),
    }
    return {k: v for k, v in fields.items() if v is not None}


class ReplyEvents:
    """The stream events of one turn, numbered in order: the Responses API's sequence
    (created, the message's text as it comes, then the rest of the reply, completed)."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.created_at = time.time()
        self._sequence = 0
        self._text_started = False

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence - 1

    def _response(self, status: str, output: list[TResponseOutputItem], **extra: Any) -> Response:
        return Response.model_validate(
            {
                "id": self.turn_id,
                "object": "response",
                "created_at": self.created_at,
                "model": extra.pop("model", "relevo"),
                "status": status,
                "output": output,
                "tool_choice": "auto",
                "tools": [],
                "parallel_tool_calls": False,
                **extra,
            }
        )

    def created(self) -> TResponseStreamEvent:
        response = self._response("in_progress", [])
        return ResponseCreatedEvent(
            type="response.created", response=response, sequence_number=self._next()
        )

    def text(self, piece: str) -> Iterator[TResponseStreamEvent]:
        """A piece of the message's text (the message opens with the first)."""
        item_id = f"msg_{self.turn_id}"
        if not self._text_started:
            self._text_started = True
            opening = ResponseOutputMessage(
                id=item_id, type="message", role="assistant", status="in_progress", content=[]
            )
            yield ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                item=opening,
                output_index=0,
                sequence_number=self._next(),
            )
            yield ResponseContentPartAddedEvent(
                type="response.content_part.added",
                item_id=item_id,
                output_index=0,
                content_index=0,
                part=ResponseOutputText(type="output_text", text="", annotations=[]),
                sequence_number=self._next(),
            )
        yield ResponseTextDeltaEvent(
            type="response.output_text.delta",
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
            sequence_number=self._next(),
        )

    def completed(self, result: TurnResult, reply: Reply) -> Iterator[TResponseStreamEvent]:
        """The rest of the reply (the text closed, reasoning, tool calls), then the whole
        response; the text the chain kept is the one that counts."""
        if reply.text and not self._text_started:
            yield from self.text(reply.text)
        output = output_items(reply, self.turn_id)
        for index, item in enumerate(output):
            yield from self._item(index, item)
        yield ResponseCompletedEvent(
            type="response.completed",
            response=self._response(
                "completed",
                output,
                model=result.effective_model or "relevo",
                usage=ResponseUsage(**_usage_parts(result.usage)),
                metadata=_metadata(result),
            ),
            sequence_number=self._next(),
        )

    def _item(self, index: int, item: TResponseOutputItem) -> Iterator[TResponseStreamEvent]:
        if isinstance(item, ResponseOutputMessage) and self._text_started:
            text = "".join(p.text for p in item.content if isinstance(p, ResponseOutputText))
            part = ResponseOutputText(type="output_text", text=text, annotations=[])
            yield ResponseTextDoneEvent(
                type="response.output_text.done",
                item_id=item.id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
                sequence_number=self._next(),
            )
            yield ResponseContentPartDoneEvent(
                type="response.content_part.done",
                item_id=item.id,
                output_index=index,
                content_index=0,
                part=part,
                sequence_number=self._next(),
            )
        else:
            yield ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                item=item,
                output_index=index,
                sequence_number=self._next(),
            )
        if isinstance(item, ResponseFunctionToolCall):
            assert item.id is not None  # set by _calls
            yield ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta",
                item_id=item.id,
                output_index=index,
                delta=item.arguments,
                sequence_number=self._next(),
            )
            yield ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done",
                item_id=item.id,
                output_index=index,
                arguments=item.arguments,
                sequence_number=self._next(),
            )
        yield ResponseOutputItemDoneEvent(
            type="response.output_item.done",
            item=item,
            output_index=index,
            sequence_number=self._next(),
        )
