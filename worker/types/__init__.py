"""The turn as callers see it: what goes in (`TurnRequest`) and what comes out (`TurnResult`)."""

from __future__ import annotations

from worker.types.base import TURN_ID_RULE, ChainName, TenantId, TurnId, is_turn_id
from worker.types.messages import (
    DocumentPart,
    ImagePart,
    Message,
    Part,
    Reasoning,
    TextPart,
    ToolCall,
)
from worker.types.request import (
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedTool,
    ResponseFormat,
    Tool,
    ToolChoice,
    TurnRequest,
    describe_validation_error,
    parse_turn_request,
)
from worker.types.result import Attempt, AttemptOutcome, Reply, Status, TurnResult, Usage

__all__ = [
    "TURN_ID_RULE",
    "Attempt",
    "AttemptOutcome",
    "ChainName",
    "DocumentPart",
    "ImagePart",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "Message",
    "NamedTool",
    "Part",
    "Reasoning",
    "Reply",
    "ResponseFormat",
    "Status",
    "TenantId",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "TurnId",
    "TurnRequest",
    "TurnResult",
    "Usage",
    "describe_validation_error",
    "is_turn_id",
    "parse_turn_request",
]
