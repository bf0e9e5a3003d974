"""The most output tokens a call may be billed for, thinking included, wire by wire.

A reservation's worst case holds this many output tokens. Most APIs count reasoning
inside the turn's limit: OpenAI's `max_completion_tokens` and `max_output_tokens`,
Anthropic's `max_tokens` (a thinking budget is sent only below it), Bedrock's
`maxTokens`. Gemini 2.x documents its `thinkingBudget` beside `maxOutputTokens`, so a
call there may bill both.
"""

from __future__ import annotations

from worker.adapters.base import ProviderCall
from worker.adapters.gemini_body import thinking_tokens
from worker.adapters.vertex import publisher
from worker.settings import ProviderSettings

__all__ = ["billable_output_tokens"]


def billable_output_tokens(provider: ProviderSettings, call: ProviderCall) -> int:
    """The output tokens `call` may be billed for on `provider` at most."""
    gemini = provider.wire == "gemini" or (
        provider.wire == "vertex" and publisher(call.model_id) == "google"
    )
    return call.max_tokens + (thinking_tokens(call) if gemini else 0)
