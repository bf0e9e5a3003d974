"""Provider adapters: one class per API, chosen by the provider's `kind`."""

from __future__ import annotations

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
from worker.adapters.gemini import GeminiAdapter
from worker.adapters.http import HttpAdapter, make_client
from worker.adapters.openai import OpenAIAdapter
from worker.settings import ProviderSettings

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AnthropicAdapter",
    "Completion",
    "Event",
    "GeminiAdapter",
    "OpenAIAdapter",
    "ProviderCall",
    "TextDelta",
    "ToolCallDelta",
    "build_adapter",
    "make_client",
]

ADAPTERS: dict[str, type[HttpAdapter]] = {
    "anthropic": AnthropicAdapter,
    "gemini": GeminiAdapter,
    "openai": OpenAIAdapter,
}


def build_adapter(provider: ProviderSettings, client: httpx.AsyncClient) -> Adapter:
    """The adapter for `provider.kind`, sharing `client`'s connection pool."""
    return ADAPTERS[provider.kind](provider, client)
