"""What `relevo demo` runs: its configuration, its tenants and the phases of trouble it injects.

Everything here is data: the chain configuration (a TOML template, also shipped
rendered as `examples/demo.toml`), the tenants (one with a tiny daily budget),
and the phases, each a duration and the faults each simulated model follows.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field

from worker.settings import Settings, load_settings
from worker.simulator import Fault
from worker.types import ImagePart, Message, TextPart, TurnRequest

__all__ = [
    "BACKUP",
    "DEADLINE_S",
    "EXAMPLE_REDIS_URL",
    "EXAMPLE_SIM_URL",
    "IMAGE_TURN",
    "PHASES",
    "PRIMARY",
    "SIM_MODELS",
    "TENANTS",
    "THRIFTY_DAILY_MICROS",
    "THRIFTY_TENANT",
    "Phase",
    "demo_settings",
    "make_request",
    "render_config",
]

PRIMARY = "claude-sim"
BACKUP = "gpt-sim"
# The simulator's model ids, in chain order: primary, backup, last resort.
SIM_MODELS = (PRIMARY, BACKUP, "gemini-sim")
TENANTS = ("acme", "globex", "initech", "umbrella")
THRIFTY_TENANT = "umbrella"
# $0.006 a day: a few dozen small turns, so it runs out halfway through the demo.
THRIFTY_DAILY_MICROS = 6_000
DEADLINE_S = 10.0
_MAX_TOKENS = 64
# Healthy calls still take a moment, so turns overlap as they would in a fleet.
_LATENCY_S = 0.05

# The one turn that carries an image (a photo of a parcel): its number in the run lands it
# in the outage, so it falls back with its image to a backup that takes images too.
IMAGE_TURN = 60
_PARCEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAEAAAAAgCAIAAAAt/+nTAAAAVklEQVR42u3YQQoAIAgEwIz+/2X7QB2iQwaz1wicIEQj"
    "M9vP6e3zAAAAALzN2B1ERLValy1rnF54ld2D+gMAAAAAAAAAAAAF54GaI8GiSIstAAAAgJtMRt4MQiiRdzgAAAAASUVO"
    "RK5CYII="
)

EXAMPLE_SIM_URL = "http://127.0.0.1:8901"
EXAMPLE_REDIS_URL = "redis://127.0.0.1:6379/0"

_CONFIG = """\
# relevo demo: three simulated models, one per provider API, behind one chain.
# `relevo demo --redis URL` reads this file, serves the simulated providers at
# their base_url, and needs a worker started with the same file:
#     relevo worker --config examples/demo.toml
# (`relevo demo` alone runs the same settings on ports of its own.)
turn_deadline_s = 10

[chain]
models = ["anthropic/claude-sim", "openai/gpt-sim", "google/gemini-sim"]

[retry]
base_delay_s = 0.05
retry_after_cap_s = 1.0

[redis]
url = "{redis_url}"
# The demo resets this namespace when it starts: never share it with real turns.
namespace = "relevo-demo"
# The embedded Redis shares the demo's CPU with the worker: allow it more than
# the production default.
timeout_s = 2.0

[worker]
queue = "relevo-demo"
processes = 1
threads = 16

# Small thresholds and short breaks, so an outage trips the breaker within a
# few calls and the recovery shows within seconds.
[breakers]
window_s = 5
min_calls_in_window = 4
consecutive_failures_threshold = 3
break_s = 1.5
max_break_s = 2
probe_ttl_s = 2
default_cooldown_s = 1

[budgets]
default_daily_usd = 10
hold_ttl_s = 30

[providers.anthropic_sim]
kind = "anthropic"
base_url = "{sim_url}"

[providers.openai_sim]
kind = "openai"
base_url = "{sim_url}/v1"

[providers.gemini_sim]
kind = "gemini"
base_url = "{sim_url}"

# Each takes images: the run's image turn may be answered by any of them.
[models."anthropic/claude-sim"]
vendor = "anthropic"
context_window = 200000
inputs = ["text", "image"]
input_usd_per_mtok = 3
output_usd_per_mtok = 15
serve = [{{ provider = "anthropic_sim", model_id = "claude-sim" }}]

[models."openai/gpt-sim"]
vendor = "openai"
context_window = 128000
inputs = ["text", "image"]
image_token_multiplier = 1
input_usd_per_mtok = 2.5
output_usd_per_mtok = 10
serve = [{{ provider = "openai_sim", model_id = "gpt-sim" }}]

[models."google/gemini-sim"]
vendor = "google"
context_window = 1000000
inputs = ["text", "image"]
input_usd_per_mtok = 1.25
output_usd_per_mtok = 5
serve = [{{ provider = "gemini_sim", model_id = "gemini-sim" }}]
"""


def render_config(*, sim_url: str, redis_url: str) -> str:
    """The demo's configuration (TOML) for a simulator and a Redis server."""
    return _CONFIG.format(sim_url=sim_url.rstrip("/"), redis_url=redis_url)


def demo_settings(sim_url: str, redis_url: str = EXAMPLE_REDIS_URL) -> Settings:
    """The demo's settings for a simulator at `sim_url` (environment overrides apply)."""
    return load_settings(data=tomllib.loads(render_config(sim_url=sim_url, redis_url=redis_url)))


@dataclass(frozen=True)
class Phase:
    """A stretch of the run: how long it lasts and what each simulated model does."""

    key: str
    title: str
    seconds: float
    faults: Mapping[str, tuple[Fault, ...]] = field(default_factory=dict)

    def faults_for(self, model: str) -> tuple[Fault, ...]:
        """`model`'s fault queue for this phase (healthy answers by default)."""
        return self.faults.get(model, (_HEALTHY,))


_HEALTHY = Fault(latency_s=_LATENCY_S)

PHASES = (
    Phase("healthy", "every model answers", 3.0),
    Phase(
        "outage",
        f"the primary, {PRIMARY}, answers 529 overloaded to every call",
        6.0,
        {PRIMARY: (Fault(status=529, latency_s=_LATENCY_S / 2),)},
    ),
    Phase(
        "recovery",
        f"{PRIMARY} is healthy again; its breaker lets a probe through, then closes",
        4.0,
    ),
    Phase(
        "rate_limit",
        f"{PRIMARY} answers 429 with Retry-After 0.4 s to 40% of calls (within the cap: "
        f"turns wait); {BACKUP} once with Retry-After 1.5 s (over the cap: next model)",
        4.0,
        {
            PRIMARY: (Fault(status=429, headers={"retry-after": "0.4"}, rate=0.4, latency_s=0.02),),
            BACKUP: (
                Fault(latency_s=_LATENCY_S, times=5),
                Fault(status=429, headers={"retry-after": "1.5"}, times=1, latency_s=0.02),
                _HEALTHY,
            ),
        },
    ),
)


def make_request(number: int) -> TurnRequest:
    """The `number`th turn of the run; tenants take turns (`IMAGE_TURN` carries an image)."""
    question = f"Where is my order #{1000 + number}?"
    content: str | tuple[TextPart | ImagePart, ...] = question
    if number == IMAGE_TURN:
        photo = ImagePart(media_type="image/png", data=_PARCEL_PNG)
        content = (TextPart(text=f"{question} This parcel came instead."), photo)
    return TurnRequest(
        tenant_id=TENANTS[number % len(TENANTS)],
        messages=(
            Message(role="system", content="You are the support agent of a small shop."),
            Message(role="user", content=content),
        ),
        max_tokens=_MAX_TOKENS,
        deadline_s=DEADLINE_S,
    )
