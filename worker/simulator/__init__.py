"""Simulated LLM providers that misbehave on command.

One aiohttp server on loopback speaks OpenAI Chat Completions (and Azure's
deployment routes), Anthropic Messages, Gemini generateContent, both of Vertex AI's
publishers (with a Google OAuth token endpoint) and Bedrock Converse (SigV4-checked,
streams in AWS event-stream framing), as JSON and as SSE streams. Each model answers
"Answer from <model>." plus filler, or follows its queue of `Fault`s: an error status
with a real-shaped body, a stall, an error or a dropped connection after N tokens,
flakiness, latency.

- `Simulator`: in-process, on an ephemeral port, in a background thread.
- `SimulatorClient`: drives a simulator in another process over `/_sim`.
- `serve`: runs one in the foreground (`relevo simulate --port N`).
"""

from __future__ import annotations

from worker.simulator.control import SimulatorClient
from worker.simulator.faults import CallOutcome, Fault
from worker.simulator.harness import Simulator
from worker.simulator.server import serve
from worker.simulator.state import RequestRecord

__all__ = ["CallOutcome", "Fault", "RequestRecord", "Simulator", "SimulatorClient", "serve"]
