"""Building blocks for chain tests: settings pointing at the simulator, canned faults, a guard."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from worker.adapters import make_client
from worker.guard.protocol import Admission, Availability, Charge, FleetView, Guard, Signal, Target
from worker.settings import Settings, load_settings
from worker.simulator import Fault
from worker.simulator.catalogue import Kind, canned
from worker.turn.chain import Chain
from worker.types import Message, Tool, TurnRequest, TurnResult

KEY = "sk-test-0123456789abcdef"

# One model per API kind, and a chain order that puts each kind first.
MODEL_OF: dict[str, str] = {
    "openai": "openai/alpha",
    "anthropic": "anthropic/beta",
    "gemini": "google/gamma",
}
ID_OF = {"openai/alpha": "alpha", "anthropic/beta": "beta", "google/gamma": "gamma"}
ORDER = {
    "openai": ("openai/alpha", "anthropic/beta", "google/gamma"),
    "anthropic": ("anthropic/beta", "google/gamma", "openai/alpha"),
    "gemini": ("google/gamma", "openai/alpha", "anthropic/beta"),
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def settings(
    url: str,
    chain: Sequence[str] = ORDER["openai"],
    *,
    models: dict[str, dict[str, Any]] | None = None,
    first_byte_timeout_s: float = 0.5,
    deadline_s: float = 10.0,
    **sections: Any,
) -> Settings:
    provider = {"api_key_env": "RELEVO_TEST_KEY", "first_byte_timeout_s": first_byte_timeout_s}
    provider["total_timeout_s"] = 5.0
    data: dict[str, Any] = {
        "turn_deadline_s": deadline_s,
        "chain": {"models": list(chain)},
        "retry": {"base_delay_s": 0.01, "retry_after_cap_s": 1.0},
        "providers": {
            "oa": {"kind": "openai", "base_url": f"{url}/v1", **provider},
            "az": {
                "kind": "openai",
                "base_url": f"{url}/openai",
                "azure_api_version": "2024-10-21",
                **provider,
            },
            "an": {"kind": "anthropic", "base_url": url, **provider},
            "gg": {"kind": "gemini", "base_url": url, **provider},
            "dead": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{closed_port()}/v1",
                **provider,
            },
        },
        "models": {
            "openai/alpha": model("openai", ("oa", "alpha"), prices=(2, 8)),
            "anthropic/beta": model("anthropic", ("an", "beta"), prices=(3, 15)),
            "google/gamma": model("google", ("gg", "gamma"), prices=(1, 4)),
            "openai/multi": model("openai", ("oa", "alpha"), ("az", "alpha-az")),
            "openai/alpha-mini": model("openai", ("oa", "alpha-mini")),
            "openai/dead": model("openai", ("dead", "dead")),
            **(models or {}),
        },
        **sections,
    }
    return load_settings(data=data)


def model(
    vendor: str, *serve: tuple[str, str], prices: tuple[int, int] = (1, 2), **extra: Any
) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "context_window": 100_000,
        "serve": [{"provider": p, "model_id": m} for p, m in serve],
        "input_usd_per_mtok": prices[0],
        "output_usd_per_mtok": prices[1],
        **extra,
    }


def fault(
    kind: Kind, name: str, *, times: int | None = None, retry_after_s: float | None = None
) -> Fault:
    """A simulator fault answering with one of the catalogue's real error responses."""
    error = canned(kind, name, retry_after_s=retry_after_s)
    body = error.body.decode() if isinstance(error.body, bytes) else error.body
    return Fault(status=error.status, body=body, headers=error.headers, times=times)


def turn(
    text: str = "Where is my order?",
    *,
    tools: tuple[Tool, ...] = (),
    stream: bool = False,
    deadline_s: float = 10.0,
    messages: tuple[Message, ...] = (),
) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme",
        messages=messages
        or (
            Message(role="system", content="You are the support agent."),
            Message(role="user", content=text),
        ),
        tools=tools,
        stream=stream,
        deadline_s=deadline_s,
    )


async def run(
    config: Settings,
    request: TurnRequest,
    *,
    guard: Guard | None = None,
    on_text: Any = None,
) -> TurnResult:
    async with make_client() as client:
        chain = Chain.from_settings(config, client, guard=guard)
        return await chain.run(request, on_text=on_text)


class ScriptedGuard:
    """A guard whose fleet view is given, and which remembers what it was told."""

    def __init__(
        self,
        availability: dict[str, Availability] | None = None,
        *,
        kill_switch: str | None = None,
        probe_granted: bool = True,
        refuse: dict[str, str] | None = None,
    ) -> None:
        self.availability = availability or {}
        self.kill_switch = kill_switch
        self.probe_granted = probe_granted
        self.refuse = refuse or {}
        self.reserved: list[Charge] = []
        self.concluded: list[tuple[Target, Charge, Signal | None, int | None]] = []
        self.held: list[str] = []
        self.handed_off: list[tuple[str, str]] = []
        self.released_target: Target | None = None
        self.probes: list[str] = []

    def _refusal(self, charge: Charge) -> str | None:
        return self.refuse.get(charge.provider)

    async def admit(self, targets: Sequence[Target], first: Charge | None) -> Admission:
        view = FleetView(
            kill_switch=self.kill_switch,
            availability={
                t: self.availability[t.provider_model]
                for t in targets
                if t.provider_model in self.availability
            },
        )
        self.released_target = targets[0]
        if first is None:
            return Admission(view)
        self.reserved.append(first)
        return Admission(view, self._refusal(first))

    async def reserve(self, charge: Charge, *, replacing: Charge | None = None) -> str | None:
        if replacing is not None and self.released_target is not None:
            self.concluded.append((self.released_target, replacing, None, None))
        self.reserved.append(charge)
        return self._refusal(charge)

    async def acquire_probe(self, target: Target, holder: str) -> bool:
        self.probes.append(holder)
        return self.probe_granted

    async def conclude(
        self,
        target: Target,
        charge: Charge,
        *,
        signal: Signal | None,
        cost_micros: int | None,
        holder: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.concluded.append((target, charge, signal, cost_micros))

    async def hold(self, turn_id: str, payload: str) -> None:
        self.held.append(payload)

    async def handoff(self, tenant: str, turn_id: str, reason: str, payload: str) -> None:
        self.handed_off.append((reason, payload))


# The two-model chain a worker process reads from a file: top-level keys first,
# then each test's own sections, then these tables (TOML wants that order).
_WORKER_TABLES = """
[chain]
models = ["openai/alpha", "anthropic/beta"]

[redis]
url = "{redis_url}"
namespace = "{namespace}"

[providers.oa]
kind = "openai"
base_url = "{sim}/v1"
api_key_env = "{key_env}"
first_byte_timeout_s = 2

[providers.an]
kind = "anthropic"
base_url = "{sim}"
api_key_env = "{key_env}"
first_byte_timeout_s = 2

[models."openai/alpha"]
vendor = "openai"
context_window = 100000
input_usd_per_mtok = 2
output_usd_per_mtok = 8
serve = [{{ provider = "oa", model_id = "alpha" }}]

[models."anthropic/beta"]
vendor = "anthropic"
context_window = 100000
input_usd_per_mtok = 3
output_usd_per_mtok = 15
serve = [{{ provider = "an", model_id = "beta" }}]
"""


def worker_config(
    *,
    sim: str,
    redis_url: str,
    namespace: str,
    sections: str = "",
    key_env: str = "RELEVO_TEST_KEY",
    deadline_s: float = 10,
) -> str:
    """A worker's TOML configuration: the two-model chain on the simulator, plus `sections`.

    The queue is the namespace, so tests sharing one Redis never take each other's turns.
    """
    queue = f'[worker]\nqueue = "{namespace}"\n' if "[worker]" not in sections else ""
    tables = _WORKER_TABLES.format(
        sim=sim, redis_url=redis_url, namespace=namespace, key_env=key_env
    )
    return f"turn_deadline_s = {deadline_s}\n\n{queue}{sections}\n{tables}"
