"""One typed settings object, read from a TOML file with environment overrides.

Environment variables override the file: `RELEVO_TURN_DEADLINE_S=30`,
`RELEVO_PROVIDERS__OPENAI__BASE_URL=http://127.0.0.1:8000/v1` (nested keys
are joined with a double underscore). A bad configuration fails here, when it
is loaded, with a `ConfigError` naming the key.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from redis.asyncio import Redis

import breakers
import budgets
from breakers.sentinel import SentinelAddress, is_sentinel
from budgets.keys import check_namespace
from worker.errors import ConfigError

__all__ = [
    "BreakerSettings",
    "BrokerSettings",
    "BudgetSettings",
    "ChainSettings",
    "ConsoleSettings",
    "DegradationSettings",
    "FairnessSettings",
    "HedgingSettings",
    "HttpSettings",
    "LimitsSettings",
    "ModelSettings",
    "ObservabilitySettings",
    "ProviderSettings",
    "RedisSettings",
    "RetrySettings",
    "Serving",
    "Settings",
    "WorkerSettings",
    "load_settings",
]

ModelSlug = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:-]*$")
]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]


class _Section(BaseModel):
    # A field's docstring is its description: docs/configuration.md is generated from them.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ProviderSettings(_Section):
    """One provider endpoint and account.

    A `bedrock` provider takes no API key: requests are signed (SigV4) with the AWS
    credentials botocore finds (environment, shared config and credentials files, container
    or instance role). It needs `region`; `base_url` defaults to that region's endpoint.
    A `vertex` provider takes no API key either: it signs in with Google's
    application-default credentials, and needs `region` (the location) and `project`.
    """

    kind: Literal["openai", "anthropic", "gemini", "bedrock", "vertex"]
    """The API it speaks: `openai` (also Azure OpenAI, vLLM, Ollama), `anthropic`, `gemini`,
    `bedrock` (AWS Bedrock's Converse API) or `vertex` (Google Vertex AI)."""
    api: Literal["chat", "responses"] = "chat"
    """`openai` only: Chat Completions (`chat`, the default) or the Responses API
    (`responses`)."""
    base_url: str = Field(default="", pattern=r"^$|^https?://")
    """The API root (`openai`: up to and including `/v1`). Required, except for `bedrock` and
    `vertex`, whose region gives the endpoint (set it for a proxy or the simulator)."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding the API key (neither this nor `api_key_file`: a
    keyless local server)."""
    api_key_file: Path | None = None
    """A mounted file holding the API key, instead of `api_key_env`."""
    azure_api_version: str | None = None
    """Set for Azure OpenAI: deployment URLs and the `api-key` header."""
    first_byte_timeout_s: float = Field(default=15.0, gt=0)
    """No content by then: the next provider or model."""
    total_timeout_s: float = Field(default=120.0, gt=0)
    """The whole answer by then."""
    region: str | None = Field(default=None, pattern=r"^[a-z0-9-]{1,32}$")
    """`bedrock`: the AWS region requests are signed for (`us-east-1`); `vertex`: the Vertex
    AI location (`us-east5`, `europe-west1`, `global`)."""
    project: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
    """`vertex`: the Google Cloud project that is billed (its id, not its number or name)."""

    @model_validator(mode="before")
    @classmethod
    def _vertex_endpoint(cls, data: Any) -> Any:
        """A `vertex` provider needs its location and project; its endpoint follows from the
        location unless `base_url` overrides it (a proxy, the simulator)."""
        if not isinstance(data, dict) or data.get("kind") != "vertex":
            return data
        for key in ("region", "project"):
            if data.get(key) is None:
                raise ValueError(f'{key}: needed with kind = "vertex" ({_VERTEX_KEYS[key]})')
        if data.get("api_key_env") is not None or data.get("api_key_file") is not None:
            raise ValueError(
                'api_key_env, api_key_file: not used with kind = "vertex", which signs in '
                "with Google application-default credentials"
            )
        if not _installed("google.auth"):
            raise ValueError("kind: \"vertex\" needs google-auth: pip install 'relevo[vertex]'")
        if data.get("base_url") is None and isinstance(data["region"], str):
            region = data["region"]
            host = "aiplatform.googleapis.com"
            data = {
                **data,
                "base_url": f"https://{host if region == 'global' else f'{region}-{host}'}",
            }
        return data

    @property
    def wire(self) -> str:
        """The API this provider speaks: its kind, or `openai-responses`."""
        return "openai-responses" if self.api == "responses" else self.kind

    @model_validator(mode="after")
    def _kind_needs(self) -> ProviderSettings:
        if self.api != "chat" and self.kind != "openai":
            raise ValueError(
                f'api: "{self.api}" is an openai provider\'s choice; kind = "{self.kind}" '
                "speaks its own API (leave api unset)"
            )
        if self.kind != "bedrock":
            if not self.base_url:
                raise ValueError("base_url: field required")
            return self
        if self.region is None:
            raise ValueError("region: a bedrock provider needs its AWS region, e.g. us-east-1")
        if self.api_key_env is not None or self.api_key_file is not None:
            raise ValueError(
                "api_key_env, api_key_file: bedrock takes no API key; requests are signed "
                "with AWS credentials from the standard chain (environment, ~/.aws, role)"
            )
        if not _installed("botocore"):
            raise ValueError("kind: bedrock needs botocore: pip install 'relevo[bedrock]'")
        return self

    @property
    def gen_ai_provider(self) -> str:
        """OpenTelemetry's `gen_ai.provider.name` for this provider's API (its well-known
        values: `openai`, `azure.ai.openai`, `anthropic`, `gcp.gemini`...)."""
        if self.kind == "openai" and self.azure_api_version is not None:
            return "azure.ai.openai"
        return _GEN_AI_PROVIDERS[self.kind]

    def api_key(self) -> str | None:
        """The secret, read from the worker's environment or a mounted file."""
        if self.api_key_file is not None:
            try:
                return self.api_key_file.read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return None


# The GenAI semantic conventions' name of each kind's API (Azure's is decided above).
_GEN_AI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
}

_VERTEX_KEYS = {
    "region": 'the Vertex AI location, e.g. "us-east5", "europe-west1" or "global"',
    "project": "the Google Cloud project id",
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or a module set to None
        return False


class Serving(_Section):
    """A provider that serves a model, under that provider's own model id."""

    provider: Name
    """A provider under `[providers]`."""
    # Model ids become parts of Redis keys (cooldowns): the breakers' key alphabet.
    model_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
    """The model's id on that provider (an Azure deployment's name, a Bedrock inference
    profile, `claude-sonnet-4@20250514` on Vertex AI)."""


class ModelSettings(_Section):
    """A model of the chain: who serves it, what it can do, what it costs."""

    vendor: Name
    """The company behind the model: its vendor breaker covers every model it makes."""
    serve: tuple[Serving, ...] = Field(min_length=1)
    """`[{provider, model_id}, …]`: the providers that serve it, in failover order."""
    context_window: int = Field(gt=0)
    """Its window, in tokens: a turn too long for it gets a trimmed history, or skips it."""
    tools: Literal["full", "read_only", "none"] = "full"
    """The tools it may call: all, the read-only ones (no side effects), or none."""
    degrade_to_read_only: bool = False
    """Run it without the tools it cannot take (the result says so) instead of skipping it."""
    input_usd_per_mtok: Decimal = Field(ge=0, default=Decimal(0))
    """Its input price, in dollars per million tokens (held as integer micro-dollars)."""
    output_usd_per_mtok: Decimal = Field(ge=0, default=Decimal(0))
    """Its output price, in dollars per million tokens."""
    cache_write_usd_per_mtok: Decimal | None = Field(ge=0, default=None)
    """The prompt-cache write price; unset, what the vendor bills over the input price
    (1.25x for Anthropic's 5-minute cache; its 1-hour cache, 2x, needs this set)."""
    # Never less than a provider bills for reads (all three discount them), so a missing
    # price over-charges, never under-charges.
    cache_read_usd_per_mtok: Decimal | None = Field(ge=0, default=None)
    """The prompt-cache read price; unset, the input price."""
    # Sent only when below the turn's max_tokens, as the API requires.
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    """Claude's extended thinking, on Anthropic, Bedrock and Vertex AI: the tokens the model
    may think before answering (at least 1024)."""
    # Text only unless configured: nothing is ever dropped silently to make a model fit.
    inputs: tuple[Literal["text", "image", "pdf"], ...] = ("text",)
    """What it takes beside text: a turn with an image or a PDF skips a model without it."""
    # The largest multiple keeps the input estimate an upper bound.
    image_token_multiplier: Decimal | None = Field(default=None, gt=0, le=100)
    """How many times its vendor's image formula it bills an image (gpt-4o-mini 33.34,
    gpt-4.1-mini 1.62; 1 for GPT-4o, GPT-4.1, GPT-5); unset, the largest its vendor
    documents."""
    structured_output: bool = False
    """Whether it answers in a given JSON schema (`response_format`); if not, such turns
    skip it."""
    # OpenAI's reasoning models refuse the sampling fields: they are not sent to them.
    reasoning: bool = False
    """Whether it is a reasoning model: only those are sent a turn's `reasoning_effort`."""

    @property
    def input_micros_per_mtok(self) -> int:
        return _to_micros(self.input_usd_per_mtok)

    @property
    def output_micros_per_mtok(self) -> int:
        return _to_micros(self.output_usd_per_mtok)

    @property
    def cache_write_micros_per_mtok(self) -> int:
        """The cache-write price, or the vendor's default over the input price."""
        price = self.cache_write_usd_per_mtok
        if price is None:
            price = self.input_usd_per_mtok * CACHE_WRITE_FACTOR.get(self.vendor, Decimal(1))
        return _to_micros(price)

    @property
    def cache_read_micros_per_mtok(self) -> int:
        """The cache-read price, or the input price when none is set."""
        price = self.cache_read_usd_per_mtok
        return self.input_micros_per_mtok if price is None else _to_micros(price)

    @property
    def worst_input_micros_per_mtok(self) -> int:
        """The most an input token may cost (a reservation's worst case): any input token
        may be billed as a cache write."""
        return max(self.input_micros_per_mtok, self.cache_write_micros_per_mtok)


# What a vendor bills a prompt-cache write over its input price, by default.
CACHE_WRITE_FACTOR: dict[str, Decimal] = {"anthropic": Decimal("1.25")}


def _to_micros(dollars: Decimal) -> int:
    return int((dollars * budgets.MICROS_PER_DOLLAR).to_integral_value(rounding=ROUND_CEILING))


class HedgingSettings(_Section):
    """Hedged attempts: a call with no content by its hedge delay gets the next model
    started beside it; the first to send content answers (docs/hedging.md)."""

    enabled: bool = False
    """Hedged attempts on or off."""
    percentile: float = Field(default=95.0, gt=0, lt=100)
    """The hedge delay: this percentile of the model-on-provider's first-byte latency,
    fleet-wide..."""
    min_samples: int = Field(default=50, ge=1)
    """...once it has this many samples in the window; `fallback_s` until then."""
    fallback_s: float = Field(default=1.0, gt=0, le=120)
    """The hedge delay while too few samples are known."""
    floor_s: float = Field(default=0.05, ge=0, le=60)
    """The shortest hedge delay."""
    window_s: float = Field(default=300.0, ge=1, le=86_400)
    """Latency samples older than two windows are forgotten."""
    budget_share: float = Field(default=0.05, ge=0, le=1)
    """The fleet's hedge budget: each normal attempt refills a token bucket by this share
    of a hedge."""
    burst: int = Field(default=10, ge=1, le=10_000)
    """The most hedges that bucket holds."""
    refresh_s: float = Field(default=5.0, gt=0, le=3600)
    """How often a process re-reads the fleet's latency evidence."""


class ChainSettings(_Section):
    """The ordered models a turn may use: the primary first."""

    models: tuple[ModelSlug, ...] = Field(min_length=2, max_length=3)
    """Two or three model slugs (each under `[models]`), the primary first."""
    hedging: HedgingSettings = HedgingSettings()
    """Hedged attempts (docs/hedging.md)."""


class RetrySettings(_Section):
    """The per-model retry: at most one, short, jittered."""

    retries_per_model: int = Field(default=1, ge=0, le=1)
    """Retries of the same model on the same provider before moving on: 0 or 1."""
    base_delay_s: float = Field(default=0.2, ge=0, le=5)
    """A retry waits between half and all of this."""
    retry_after_cap_s: float = Field(default=5.0, ge=0, le=60)
    """The longest wait a 429's hint may ask for and still be waited out (within the
    turn's deadline); a longer one moves on."""


class DegradationSettings(_Section):
    """What a turn does when money, not health, stops it."""

    action: Literal["message", "handoff", "read_only", "cheaper_model"] = "message"
    """What a money-stopped turn does: answer `message`, go on the hand-off stream, run
    read-only, or be answered by `cheaper_model` (docs/budgets.md)."""
    message: str = Field(
        default="The assistant is unavailable right now; a person will follow up.",
        max_length=2000,
    )
    """The reply of a degraded turn."""
    cheaper_model: ModelSlug | None = None
    """With `action = "cheaper_model"`: the model under `[models]` (in the chain or not)
    that answers, in one call, a turn the tenant's budget refused; never used for a
    provider's quota."""

    @model_validator(mode="after")
    def _cheaper_model_named(self) -> DegradationSettings:
        if self.action == "cheaper_model" and self.cheaper_model is None:
            raise ValueError('cheaper_model: needed with action = "cheaper_model"')
        return self


class RedisSettings(_Section):
    """The shared store: breakers, cooldowns, kill switch, budgets, results (and Celery's
    broker unless `[broker] url` is set)."""

    url: str = Field(
        default="redis://127.0.0.1:6379/0", pattern=r"^(redis|rediss|unix|sentinel)://"
    )
    """The shared store, also Celery's results and, unless `[broker] url` is set, its
    broker: one server (`rediss://` and `user:password@` work), or Sentinel's way,
    `sentinel://h1:26379;sentinel://h2:26379/0`."""
    sentinel_master: Name | None = None
    """With a `sentinel://` URL: the primary's name the sentinels watch."""
    # Celery cannot use Cluster, hence a second URL.
    shared_url: str | None = Field(default=None, pattern=r"^rediss?(\+cluster)?://")
    """The breakers, cooldowns, kill switch and budgets on another store, e.g. a Redis
    Cluster (`redis+cluster://h1:7000`); the broker, results and turn store stay at `url`."""
    namespace: Name = "relevo"
    """The prefix of every key relevo writes."""
    # A slow store must not add seconds to a turn.
    timeout_s: float = Field(default=0.25, gt=0, le=5)
    """The control path gives up on the store after this long (the turn goes on, on the
    worker's local view)."""
    rejoin_check_s: float = Field(default=1.0, gt=0, le=60)
    """How often a worker that lost the store asks whether it answers again, and resends
    the results and spend it could not write."""

    @model_validator(mode="after")
    def _sentinel(self) -> RedisSettings:
        if is_sentinel(self.url):
            try:
                SentinelAddress.parse(self.url)
            except ValueError as exc:
                raise ValueError(f"url: {exc}") from None
            if self.sentinel_master is None:
                raise ValueError("sentinel_master: needed with a sentinel:// url")
        elif self.sentinel_master is not None:
            raise ValueError("sentinel_master: only with a sentinel:// url")
        return self

    def connect(self, *, timeout_s: float | None = None, timed_by_caller: bool = False) -> Redis:
        """A client on this store (`breakers.connect`), with `timeout_s` or the configured one."""
        return breakers.connect(
            self.url,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            timed_by_caller=timed_by_caller,
            sentinel_master=self.sentinel_master,
        )

    def connect_shared(
        self, *, timeout_s: float | None = None, timed_by_caller: bool = False
    ) -> Redis:
        """A client on the shared state's store: `shared_url`, else the same as `connect`."""
        if self.shared_url is None:
            return self.connect(timeout_s=timeout_s, timed_by_caller=timed_by_caller)
        return breakers.connect(
            self.shared_url,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            timed_by_caller=timed_by_caller,
        )


class BrokerSettings(_Section):
    """Celery's broker, when it is not the Redis at `[redis] url` (docs/deploy.md)."""

    url: str | None = Field(default=None, pattern=r"^amqps?://")
    """RabbitMQ (`amqp://user:password@host:5672/vhost`, `amqps://` for TLS): the fleet's
    queue becomes a quorum queue, every publish waits for the broker's confirm. Unset: the
    Redis at `[redis] url`. Results, the turn store and the fair queue stay in Redis."""

    @property
    def rabbitmq(self) -> bool:
        """True when the broker is RabbitMQ."""
        return self.url is not None


_POLICY = breakers.Policy()
_COOLDOWNS = breakers.CooldownPolicy()


class BreakerSettings(_Section):
    """When a model or a vendor is skipped fleet-wide, and for how long.

    The defaults and the checks are `breakers.Policy`'s and `breakers.CooldownPolicy`'s.
    """

    window_s: float = _POLICY.window_s
    """The sliding window over which a breaker's failure rate is counted."""
    min_calls_in_window: int = _POLICY.min_calls_in_window
    """Below this many calls in the window, the rate never opens a breaker."""
    failure_rate_threshold: float = _POLICY.failure_rate_threshold
    """A breaker opens when this share of the window's calls failed."""
    consecutive_failures_threshold: int = _POLICY.consecutive_failures_threshold
    """...or when this many calls in a row failed."""
    break_s: float = _POLICY.break_s
    """How long an opened breaker stays open before one probe is let through."""
    max_break_s: float = _POLICY.max_break_s
    """The longest break, which grows (with jitter) while probes fail."""
    probe_ttl_s: float = _POLICY.probe_ttl_s
    """How long a probe slot lives if its holder dies."""
    default_cooldown_s: float = _COOLDOWNS.default_cooldown_s
    """How long an (account, model) pair cools down after a 429 without a wait hint."""
    exhausted_ttl_s: float = _COOLDOWNS.exhausted_ttl_s
    """How long an exhausted account is skipped when the provider does not say when its
    quota resets."""
    model_gone_s: float = _COOLDOWNS.gone_s
    """How long a model the provider answers 404 for (retired, deployment deleted) is
    skipped fleet-wide."""

    @model_validator(mode="after")
    def _valid_for_breakers(self) -> BreakerSettings:
        try:
            self.policy()
            self.cooldowns()
        except breakers.InvalidPolicyError as exc:
            # "Policy.break_s must be > 0" -> "break_s must be > 0", under [breakers].
            message = str(exc).replace("CooldownPolicy.", "").replace("Policy.", "")
            raise ValueError(message) from None
        return self

    def policy(self) -> breakers.Policy:
        """The breakers' policy these settings describe."""
        return breakers.Policy(
            window_s=self.window_s,
            min_calls_in_window=self.min_calls_in_window,
            failure_rate_threshold=self.failure_rate_threshold,
            consecutive_failures_threshold=self.consecutive_failures_threshold,
            break_s=self.break_s,
            max_break_s=self.max_break_s,
            probe_ttl_s=self.probe_ttl_s,
        )

    def cooldowns(self) -> breakers.CooldownPolicy:
        """The cooldown and exhausted-mark policy these settings describe."""
        return breakers.CooldownPolicy(
            default_cooldown_s=self.default_cooldown_s,
            exhausted_ttl_s=self.exhausted_ttl_s,
            gone_s=self.model_gone_s,
        )


class BudgetSettings(_Section):
    """Per-tenant spend limits, in dollars here and integer micro-dollars in Redis."""

    unknown_tenants: Literal["default", "reject"] = "default"
    """A tenant with no limits set: `default` gives it the default limits below, `reject`
    degrades its turns (reason `unknown_tenant`)."""
    default_daily_usd: Decimal = Field(default=Decimal(10), ge=0)
    """The daily limit of a tenant with none set (`relevo budgets set` sets one)."""
    default_monthly_usd: Decimal = Field(default=Decimal(200), ge=0)
    """The monthly limit of a tenant with none set."""
    default_fallback_cap_usd: Decimal | None = Field(default=None, ge=0)
    """The daily cap on fallback spend of a tenant with none set; unset, no cap."""
    default_overdraft_usd: Decimal = Field(default=Decimal(0), ge=0)
    """How far worst cases may run past a limit while reservations hold expected costs;
    spend never passes limit + overdraft (0: an attempt starts only when its worst case
    fits). Per tenant: `relevo budgets set --overdraft`."""
    reserve_percentile: float | None = Field(default=99.0, gt=0, le=100)
    """Reservations hold this percentile of the output tokens the model has answered with,
    fleet-wide; unset, every `max_tokens`."""
    evidence_samples: int = Field(default=1000, ge=1, le=100_000)
    """How many of the model's latest answers that percentile is taken over."""
    evidence_min_samples: int = Field(default=50, ge=1)
    """Until this many answers are known, reservations hold `max_tokens`."""
    evidence_refresh_s: float = Field(default=30.0, gt=0)
    """How often a process re-reads that evidence."""
    # The estimate bounds the public tokenizers (docs/budgets.md); the margin covers those
    # that are not public, so that a worst case stays one.
    input_margin_pct: int = Field(default=20, ge=0, le=400)
    """Reservations pad the input estimate by this many percent."""
    held_wait_s: float = Field(default=30.0, ge=0, le=3600)
    """How long a turn refused because attempts in flight hold the budget waits (within its
    deadline) for them to settle before it degrades with `tenant_budget_held`."""
    hold_ttl_s: float = Field(default=600.0, gt=0, le=86400)
    """A dead worker's reservation is reclaimed after this long, and charged at what it
    reserved (its call may have been billed)."""
    offline_allowance_usd: Decimal = Field(default=Decimal(1), ge=0)
    """While Redis is away, what one worker process lets a tenant start calls worth (each
    counted at its worst case while it runs) before its turns degrade
    (`budget_store_unreachable`); settled when Redis answers."""

    def offline_allowance_micros(self) -> int:
        return _to_micros(self.offline_allowance_usd)

    def default_limits(self) -> budgets.Limits | None:
        """The limits of a tenant nobody configured; None refuses such tenants."""
        if self.unknown_tenants == "reject":
            return None
        cap = self.default_fallback_cap_usd
        return budgets.Limits(
            _to_micros(self.default_daily_usd),
            _to_micros(self.default_monthly_usd),
            None if cap is None else _to_micros(cap),
            _to_micros(self.default_overdraft_usd),
        )


class WorkerSettings(_Section):
    """The Celery fleet: how a node runs turns and how no turn is lost."""

    queue: Name = "relevo"
    """The Celery queue turns are sent to and workers take them from."""
    processes: int = Field(default=2, ge=1, le=64)
    """Worker processes `relevo worker` starts on a node (one per core)."""
    threads: int = Field(default=500, ge=1, le=5000)
    """Turns each process runs at once (Celery's threads pool, one event loop)."""
    # Longer than a turn can run, so a live turn is never handed out twice.
    visibility_timeout_s: float | None = Field(default=None, gt=0)
    """A turn a dead worker held goes back to the Redis broker's queue after this long
    (RabbitMQ gives it back at once); unset, twice the turn deadline plus a minute. Also
    how old a turn record is before the sweeper re-sends it."""
    restore_interval_s: float = Field(default=10.0, gt=0)
    """How often a worker looks for such turns."""
    sweep_interval_s: float = Field(default=30.0, gt=0)
    """How often a worker re-sends turns the broker lost: sent, but neither claimed nor
    answered after the visibility timeout plus `restore_interval_s` (docs/deploy.md)."""
    result_ttl_s: int = Field(default=86_400, ge=60)
    """How long a turn's result is kept (`relevo result`)."""


class FairnessSettings(_Section):
    """Weighted fair dispatch across tenants, and the share of a tenant nobody configured
    (`relevo tenants set` gives one its own; docs/fairness.md)."""

    enabled: bool = True
    """Weighted fair dispatch; off, producers publish straight to the broker's queue, first
    in first out."""
    queue_depth: int = Field(default=8, ge=1, le=10_000)
    """Turns the broker's queue may hold that no worker has taken yet: enough that a worker
    that frees a thread finds one, few enough that a tenant arriving waits behind few."""
    interval_s: float = Field(default=1.0, ge=0.01, le=60)
    """Rounds run when a turn arrives for an idle tenant or a lease is given back; an idle
    dispatcher looks anyway this often (a safety net: a dead worker's leases run out on
    it)."""
    batch: int = Field(default=32, ge=1, le=1000)
    """The most turns one round moves (one Lua step holds Redis that long)."""
    gather_s: float = Field(default=0.2, ge=0, le=1.0)
    """Leases a worker process gives back wait for its next round, which starts this long
    after the first at most (sooner once half `queue_depth` have come, or at once while a
    tenant is parked): under load, one round moves several turns (less Redis CPU per
    turn); 0: a round per lease given back."""
    default_max_in_flight: int | None = Field(default=None, ge=1)
    """Turns of a tenant with no share of its own running at once, fleet-wide (unset: no
    limit)."""
    default_turns_per_minute: int | None = Field(default=None, ge=1)
    """Turns such a tenant may start a minute (a token bucket; unset: no limit)."""
    default_input_tokens_per_minute: int | None = Field(default=None, ge=1)
    """Input tokens (estimated) such a tenant may send a minute (unset: no limit)."""
    default_weight: int = Field(default=1, ge=1, le=budgets.MAX_WEIGHT)
    """Such a tenant's share of a saturated fleet, against the others' weights."""

    def default_share(self) -> budgets.Share:
        """The share of a tenant that has none of its own."""
        return budgets.Share(
            self.default_max_in_flight,
            self.default_turns_per_minute,
            self.default_input_tokens_per_minute,
            self.default_weight,
        )


class LimitsSettings(_Section):
    """How big one turn may be: checked at enqueue and again on the worker."""

    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """The largest turn request, as UTF-8 JSON."""
    max_messages: int = Field(default=500, ge=1, le=100_000)
    """The most messages in a turn."""
    max_tools: int = Field(default=128, ge=0, le=10_000)
    """The most tools in a turn."""
    max_message_chars: int = Field(default=256 * 1024, ge=1)
    """The longest message text (its text parts together)."""
    max_attachments: int = Field(default=20, ge=0, le=1000)
    """The most images and documents in a turn."""
    max_attachment_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """The largest image or document, once decoded."""


class ObservabilitySettings(_Section):
    """Logs, the metrics endpoint, the fleet fallback-rate alert and traces."""

    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """The port of `relevo worker`'s Prometheus endpoint (0: off)."""
    # Every interface: Prometheus scrapes the node from elsewhere.
    metrics_addr: str = "0.0.0.0"  # noqa: S104
    """The address that endpoint listens on."""
    fallback_alert_threshold: float = Field(default=0.10, gt=0, lt=1)
    """The fallback-rate warning: above this share of turns with `step` >= 1..."""
    fallback_window_s: float = Field(default=300.0, gt=0, le=86_400)
    """...over this window..."""
    # 1 of 2 is not 50 %.
    fallback_min_turns: int = Field(default=20, ge=1)
    """...once at least this many turns are in it."""
    log_json: bool | None = None
    """JSON log lines; unset, JSON unless the output is a terminal."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """relevo's own lines at this level and above; Celery's, kombu's and redis-py's join the
    same stream, each with its `logger` name (warnings and above; everything at `debug`)."""
    tracing: bool = False
    """OpenTelemetry spans (`pip install 'relevo[otel]'`; docs/observability.md)."""
    # Unused when the process has set up its own tracer provider.
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://")
    """The collector's OTLP/HTTP URL (`/v1/traces` is added); unset, the
    `OTEL_EXPORTER_OTLP_*` variables, else `http://localhost:4318`."""


class ConsoleSettings(_Section):
    """`relevo console`: where it listens, who may log in, how each role reaches Redis."""

    host: str = "127.0.0.1"
    """Where the console listens: loopback; put a TLS-terminating proxy in front to serve
    it further."""
    port: int = Field(default=8800, ge=0, le=65535)
    """The console's port."""
    tokens_file: Path | None = None
    """A file of `NAME ROLE TOKEN` lines (a mounted secret); `RELEVO_CONSOLE_TOKENS`
    holds the same."""
    viewer_redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    """The viewer role's Redis user (deploy/redis/users.acl.in); unset, `[redis] url`."""
    operator_redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    """The operator role's Redis user; unset, `[redis] url`."""
    poll_interval_s: float = Field(default=2.0, ge=0.5, le=60)
    """How often the pages read the fleet again."""
    session_ttl_s: float = Field(default=8 * 3600, gt=0, le=7 * 86_400)
    """How long a login lasts."""
    sessions_per_token: int = Field(default=20, ge=1, le=1000)
    """Sessions one token may hold; its next login past this ends its own oldest one."""
    logins_per_minute: int = Field(default=20, ge=1, le=10_000)
    """Login attempts a minute from one client address, and logins of one token."""
    hosts: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9.:\[\]-]{1,253}$")], ...] = ()
    """The names browsers reach the console by (Host header), e.g. the TLS proxy's public
    name; empty: the loopback names and `host`."""
    trusted_proxies: tuple[IPvAnyNetwork, ...] = ()
    """Addresses or networks (CIDR) of the proxies whose X-Forwarded-Proto/-For/-Host are
    believed; anyone else's are ignored."""


class HttpSettings(_Section):
    """How the worker reaches providers: the egress proxy and the CAs it trusts."""

    trust_env: bool = True
    """Honour `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (any case, as curl reads them), and
    `SSL_CERT_FILE` / `SSL_CERT_DIR` when `ca_bundle` is not set, for calls to providers."""
    proxy_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """One egress proxy for every provider, over the environment's (`NO_PROXY` does not
    apply to it): `http://user:password@proxy:3128`, the password redacted like a key."""
    ca_bundle: Path | None = None
    """A PEM file of the CAs to trust instead of the system's (a TLS-inspecting proxy, a
    private endpoint)."""

    @field_validator("ca_bundle")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no file at {path}")
        return path


class Settings(BaseSettings):
    """Everything relevo is configured with."""

    model_config = SettingsConfigDict(
        env_prefix="RELEVO_",
        env_nested_delimiter="__",
        # An empty variable is an unset one, as everywhere relevo reads its environment
        # (worker/fleet/environment.py).
        env_ignore_empty=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    turn_deadline_s: float = Field(default=60.0, gt=0, le=3600)
    """The longest any turn may take; a request's `deadline_s` may be shorter."""
    chain: ChainSettings
    """The models a turn may use, in order."""
    providers: dict[Name, ProviderSettings] = Field(min_length=1)
    """The provider endpoints and accounts, by a name of your choice."""
    models: dict[ModelSlug, ModelSettings] = Field(min_length=2)
    """The models, by slug (`vendor/model`)."""
    retry: RetrySettings = RetrySettings()
    degradation: DegradationSettings = DegradationSettings()
    redis: RedisSettings = RedisSettings()
    broker: BrokerSettings = BrokerSettings()
    breakers: BreakerSettings = BreakerSettings()
    budgets: BudgetSettings = BudgetSettings()
    worker: WorkerSettings = WorkerSettings()
    limits: LimitsSettings = LimitsSettings()
    fairness: FairnessSettings = FairnessSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    console: ConsoleSettings = ConsoleSettings()
    http: HttpSettings = HttpSettings()

    @property
    def visibility_timeout_s(self) -> float:
        return self.worker.visibility_timeout_s or 2 * self.turn_deadline_s + 60

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's contents arrive as init arguments; the environment overrides them.
        return env_settings, init_settings

    def check(self) -> None:
        """Cross-references that a single field cannot see."""
        problems = []
        if len(set(self.chain.models)) != len(self.chain.models):
            problems.append("chain.models: a model appears twice")
        for index, slug in enumerate(self.chain.models):
            if slug not in self.models:
                problems.append(f"chain.models[{index}]: {slug!r} is not defined under [models]")
        for slug, model in self.models.items():
            for index, serving in enumerate(model.serve):
                if serving.provider not in self.providers:
                    problems.append(
                        f'models."{slug}".serve[{index}].provider: '
                        f"{serving.provider!r} is not defined under [providers]"
                    )
        problems.extend(self._degradation_problems())
        problems.extend(self._key_name_problems())
        if self.visibility_timeout_s <= self.turn_deadline_s:
            problems.append(
                "worker.visibility_timeout_s: must be longer than turn_deadline_s, or a live "
                "turn would be handed to a second worker"
            )
        if self.budgets.hold_ttl_s < self.turn_deadline_s:
            problems.append(
                "budgets.hold_ttl_s: must be at least turn_deadline_s, or a live turn's "
                "reservation could be reclaimed"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    def _degradation_problems(self) -> list[str]:
        """The cheaper model must be one the worker can call, and not the primary it
        stands in for (that reservation was just refused)."""
        slug = self.degradation.cheaper_model
        if slug is None:
            return []
        if slug not in self.models:
            return [f"degradation.cheaper_model: {slug!r} is not defined under [models]"]
        if slug == self.chain.models[0]:
            return [
                f"degradation.cheaper_model: {slug!r} is the chain's primary; name a cheaper model"
            ]
        return []

    def _key_name_problems(self) -> list[str]:
        """Names that become Redis keys, checked by the rules of `breakers` and `budgets`."""
        # The field patterns are looser (e.g. ".." or 200+ characters in a scope), and a name
        # those packages refuse would only fail later, on every turn.
        checks: list[tuple[str, str, Callable[[str], object]]] = [
            ("redis.namespace", self.redis.namespace, breakers.validate_name),
            ("redis.namespace", self.redis.namespace, check_namespace),
        ]
        checks += [(f"providers.{n}", n, budgets.check_provider) for n in self.providers]
        for slug, model in self.models.items():
            where = f'models."{slug}"'
            checks.append((f"{where}.vendor", f"vendor:{model.vendor}", breakers.validate_name))
            for index, serving in enumerate(model.serve):
                at = f"{where}.serve[{index}]"
                scope = f"model:{slug}@{serving.provider}"
                checks.append((at, scope, breakers.validate_name))
                checks.append((f"{at}.model_id", serving.model_id, breakers.validate_name))
        problems = []
        for where, name, check in checks:
            try:
                check(name)
            except (breakers.InvalidNameError, budgets.InvalidNameError) as exc:
                problems.append(f"{where}: {exc}")
        return problems

    def chain_providers(self) -> list[str]:
        """The providers the chain can call, in order of first use."""
        names: dict[str, None] = {}
        slugs = list(self.chain.models)
        cheaper = self.degradation.cheaper_model
        if self.degradation.action == "cheaper_model" and cheaper is not None:
            # Its providers' keys are checked at start-up too, not at the first degraded turn.
            slugs.append(cheaper)
        for slug in slugs:
            for serving in self.models[slug].serve:
                names[serving.provider] = None
        return list(names)

    def check_secrets(self) -> None:
        """Every provider the chain needs has its API key where the config says."""
        for name in self.chain_providers():
            provider = self.providers[name]
            if provider.api_key_env is None and provider.api_key_file is None:
                continue
            if provider.api_key() is None:
                source = (
                    f"file {provider.api_key_file}"
                    if provider.api_key_file is not None
                    else f"environment variable {provider.api_key_env}"
                )
                key = "api_key_file" if provider.api_key_file is not None else "api_key_env"
                raise ConfigError(f"providers.{name}.{key}: no API key in {source}")


def load_settings(
    path: Path | str | None = None,
    *,
    data: dict[str, Any] | None = None,
    require_secrets: bool = True,
) -> Settings:
    """Load and check the configuration from a TOML file (or a dict), then the environment."""
    raw: dict[str, Any] = dict(data or {})
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        settings = Settings(**raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    settings.check()
    if require_secrets:
        settings.check_secrets()
    return settings


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        parts = [f'"{p}"' if isinstance(p, str) and "/" in p else str(p) for p in error["loc"]]
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{'.'.join(parts) or '(root)'}: {message}")
    return "; ".join(lines)
