"""Canned provider errors with the providers' real statuses, body shapes and headers.

The simulated providers answer with these, and the policy tests classify them, so both
sides agree on what a provider really sends. Each provider's entries, and where each shape
comes from, are in its own module (`openai`, `responses` for `openai-responses`,
`anthropic`, `gemini`, `vertex`, `bedrock`):
`ERRORS` by name, and `STREAM` for its mid-stream error events. Every provider also has
the `PROXIES` answers (`proxy_502_html`, `empty_503`) of `shapes`.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from typing import Literal, get_args

from worker.simulator.bedrock_wire import exception_event
from worker.simulator.catalogue import anthropic, bedrock, gemini, openai, responses, vertex
from worker.simulator.catalogue.gemini import RPC, google_status
from worker.simulator.catalogue.shapes import PROXIES, CannedError, StreamPayload

__all__ = [
    "NAMES",
    "STREAM_NAMES",
    "CannedError",
    "Kind",
    "canned",
    "canned_stream",
    "stream_frame",
]

Kind = Literal["openai", "openai-responses", "anthropic", "gemini", "vertex", "bedrock"]
KINDS: tuple[Kind, ...] = get_args(Kind)

_CATALOGUE: Mapping[Kind, Mapping[str, CannedError]] = {
    "openai": {**openai.ERRORS, **PROXIES},
    "openai-responses": {**responses.ERRORS, **PROXIES},
    "anthropic": {**anthropic.ERRORS, **PROXIES},
    "gemini": {**gemini.ERRORS, **PROXIES},
    "vertex": {**vertex.ERRORS, **PROXIES},
    "bedrock": {**bedrock.ERRORS, **PROXIES},
}
_STREAM: Mapping[Kind, Mapping[str, StreamPayload]] = {
    "openai": openai.STREAM,
    "openai-responses": responses.STREAM,
    "anthropic": anthropic.STREAM,
    "gemini": gemini.STREAM,
    "vertex": vertex.STREAM,
    "bedrock": bedrock.STREAM,
}

NAMES: Mapping[Kind, tuple[str, ...]] = {kind: tuple(_CATALOGUE[kind]) for kind in KINDS}
"""The canned HTTP error names of each provider kind."""

STREAM_NAMES: Mapping[Kind, tuple[str, ...]] = {kind: tuple(_STREAM[kind]) for kind in KINDS}
"""The canned mid-stream error names of each provider kind."""


def canned(kind: Kind, name: str, *, retry_after_s: float | None = None) -> CannedError:
    """A fresh copy of one canned error; `retry_after_s` sets the provider's wait hint.

    OpenAI and Anthropic get `retry-after` (whole seconds, rounded up, as servers send
    it) plus `retry-after-ms` so tests can ask for sub-second waits; a google.rpc.Status
    (Gemini, Vertex AI) gets the `retryDelay` of a `google.rpc.RetryInfo` detail in the
    body, as Google sends it.
    Raises `KeyError` for an unknown kind or name, `ValueError` for a bad wait.
    """
    error = copy.deepcopy(_CATALOGUE[kind][name])
    if retry_after_s is None:
        return error
    if not math.isfinite(retry_after_s) or retry_after_s < 0:
        raise ValueError(f"retry_after_s must be a finite number >= 0, got {retry_after_s!r}")
    status = google_status(error.body)
    if status is not None:
        details = status.setdefault("details", [])
        details[:] = [d for d in details if d.get("@type") != RPC + "RetryInfo"]
        delay = f"{retry_after_s:.3f}".rstrip("0").rstrip(".")
        details.append({"@type": RPC + "RetryInfo", "retryDelay": f"{delay}s"})
        return error
    error.headers["retry-after"] = str(math.ceil(retry_after_s))
    error.headers["retry-after-ms"] = str(round(retry_after_s * 1000))
    return error


def canned_stream(kind: Kind, name: str) -> StreamPayload:
    """A fresh copy of one mid-stream error payload (the JSON of the SSE `data:` line)."""
    return copy.deepcopy(_STREAM[kind][name])


def stream_frame(kind: Kind, payload: StreamPayload) -> bytes:
    """`payload` framed as the provider sends it inside a `text/event-stream` body (for
    Bedrock, an event-stream exception message)."""
    if kind == "bedrock":
        return exception_event(payload)
    data = json.dumps(payload, separators=(",", ":"))
    typed = isinstance(payload, dict) and payload.get("type") == "error"
    prefix = "event: error\n" if kind == "anthropic" or typed else ""
    if kind == "openai-responses" and isinstance(payload, dict):
        prefix = f"event: {payload.get('type')}\n"  # every event is named by its type
    return f"{prefix}data: {data}\n\n".encode()
