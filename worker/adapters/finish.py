"""Why a model stopped, in one vocabulary for every provider API.

Each API names its stop reasons differently; a caller needs to know one thing: is
this answer complete (`stop`, `tool_calls`), cut short (`length`), withheld by the
provider's filter (`content_filter`), or declined by the model itself (`refusal`).
Anything a provider adds later is `other`, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = ["FINISH_REASONS", "FinishReason", "normalize_finish"]


class FinishReason(StrEnum):
    """Why the model stopped writing."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"
    OTHER = "other"


_F = FinishReason

# The API's own value → ours. Keys are the API family (`openai` covers Azure OpenAI,
# `anthropic` covers Claude on Bedrock's InvokeModel and Vertex's rawPredict, `gemini`
# covers Vertex AI's generateContent, `bedrock` is the Converse API).
FINISH_REASONS: Mapping[str, Mapping[str, FinishReason]] = MappingProxyType(
    {
        "openai": {
            "stop": _F.STOP,
            "length": _F.LENGTH,
            "tool_calls": _F.TOOL_CALLS,
            "function_call": _F.TOOL_CALLS,
            "content_filter": _F.CONTENT_FILTER,
        },
        # The Responses API: a response's `status`, or why it ended `incomplete`.
        "openai-responses": {
            "completed": _F.STOP,
            "max_output_tokens": _F.LENGTH,
            "content_filter": _F.CONTENT_FILTER,
        },
        "anthropic": {
            "end_turn": _F.STOP,
            "stop_sequence": _F.STOP,
            "pause_turn": _F.OTHER,
            "max_tokens": _F.LENGTH,
            "model_context_window_exceeded": _F.LENGTH,
            "tool_use": _F.TOOL_CALLS,
            # Anthropic's streaming safety classifiers stepped in: a filter, not the model.
            "refusal": _F.CONTENT_FILTER,
        },
        "gemini": {
            "STOP": _F.STOP,
            "MAX_TOKENS": _F.LENGTH,
            "SAFETY": _F.CONTENT_FILTER,
            "RECITATION": _F.CONTENT_FILTER,
            "BLOCKLIST": _F.CONTENT_FILTER,
            "PROHIBITED_CONTENT": _F.CONTENT_FILTER,
            "SPII": _F.CONTENT_FILTER,
            "IMAGE_SAFETY": _F.CONTENT_FILTER,
            # promptFeedback.blockReason: the prompt itself was refused.
            "OTHER": _F.OTHER,
            "MALFORMED_FUNCTION_CALL": _F.OTHER,
        },
        "bedrock": {
            "end_turn": _F.STOP,
            "stop_sequence": _F.STOP,
            "max_tokens": _F.LENGTH,
            "model_context_window_exceeded": _F.LENGTH,
            "tool_use": _F.TOOL_CALLS,
            "guardrail_intervened": _F.CONTENT_FILTER,
            "content_filtered": _F.CONTENT_FILTER,
        },
    }
)
"""Each API family's stop reasons in our vocabulary; unknown values are `other`."""


def normalize_finish(api: str, raw: str | None) -> FinishReason | None:
    """`raw` (as `api` spells it) in our vocabulary; None when the provider gave none."""
    if raw is None or raw == "":
        return None
    return FINISH_REASONS.get(api, {}).get(raw, FinishReason.OTHER)
