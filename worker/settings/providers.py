"""The providers (endpoints and accounts) and the models they serve, with their prices."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from worker.settings import environment
from worker.settings.base import Name, Section, to_micros


class ProviderSettings(Section):
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
    """No content by then: the next provider or model. Such a call is charged its worst
    case when not streamed or of a reasoning model (it may have been written unseen)."""
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
            return environment.value(self.api_key_env)
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


class Serving(Section):
    """A provider that serves a model, under that provider's own model id."""

    provider: Name
    """A provider under `[providers]`."""
    # Model ids become parts of Redis keys (cooldowns): the breakers' key alphabet.
    model_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
    """The model's id on that provider (an Azure deployment's name, a Bedrock inference
    profile, `claude-sonnet-4@20250514` on Vertex AI)."""


@dataclass(frozen=True, slots=True)
class Prices:
    """A model's prices for prompts of one size, in integer micro-dollars per million
    tokens."""

    input: int
    output: int
    cache_write: int
    cache_read: int

    @property
    def worst_input(self) -> int:
        """The most an input token may cost: any of them may be billed as a cache write."""
        return max(self.input, self.cache_write)


class PriceTier(Section):
    """The prices of prompts above a size (Gemini 2.5 Pro, Claude with a 1M-token window:
    prompts over 200k tokens). The cache prices default as the model's do, from this
    tier's input price."""

    above_input_tokens: int = Field(gt=0)
    """These prices apply to a call whose prompt (cached tokens included) has more tokens
    than this."""
    input_usd_per_mtok: Decimal = Field(ge=0)
    """The input price above that size, in dollars per million tokens."""
    output_usd_per_mtok: Decimal = Field(ge=0)
    """The output price of such a call."""
    cache_write_usd_per_mtok: Decimal | None = Field(ge=0, default=None)
    """The prompt-cache write price above that size; unset, as the model's."""
    cache_read_usd_per_mtok: Decimal | None = Field(ge=0, default=None)
    """The prompt-cache read price above that size; unset, this tier's input price."""


class ModelSettings(Section):
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
    price_tiers: tuple[PriceTier, ...] = ()
    """`[{above_input_tokens, input_usd_per_mtok, output_usd_per_mtok}, …]`: dearer prices
    for larger prompts, in increasing sizes; a call's prompt size picks one tier for all
    its tokens."""
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
    reasoning: bool | None = None
    """Whether it is a reasoning model: only those are sent a turn's `reasoning_effort`;
    unset, its model id says (o-series, GPT-5, Gemini 2.5 and 3 reason)."""

    @model_validator(mode="after")
    def _tiers_in_order(self) -> ModelSettings:
        sizes = [tier.above_input_tokens for tier in self.price_tiers]
        if any(b <= a for a, b in pairwise(sizes)):
            raise ValueError("price_tiers: above_input_tokens must increase from one to the next")
        return self

    def prices(self, prompt_tokens: int) -> Prices:
        """The prices of a call whose prompt has `prompt_tokens` (cached ones included):
        those of the largest tier it is above, else the model's own."""
        base = self._priced(
            self.input_usd_per_mtok,
            self.output_usd_per_mtok,
            self.cache_write_usd_per_mtok,
            self.cache_read_usd_per_mtok,
        )
        for tier in reversed(self.price_tiers):
            if prompt_tokens > tier.above_input_tokens:
                return self._priced(
                    tier.input_usd_per_mtok,
                    tier.output_usd_per_mtok,
                    tier.cache_write_usd_per_mtok,
                    tier.cache_read_usd_per_mtok,
                )
        return base

    def worst_prices(self, prompt_tokens: int) -> Prices:
        """The dearest prices a call whose prompt has at most `prompt_tokens` may be billed
        at: each price the most of the model's own and every tier up to that size's."""
        reached = (
            t.above_input_tokens for t in self.price_tiers if prompt_tokens > t.above_input_tokens
        )
        every = [self.prices(0), *(self.prices(size + 1) for size in reached)]
        return Prices(
            max(p.input for p in every),
            max(p.output for p in every),
            max(p.cache_write for p in every),
            max(p.cache_read for p in every),
        )

    def _priced(
        self, input_usd: Decimal, output_usd: Decimal, write: Decimal | None, read: Decimal | None
    ) -> Prices:
        if write is None:
            write = input_usd * CACHE_WRITE_FACTOR.get(self.vendor, Decimal(1))
        return Prices(
            to_micros(input_usd),
            to_micros(output_usd),
            to_micros(write),
            to_micros(input_usd if read is None else read),
        )

    @property
    def input_micros_per_mtok(self) -> int:
        return to_micros(self.input_usd_per_mtok)

    @property
    def output_micros_per_mtok(self) -> int:
        return to_micros(self.output_usd_per_mtok)

    @property
    def cache_write_micros_per_mtok(self) -> int:
        """The cache-write price, or the vendor's default over the input price."""
        price = self.cache_write_usd_per_mtok
        if price is None:
            price = self.input_usd_per_mtok * CACHE_WRITE_FACTOR.get(self.vendor, Decimal(1))
        return to_micros(price)

    @property
    def cache_read_micros_per_mtok(self) -> int:
        """The cache-read price, or the input price when none is set."""
        price = self.cache_read_usd_per_mtok
        return self.input_micros_per_mtok if price is None else to_micros(price)

    @property
    def worst_input_micros_per_mtok(self) -> int:
        """The most an input token may cost (a reservation's worst case): any input token
        may be billed as a cache write."""
        return max(self.input_micros_per_mtok, self.cache_write_micros_per_mtok)


# What a vendor bills a prompt-cache write over its input price, by default.
CACHE_WRITE_FACTOR: dict[str, Decimal] = {"anthropic": Decimal("1.25")}
