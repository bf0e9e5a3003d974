"""The shared state: Redis, the broker, the breakers and the budgets."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator
from redis.asyncio import Redis

import breakers
import budgets
from breakers.sentinel import SentinelAddress, is_sentinel
from worker.settings.base import Name, Section, to_micros

# A turn's metadata key (`worker.types`), as spend is attributed by it.
MetadataKeyName = Annotated[str, StringConstraints(pattern=budgets.attribution.LABEL_KEY_PATTERN)]


class RedisSettings(Section):
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


class BrokerSettings(Section):
    """Celery's broker, when it is not the Redis at `[redis] url` (docs/deploy.md)."""

    url: str | None = Field(default=None, pattern=r"^amqps?://")
    """RabbitMQ (`amqp://user:password@host:5672/vhost`, `amqps://` for TLS): the fleet's
    queue becomes a quorum queue, every publish waits for the broker's confirm. Unset: the
    Redis at `[redis] url`. Results, the turn store and the fair queue stay in Redis."""
    max_message_bytes: int = Field(default=128 * 1024 * 1024, ge=64 * 1024, le=512 * 1024 * 1024)
    """The largest message the broker takes (RabbitMQ's `max_message_size`, whose default
    this is): a bigger turn is refused at enqueue (`InputError` naming this limit), and a
    dispatcher sets aside a queued one instead of publishing it."""

    @property
    def rabbitmq(self) -> bool:
        """True when the broker is RabbitMQ."""
        return self.url is not None


_POLICY = breakers.Policy()
_COOLDOWNS = breakers.CooldownPolicy()


class BreakerSettings(Section):
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


class BudgetSettings(Section):
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
    counted at its worst case while it runs), at most its share of the room the tenant
    had when the process last heard from Redis (the room over the live processes), before
    its turns degrade (`budget_store_unreachable`); settled when Redis answers."""

    attribute_by: tuple[MetadataKeyName, ...] = Field(
        default=(), max_length=budgets.attribution.MAX_LABEL_KEYS
    )
    """The turn metadata keys spend is attributed by (`["agent", "user"]`), per tenant, UTC
    day and month (`relevo budgets report TENANT --by agent`); a turn without one counts
    as none of its values. At most 4 keys."""
    max_attributed_values: int = Field(default=100, ge=1, le=10_000)
    """How many distinct values of each key a tenant's day or month keeps; spend of the
    values past them is counted as `other`."""

    @field_validator("attribute_by")
    @classmethod
    def _distinct_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(keys)) != len(keys):
            raise ValueError("a key is named twice")
        return keys

    def offline_allowance_micros(self) -> int:
        return to_micros(self.offline_allowance_usd)

    def labels(self, metadata: Mapping[str, str]) -> str:
        """A charge's labels for spend attribution: `metadata`'s values of `attribute_by`."""
        return budgets.encode_labels(self.attribute_by, metadata, self.max_attributed_values)

    def default_limits(self) -> budgets.Limits | None:
        """The limits of a tenant nobody configured; None refuses such tenants."""
        if self.unknown_tenants == "reject":
            return None
        cap = self.default_fallback_cap_usd
        return budgets.Limits(
            to_micros(self.default_daily_usd),
            to_micros(self.default_monthly_usd),
            None if cap is None else to_micros(cap),
            to_micros(self.default_overdraft_usd),
        )
