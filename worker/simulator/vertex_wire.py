"""Vertex AI's two publishers as the simulator speaks them.

Gemini on Vertex is the Gemini API's request and reply. Claude on Vertex is
Anthropic Messages with the model in the URL only and `anthropic_version` in the body;
its errors are Vertex's google.rpc.Status for what Vertex itself refuses (sign-in,
IAM, unknown models, quotas) and Anthropic's error object for the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from worker.simulator.anthropic_request import MESSAGES_FIELDS
from worker.simulator.anthropic_wire import AnthropicDialect
from worker.simulator.gemini_wire import GeminiDialect
from worker.simulator.wire import BadRequest, CannedReply, Inspection

__all__ = ["VERTEX_ANTHROPIC_VERSION", "VertexClaudeDialect", "VertexGeminiDialect"]

VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
# The statuses Vertex answers itself, before the request reaches Claude.
_VERTEX_STATUSES = frozenset({401, 403, 404, 429})
_GOOGLE = GeminiDialect()
_RAW_PREDICT_FIELDS = (MESSAGES_FIELDS - {"model", "inference_geo"}) | {"anthropic_version"}


class VertexGeminiDialect(GeminiDialect):
    """`…/publishers/google/models/{model}:generateContent` (`:streamGenerateContent`)."""

    api = "vertex"
    vertex = True


class VertexClaudeDialect(AnthropicDialect):
    """`…/publishers/anthropic/models/{model}:rawPredict` (`:streamRawPredict`)."""

    api = "vertex"

    def inspect(self, body: Mapping[str, Any]) -> Inspection:
        """The Messages fields, without `model` and with the Vertex `anthropic_version`;
        images and documents as data only, and no `output_config.format` (Vertex's
        default organization policy leaves Claude's structured outputs off)."""
        if body.get("anthropic_version") != VERTEX_ANTHROPIC_VERSION:
            raise BadRequest(f"anthropic_version: must be {VERTEX_ANTHROPIC_VERSION!r}")
        inspection = self._inspect(
            body,
            "",
            fields=_RAW_PREDICT_FIELDS,
            url_sources=False,
            structured_outputs=False,
        )
        return dataclasses.replace(inspection, model=None)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """google.rpc.Status for Vertex's own refusals, Anthropic's error object otherwise."""
        if status in _VERTEX_STATUSES:
            return _GOOGLE.error_body(status, message)
        return super().error_body(status, message)

    def _message(self, reply: CannedReply) -> dict[str, Any]:
        return {**super()._message(reply), "id": f"msg_vrtx_sim{reply.seq:08d}"}
