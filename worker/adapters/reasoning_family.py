"""Whose reasoning a provider API can read back: one family per target.

Reasoning is only readable by the vendor that wrote it: Anthropic's signed thinking,
Gemini's thought signatures, OpenAI's encrypted reasoning items, Bedrock's own models'
reasoning. A target (a provider and a model id) reads one family's, or none: Chat
Completions takes no reasoning back at all, nor the Responses API on a model that does
not reason (it refuses encrypted reasoning there). The turn plans each call with this
family's reasoning only (`worker.turn.reasoning`).
"""

from __future__ import annotations

from worker.adapters.bedrock import reasoning_origin
from worker.adapters.vertex import publisher
from worker.settings import ProviderSettings

__all__ = ["reasoning_family"]


def reasoning_family(provider: ProviderSettings, model_id: str, *, reasoning: bool) -> str | None:
    """The `Reasoning.origin` a call to `model_id` on `provider` can carry; None: none.
    `reasoning`: the model reasons (`worker.adapters.reasoning_models.reasons`)."""
    match provider.wire:
        case "openai-responses":
            return "openai" if reasoning else None
        case "anthropic":
            return "anthropic"
        case "gemini":
            return "google"
        case "vertex":
            return publisher(model_id)
        case "bedrock":
            return reasoning_origin(model_id)
    return None
