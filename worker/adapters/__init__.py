"""Provider adapters: one class per API, chosen by the provider's `kind`."""

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
    "ProviderCall",
    "TextDelta",
    "ToolCallDelta",
    "VertexAdapter",
    "build_adapter",
    "make_client",
]

ADAPTERS: dict[str, Callable[[ProviderSettings, httpx.AsyncClient], Adapter]] = {
    "anthropic": AnthropicAdapter,
    "bedrock": BedrockAdapter,
    "gemini": GeminiAdapter,
    "openai": OpenAIAdapter,
    "vertex": VertexAdapter,
}


def build_adapter(provider: ProviderSettings, client: httpx.AsyncClient) -> Adapter:
    """The adapter for `provider.kind`, sharing `client`'s connection pool."""
    return ADAPTERS[provider.kind](provider, client)
