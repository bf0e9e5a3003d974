"""What the side-by-side benches share: the rig (simulator, private Redis, pinned cores) and the
three contenders (relevo's chain, LiteLLM's Router, a bare httpx request) set up the same way.

The simulated providers run as `relevo simulate` in their own process, and a private
`redis-server` on a free port holds relevo's breakers and budgets and LiteLLM's cooldowns;
both are pinned to the core the client process is not on. Only 127.0.0.1 is spoken to:
LiteLLM is told to use its bundled model-cost map instead of fetching one.

The chain is the same three models for everyone, one per provider API:
`openai/alpha` (OpenAI Chat Completions, the primary), `anthropic/beta` (Anthropic
Messages), `google/gamma` (Gemini). LiteLLM reaches each through `api_base` on its own
native provider (`openai/`, `anthropic/`, `gemini/`), with the two backups as fallbacks of
the primary and one retry. litellm is a bench-only dependency (`pip install -e .[bench]`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# LiteLLM fetches a model-cost map from the internet at import time unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")

import httpx

from worker.settings import Settings, load_settings
from worker.simulator import SimulatorClient

T = TypeVar("T")

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "RELEVO_BENCH_KEY"
KEY = "sk-bench-0123456789abcdef"
os.environ.setdefault(KEY_ENV, KEY)

PRIMARY, BACKUP, LAST = "alpha", "beta", "gamma"  # the simulator's model ids
CHAIN = ("openai/alpha", "anthropic/beta", "google/gamma")
PROMPT = "Where is my order?"
MAX_TOKENS = 16


def say(text: str) -> None:
    """Progress, on stderr."""
    print(text, file=sys.stderr, flush=True)


def figure(name: str, value: float, unit: str) -> None:
    """One `FIGURE <name> <value> <unit>` line on stdout."""
    shown = f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
    print(f"FIGURE {name} {shown} {unit}", flush=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: int) -> float:
    """The q-th percentile (inclusive method); the value itself for fewer than two."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cores() -> tuple[int | None, int | None]:
    """(core for the client, core for the simulator and Redis); None when only one core."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        return None, None
    return mine[0], mine[1]


def pin(pid: int, core: int | None) -> None:
    if core is not None:
        os.sched_setaffinity(pid, {core})


@contextlib.contextmanager
def _child(cmd: Sequence[str], core: int | None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        pin(proc.pid, core)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait(check: Any, what: str, timeout_s: float = 30.0) -> None:
    until = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError, httpx.HTTPError):
            if check():
                return
        if time.monotonic() > until:
            raise SystemExit(f"{what} did not start within {timeout_s:g} s")
        time.sleep(0.1)


def _connects(port: int) -> bool:
    with socket.create_connection((HOST, port), 1):
        return True


@dataclass(frozen=True)
class Rig:
    """The simulator (URL and admin client) and the private Redis (URL)."""

    sim_url: str
    sim: SimulatorClient
    redis_url: str
    sim_pid: int
    redis_pid: int


@contextlib.contextmanager
def rig(core: int | None, *, seed: int | None = None) -> Iterator[Rig]:
    """`relevo simulate` (its random draws seeded with `seed`) and a private `redis-server`
    on free ports, pinned to `core`."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    raise_fd_limit()
    sim_port, redis_port = free_port(), free_port()
    relevo = str(Path(sys.executable).with_name("relevo"))
    redis_cmd = [binary, "--port", str(redis_port), "--bind", HOST, "--save", "", "--appendonly"]
    redis_cmd += ["no", "--maxclients", "10000"]
    simulate = [relevo, "--log-level", "warning", "simulate", "--port", str(sim_port)]
    simulate += [] if seed is None else ["--seed", str(seed)]
    with (
        _child(simulate, core) as s,
        _child(redis_cmd, core) as r,
    ):
        sim_url = f"http://{HOST}:{sim_port}"
        sim = SimulatorClient(sim_url)
        _wait(sim.healthy, "the simulator")
        _wait(lambda: _connects(redis_port), "redis")
        try:
            yield Rig(sim_url, sim, f"redis://{HOST}:{redis_port}/0", s.pid, r.pid)
        finally:
            sim.close()


# --- relevo ------------------------------------------------------------------------------


def relevo_settings(
    sim_url: str,
    redis_url: str,
    *,
    namespace: str = "bench",
    chain: Sequence[str] = CHAIN,
    breakers: dict[str, Any] | None = None,
    first_byte_timeout_s: float = 15.0,
    redis_timeout_s: float = 2.0,
) -> Settings:
    """relevo's settings for the three simulated models, its store on `redis_url`."""
    provider = {"api_key_env": KEY_ENV, "first_byte_timeout_s": first_byte_timeout_s}
    data: dict[str, Any] = {
        "turn_deadline_s": 30,
        "chain": {"models": list(chain)},
        "redis": {"url": redis_url, "namespace": namespace, "timeout_s": redis_timeout_s},
        "budgets": {"default_daily_usd": 1_000_000, "default_monthly_usd": 10_000_000},
        "breakers": breakers or {},
        "providers": {
            "oa": {"kind": "openai", "base_url": f"{sim_url}/v1", **provider},
            "an": {"kind": "anthropic", "base_url": sim_url, **provider},
            "gg": {"kind": "gemini", "base_url": sim_url, **provider},
        },
        "models": {
            "openai/alpha": _model("openai", "oa", PRIMARY),
            "anthropic/beta": _model("anthropic", "an", BACKUP),
            "google/gamma": _model("google", "gg", LAST),
        },
    }
    return load_settings(data=data)


def _model(vendor: str, provider: str, model_id: str) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "context_window": 100_000,
        "serve": [{"provider": provider, "model_id": model_id}],
        "input_usd_per_mtok": 2,
        "output_usd_per_mtok": 8,
    }


def quiet_relevo_logs() -> None:
    """relevo's production logging (JSON, info: one line per turn), written to /dev/null."""
    from worker.observability.logs import configure_logging

    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    configure_logging(level="info", json=True, stream=sink)


@functools.cache
def _messages() -> Any:
    from worker.types import Message

    # Built once, as LiteLLM's contender builds its `messages` once.
    return (Message(role="user", content=PROMPT),)


def turn_request(i: int = 0, *, stream: bool = False) -> Any:
    from worker.types import TurnRequest

    return TurnRequest(
        tenant_id=f"tenant{i % 8}",
        messages=_messages(),
        max_tokens=MAX_TOKENS,
        stream=stream,
    )


# --- LiteLLM -----------------------------------------------------------------------------


def litellm_model_list(sim_url: str) -> list[dict[str, Any]]:
    """The same three models, each on LiteLLM's native provider for its API."""
    common = {"api_key": KEY, "max_retries": 0}
    return [
        {
            "model_name": "primary",
            "litellm_params": {"model": f"openai/{PRIMARY}", "api_base": f"{sim_url}/v1", **common},
        },
        {
            "model_name": "backup",
            "litellm_params": {"model": f"anthropic/{BACKUP}", "api_base": sim_url, **common},
        },
        {
            "model_name": "last",
            "litellm_params": {
                "model": f"gemini/{LAST}",
                "api_base": f"{sim_url}/v1beta",
                **common,
            },
        },
    ]


def litellm_router(sim_url: str, *, redis_url: str | None = None, **extra: Any) -> Any:
    """LiteLLM's Router: primary with the two backups as fallbacks, one retry.

    With `redis_url`, cooldowns and fail counts are shared through that Redis
    (`redis_host`/`redis_port`), as LiteLLM's docs advise for several processes.
    """
    import litellm
    from litellm import Router  # type: ignore[attr-defined]

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    shared: dict[str, Any] = {}
    if redis_url is not None:
        host_port = redis_url.removeprefix("redis://").split("/")[0]
        host, _, port = host_port.partition(":")
        shared = {"redis_host": host, "redis_port": int(port)}
    return Router(
        model_list=litellm_model_list(sim_url),
        fallbacks=[{"primary": ["backup", "last"]}],
        num_retries=1,
        **shared,
        **extra,
    )


def litellm_messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPT}]


async def litellm_first_token_s(router: Any, messages: list[dict[str, str]]) -> float:
    """Seconds until LiteLLM's Router streams the primary's first chunk with content."""
    started, first = time.perf_counter(), 0.0
    stream = await router.acompletion(
        model="primary", messages=messages, max_tokens=MAX_TOKENS, stream=True
    )
    async for chunk in stream:
        if not first and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    if not first:
        raise RuntimeError("no content streamed")
    return first - started


# --- bare httpx --------------------------------------------------------------------------


def bare_request(sim_url: str, *, stream: bool = False) -> tuple[str, dict[str, str], bytes]:
    """The primary's request as relevo's OpenAI adapter sends it: url, headers, body."""
    import json

    body: dict[str, Any] = {
        "model": PRIMARY,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    return f"{sim_url}/v1/chat/completions", headers, json.dumps(body).encode()


def run_pinned(
    measure: Callable[[Rig], Coroutine[Any, Any, T]], report: Callable[[T], None]
) -> int:
    """The usual bench: client on one core, simulator and Redis on the other, then report."""
    client_core, server_core = cores()
    pin(0, client_core)
    quiet_relevo_logs()
    started = time.monotonic()
    with rig(server_core) as the_rig:
        out = asyncio.run(measure(the_rig))
    report(out)
    say(f"# done in {time.monotonic() - started:.0f} s")
    return 0
