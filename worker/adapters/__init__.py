"""Provider adapters: one class per API, chosen by the API a provider speaks (`wire`)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from worker.adapters.anthropic import AnthropicAdapter
from worker.adapters.base import (
    Adapter,
    Completion,
    Event,
    ProviderCall,
    TextDelta,
    ToolCallDelta,
)
from worker.adapters.bedrock import BedrockAdapter
from worker.adapters.gemini import GeminiAdapter
from worker.adapters.http import make_client
from worker.adapters.openai import OpenAIAdapter
from worker.adapters.openai_responses import OpenAIResponsesAdapter
from worker.adapters.reasoning_family import reasoning_family
from worker.adapters.vertex import VertexAdapter
from worker.settings import ProviderSettings

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AnthropicAdapter",
    "BedrockAdapter",
    "Completion",
    "Event",
    "GeminiAdapter",
    "OpenAIAdapter",
    "OpenAIResponsesAdapter",
    "ProviderCall",
    "TextDelta",
    "ToolCallDelta",
    "VertexAdapter",
    "build_adapter",
    "make_client",
    "reasoning_family",
]

ADAPTERS: dict[str, Callable[[ProviderSettings, httpx.AsyncClient], Adapter]] = {
    "anthropic": AnthropicAdapter,
    "bedrock": BedrockAdapter,
    "gemini": GeminiAdapter,
    "openai": OpenAIAdapter,
    "openai-responses": OpenAIResponsesAdapter,
    "vertex": VertexAdapter,
}


def build_adapter(provider: ProviderSettings, client: httpx.AsyncClient) -> Adapter:
    """The adapter for the API `provider` speaks (`ProviderSettings.wire`), sharing
    `client`'s connection pool."""
    return ADAPTERS[provider.wire](provider, client)
