"""`SimulatorClient`: drive a simulator running in another process through its `/_sim` API."""

from __future__ import annotations

from types import TracebackType

import httpx

from worker.simulator.admin import RECORDS
from worker.simulator.faults import CallOutcome, Fault, fault_adapter
from worker.simulator.state import RequestRecord

__all__ = ["SimulatorClient"]


class SimulatorClient:
    """The `Simulator` control methods, over HTTP (sync httpx, no retries)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> SimulatorClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def healthy(self) -> bool:
        """True when the simulator answers."""
        try:
            return self._http.get("/_sim/health").status_code == 200
        except httpx.TransportError:
            return False

    def set_faults(self, model: str, *faults: Fault) -> None:
        """Replace `model`'s fault queue; no faults makes it healthy."""
        payload = [fault_adapter().dump_python(f, mode="json") for f in faults]
        self._http.put(f"/_sim/faults/{model}", json={"faults": payload}).raise_for_status()

    def clear(self) -> None:
        """Forget every model's faults (counts and requests stay)."""
        self._http.delete("/_sim/faults").raise_for_status()

    def reset(self) -> None:
        """Forget faults, counts and recorded requests."""
        self._http.post("/_sim/reset").raise_for_status()

    def set_token_lifetime(self, seconds: float) -> None:
        """How long the OAuth tokens issued from now on are good for (an hour by default)."""
        self._http.put("/_sim/tokens", json={"lifetime_s": seconds}).raise_for_status()

    def counts(self) -> dict[str, dict[str, int]]:
        """Per model: `calls` and one count per outcome seen."""
        response = self._http.get("/_sim/calls")
        response.raise_for_status()
        models: dict[str, dict[str, int]] = response.json()["models"]
        return models

    def calls(self, model: str | None = None, outcome: CallOutcome | str | None = None) -> int:
        """Calls that arrived (outcome None) or ended with `outcome`, for `model` or all models."""
        key = "calls" if outcome is None else CallOutcome(outcome).value
        counts = self.counts()
        chosen = counts.values() if model is None else [counts.get(model, {})]
        return sum(c.get(key, 0) for c in chosen)

    def requests(self, model: str) -> list[RequestRecord]:
        """`model`'s recent requests, oldest first."""
        response = self._http.get(f"/_sim/requests/{model}")
        response.raise_for_status()
        return RECORDS.validate_python(response.json()["requests"])
