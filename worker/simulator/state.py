"""What the simulator remembers: fault queues per model, call counts, recent requests.

The server's event loop and the caller's thread both use it, so every method
takes a lock for a few dictionary operations and never awaits.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from worker.simulator.faults import CallOutcome, Fault
from worker.simulator.oauth import TokenIssuer

__all__ = ["CallTicket", "RequestRecord", "SimState"]

RECENT_REQUESTS = 100


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One call as the simulator saw it. Never holds an API key, only which header carried one."""

    seq: int
    api: str
    """openai, azure, anthropic, gemini, vertex, bedrock, or oauth2 (the token endpoint)."""
    model: str
    path: str
    query: Mapping[str, str]
    stream: bool
    auth_header: str | None
    """The name of the auth header present (authorization, api-key, x-api-key, x-goog-api-key),
    or "key" for Gemini's `?key=` query parameter."""
    headers: Mapping[str, str]
    """The other request headers, names lower-cased (auth and cookie headers left out)."""
    body: Mapping[str, Any]
    tools: tuple[str, ...]
    """Names of the tools the request offered."""
    message_count: int
    """Length of the API's message list (messages, or Gemini's contents)."""
    outcome: CallOutcome | None
    """None while the call is in flight."""
    status: int | None


class _Entry:
    __slots__ = ("fault", "remaining")

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.remaining = fault.times


class CallTicket:
    """A call in flight: the server states its outcome once."""

    __slots__ = ("_done", "_record", "_state")

    def __init__(self, state: SimState, record: RequestRecord) -> None:
        self._state = state
        self._record = record
        self._done = False

    @property
    def seq(self) -> int:
        """The call's number, unique within the simulator."""
        return self._record.seq

    def finish(self, outcome: CallOutcome, status: int | None) -> None:
        """Count the call under `outcome`; only the first call counts."""
        if not self._done:
            self._done = True
            self._state._finish(self._record, outcome, status)


class SimState:
    """Fault queues, counters and recent requests, per model."""

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._faults: dict[str, deque[_Entry]] = {}
        self._calls: Counter[str] = Counter()
        self._outcomes: Counter[tuple[str, CallOutcome]] = Counter()
        self._recent: dict[str, deque[RequestRecord]] = {}
        self._seq = 0
        self.tokens = TokenIssuer()

    def set_faults(self, model: str, faults: tuple[Fault, ...]) -> None:
        """Replace the model's queue (empty: healthy)."""
        with self._lock:
            self._faults[model] = deque(_Entry(f) for f in faults)

    def clear(self) -> None:
        """Forget every fault; counts and requests stay."""
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Forget faults, counts and requests."""
        with self._lock:
            self._faults.clear()
            self._calls.clear()
            self._outcomes.clear()
            self._recent.clear()

    def take(self, model: str) -> Fault | None:
        """The fault that applies to the call arriving now, using up one of its `times`."""
        with self._lock:
            queue = self._faults.get(model)
            if not queue:
                return None
            head = queue[0]
            if head.fault.rate < 1.0 and self._random.random() >= head.fault.rate:
                return None
            if head.remaining is not None:
                head.remaining -= 1
                if head.remaining == 0:
                    queue.popleft()
            return self._drawn(head.fault)

    def _drawn(self, fault: Fault) -> Fault:
        """`fault` with one latency of its `latency_mix` added (under the lock: seeded)."""
        if not fault.latency_mix:
            return fault
        point = self._random.random()
        for share, seconds in fault.latency_mix:
            if point < share:
                return replace(fault, latency_s=fault.latency_s + seconds)
            point -= share
        return fault

    def arrive(self, record: RequestRecord) -> CallTicket:
        """Count a call as it arrives and keep its request (numbered here, `seq` is ignored)."""
        with self._lock:
            self._seq += 1
            record = replace(record, seq=self._seq, outcome=None, status=None)
            self._calls[record.model] += 1
            recent = self._recent.setdefault(record.model, deque(maxlen=RECENT_REQUESTS))
            recent.append(record)
        return CallTicket(self, record)

    def _finish(self, record: RequestRecord, outcome: CallOutcome, status: int | None) -> None:
        with self._lock:
            self._outcomes[(record.model, outcome)] += 1
            recent = self._recent.get(record.model, deque())
            for i, kept in enumerate(recent):
                if kept.seq == record.seq:
                    recent[i] = replace(kept, outcome=outcome, status=status)
                    break

    def calls(self, model: str | None = None, outcome: CallOutcome | str | None = None) -> int:
        """Calls that arrived (outcome None) or ended with `outcome`, for one model or all."""
        with self._lock:
            if outcome is None:
                if model is None:
                    return sum(self._calls.values())
                return self._calls[model]
            wanted = CallOutcome(outcome)
            return sum(
                n
                for (m, o), n in self._outcomes.items()
                if o is wanted and (model is None or m == model)
            )

    def counts(self) -> dict[str, dict[str, int]]:
        """Per model: `calls` (arrived) and one key per outcome seen."""
        with self._lock:
            out: dict[str, dict[str, int]] = {m: {"calls": n} for m, n in self._calls.items()}
            for (model, outcome), n in self._outcomes.items():
                out.setdefault(model, {"calls": 0})[outcome.value] = n
            return out

    def requests(self, model: str) -> list[RequestRecord]:
        """The model's recent requests, oldest first."""
        with self._lock:
            return list(self._recent.get(model, ()))
