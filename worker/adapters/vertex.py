"""Google Vertex AI: Gemini and Claude behind one provider, chosen by the model id.

    POST {base}/v1/projects/{project}/locations/{region}/publishers/google/models/{model}
         :generateContent | :streamGenerateContent?alt=sse        (Gemini request and reply)
    POST {base}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}
         :rawPredict | :streamRawPredict       (Anthropic Messages, `model` in the URL only)

A model id starting with `claude-` (`claude-sonnet-4@20250514`) goes to the Anthropic
publisher, any other (`gemini-2.5-pro`) to Google's: Vertex names its Claude models that
way, and the id is all a chain entry has. Bodies and replies are those of the Gemini
and Anthropic adapters, which these subclass; Vertex changes the URL and the sign-in (a
Google OAuth Bearer token, `worker.adapters.vertex_auth`). Errors come in two shapes:
Vertex's own google.rpc.Status (quotas, IAM, unknown models) and, for Claude, the
Anthropic error object the model itself returns; `classify` reads both as `vertex`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import ClassVar, Literal
from urllib.parse import quote

import httpx

from worker.adapters.anthropic import AnthropicAdapter
from worker.adapters.base import Event, ProviderCall
from worker.adapters.gemini import GeminiAdapter
from worker.adapters.http import HttpRequest, SseAdapter
from worker.adapters.vertex_auth import AccessToken
from worker.errors import AuthFailed
from worker.settings import ProviderSettings

__all__ = ["VERTEX_ANTHROPIC_VERSION", "VertexAdapter", "publisher"]

VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
"""The `anthropic_version` a rawPredict body carries (instead of a header)."""

Publisher = Literal["google", "anthropic"]


def publisher(model_id: str) -> Publisher:
    """Who publishes `model_id` on Vertex AI: Claude ids are Anthropic's, the rest Google's."""
    return "anthropic" if model_id.startswith("claude-") else "google"


class VertexAdapter:
    """One Vertex AI provider: a project and a location, both publishers, one token."""

    wire: ClassVar[str] = "vertex"

    def __init__(self, provider: ProviderSettings, client: httpx.AsyncClient) -> None:
        self._token = AccessToken(timeout_s=provider.first_byte_timeout_s)
        self._adapters: Mapping[Publisher, SseAdapter] = {
            "google": _VertexGemini(provider, client, self._token),
            "anthropic": _VertexClaude(provider, client, self._token),
        }

    def request(self, call: ProviderCall) -> HttpRequest:
        """The HTTP request for `call`, signed with the token as it is now."""
        return self._adapters[publisher(call.model_id)].request(call)

    async def send(self, call: ProviderCall) -> AsyncGenerator[Event, None]:
        """Yield content deltas (when streaming), then one `Completion`."""
        chosen = publisher(call.model_id)
        await self._token.refresh_if_needed()
        try:
            async with contextlib.aclosing(self._adapters[chosen].send(call)) as events:
                async for event in events:
                    yield event
        except AuthFailed as exc:
            if exc.status == 401:
                self._token.refused()
            raise


class _VertexGemini(GeminiAdapter):
    """The Gemini adapter's bodies and replies, on Vertex's URL with a Bearer token."""

    wire = "vertex"
    _vertex = True

    def __init__(
        self, provider: ProviderSettings, client: httpx.AsyncClient, token: AccessToken
    ) -> None:
        super().__init__(provider, client)
        self._token = token

    def request(self, call: ProviderCall) -> HttpRequest:
        built = super().request(call)
        method = "streamGenerateContent?alt=sse" if call.stream else "generateContent"
        return _on_vertex(self, built, chosen="google", model_id=call.model_id, method=method)


class _VertexClaude(AnthropicAdapter):
    """The Anthropic adapter's Messages, on rawPredict: `model` in the URL, the version
    in the body.

    Images and documents go as base64 data only (Vertex has no URL source). An answer's
    schema goes as a forced tool: Vertex leaves Claude's structured outputs off until an
    organization policy turns them on (`constraints/vertexai.allowedPartnerModelFeatures`)
    and for some models only; every Claude on Vertex takes a forced tool.
    """

    wire = "vertex"
    native_output = False
    url_sources = False

    def __init__(
        self, provider: ProviderSettings, client: httpx.AsyncClient, token: AccessToken
    ) -> None:
        super().__init__(provider, client)
        self._token = token

    def request(self, call: ProviderCall) -> HttpRequest:
        built = super().request(call)
        body = {k: v for k, v in built.body.items() if k != "model"}
        body["anthropic_version"] = VERTEX_ANTHROPIC_VERSION
        headers = {k: v for k, v in built.headers.items() if k != "anthropic-version"}
        built = HttpRequest(url=built.url, headers=headers, body=body)
        method = "streamRawPredict" if call.stream else "rawPredict"
        return _on_vertex(self, built, chosen="anthropic", model_id=call.model_id, method=method)


def _on_vertex(
    adapter: _VertexGemini | _VertexClaude,
    built: HttpRequest,
    *,
    chosen: Publisher,
    model_id: str,
    method: str,
) -> HttpRequest:
    """`built` sent to Vertex: its URL, the token's headers, and the token redacted from
    whatever the call raises."""
    provider = adapter._provider
    url = (
        f"{provider.base_url.rstrip('/')}/v1/projects/{provider.project}"
        f"/locations/{provider.region}/publishers/{chosen}"
        f"/models/{quote(model_id, safe='@')}:{method}"
    )
    headers = {**built.headers, **adapter._token.headers()}
    # HttpAdapter redacts these from error bodies and messages; the token changes hourly.
    adapter._secrets = adapter._token.tokens
    return HttpRequest(url=url, headers=headers, body=built.body)
