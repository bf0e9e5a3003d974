"""Building blocks for chain tests: settings pointing at the simulator, canned faults, a guard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.netkit import free_port
from worker.adapters import make_client
from worker.guard.protocol import Guard
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


def settings(
    url: str,
    chain: Sequence[str] = ORDER["openai"],
    *,
    models: dict[str, dict[str, Any]] | None = None,
    first_byte_timeout_s: float = 0.5,
    deadline_s: float = 10.0,
    hedging: dict[str, Any] | None = None,
    **sections: Any,
) -> Settings:
    provider = {"api_key_env": "RELEVO_TEST_KEY", "first_byte_timeout_s": first_byte_timeout_s}
    provider["total_timeout_s"] = 5.0
    data: dict[str, Any] = {
        "turn_deadline_s": deadline_s,
        "chain": {"models": list(chain), "hedging": hedging or {}},
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
                "base_url": f"http://127.0.0.1:{free_port()}/v1",
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
    async with make_client(config.http) as client:
        chain = Chain.from_settings(config, client, guard=guard)
        return await chain.run(request, on_text=on_text)


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


# The fleet tests' sections: turns a worker lost come back soon (a short visibility timeout).
FLEET_SECTIONS = """
[retry]
base_delay_s = 0.01

[worker]
queue = "{namespace}"
visibility_timeout_s = 12
restore_interval_s = 1

[budgets]
hold_ttl_s = 10
"""


def write_worker_config(
    path: Path,
    *,
    namespace: str,
    sections: str = "",
    fill: Mapping[str, object] = {},
    **config: Any,
) -> Path:
    """`worker_config(namespace=..., sections=..., **config)` written to `path`, with
    `{namespace}` and each of `fill` filled in in `sections` first (a brace meant for TOML
    is written twice)."""
    filled = sections.format(namespace=namespace, **fill)
    path.write_text(worker_config(namespace=namespace, sections=filled, **config), encoding="utf-8")
    return path
