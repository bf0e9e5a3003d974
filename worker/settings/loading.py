"""The settings object and how it is loaded: a TOML file, then the environment, then the
cross-references no single field can see."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

import breakers
import budgets
from budgets.keys import check_namespace
from worker.errors import ConfigError
from worker.settings import environment
from worker.settings.base import ModelSlug, Name
from worker.settings.chain import (
    DEFAULT_CHAIN,
    ChainSettings,
    DegradationSettings,
    Lineup,
    NamedChainSettings,
    RetrySettings,
)
from worker.settings.fleet import FairnessSettings, LimitsSettings, WorkerSettings
from worker.settings.operations import ConsoleSettings, HttpSettings, ObservabilitySettings
from worker.settings.providers import ModelSettings, ProviderSettings
from worker.settings.stores import BreakerSettings, BrokerSettings, BudgetSettings, RedisSettings
from worker.settings.variables import PREFIX, json_problems, nearest_key


class Settings(BaseSettings):
    """Everything relevo is configured with."""

    model_config = SettingsConfigDict(
        env_prefix="RELEVO_",
        env_nested_delimiter="__",
        # An empty variable is an unset one, as everywhere relevo reads its environment
        # (worker/settings/environment.py).
        env_ignore_empty=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    turn_deadline_s: float = Field(default=60.0, gt=0, le=3600)
    """The longest any turn may take; a request's `deadline_s` may be shorter."""
    chain: ChainSettings
    """The models a turn may use, in order: the chain named `default`."""
    chains: dict[Name, NamedChainSettings] = Field(default_factory=dict, max_length=100)
    """More chains, by name, that a turn may choose (`"chain": NAME`; docs/routing.md)."""
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
    def chain_names(self) -> tuple[str, ...]:
        """The chains a turn may name: `default` first."""
        return (DEFAULT_CHAIN, *sorted(self.chains))

    def chain_named(self, name: str | None) -> Lineup | None:
        """The chain `name` (None: `default`); None for one not configured."""
        if name is None or name == DEFAULT_CHAIN:
            return self.chain
        return self.chains.get(name)

    def hedged(self, chain: Lineup) -> bool:
        """Whether `chain`'s turns run hedged attempts."""
        own = chain.hedging if isinstance(chain, NamedChainSettings) else None
        return self.chain.hedging.enabled if own is None else own

    def degradation_for(self, chain: Lineup) -> DegradationSettings:
        """`[degradation]`, with `chain`'s own cheaper model when it names one."""
        if chain.cheaper_model is None:
            return self.degradation
        return self.degradation.model_copy(update={"cheaper_model": chain.cheaper_model})

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
        problems = self._chain_problems("chain", self.chain)
        if DEFAULT_CHAIN in self.chains:
            problems.append(f"chains.{DEFAULT_CHAIN}: the chain named default is [chain]")
        for name, chain in self.chains.items():
            if name != name.lower():
                # RELEVO_CHAINS__NAME__... cannot tell cases apart: it would name another.
                problems.append(f"chains.{name}: a chain's name is written in lowercase")
            problems.extend(self._chain_problems(f"chains.{name}", chain))
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

    def _chain_problems(self, where: str, chain: Lineup) -> list[str]:
        problems = []
        if len(set(chain.models)) != len(chain.models):
            problems.append(f"{where}.models: a model appears twice")
        for index, slug in enumerate(chain.models):
            if slug not in self.models:
                problems.append(f"{where}.models[{index}]: {slug!r} is not defined under [models]")
        return problems

    def _degradation_problems(self) -> list[str]:
        """Each chain's cheaper model (its own, else `[degradation]`'s) must be one the
        worker can call, and not the primary it stands in for (that reservation was just
        refused)."""
        problems: dict[str, None] = {}
        every: list[tuple[str, str, Lineup]] = [("the chain", "chain", self.chain)]
        every += [(f"chain {n!r}", f"chains.{n}", c) for n, c in self.chains.items()]
        for label, where, chain in every:
            slug = chain.cheaper_model or self.degradation.cheaper_model
            if slug is None:
                continue
            at = f"{where}.cheaper_model" if chain.cheaper_model else "degradation.cheaper_model"
            if slug not in self.models:
                problems[f"{at}: {slug!r} is not defined under [models]"] = None
            elif slug == chain.models[0]:
                problems[f"{at}: {slug!r} is {label}'s primary; name a cheaper model"] = None
        return list(problems)

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
        """The providers the chains can call, in order of first use."""
        names: dict[str, None] = {}
        chains = (self.chain, *self.chains.values())
        slugs = [slug for chain in chains for slug in chain.models]
        if self.degradation.action == "cheaper_model":
            # Their providers' keys are checked at start-up too, not at the first degraded turn.
            cheaper = (self.degradation_for(chain).cheaper_model for chain in chains)
            slugs.extend(slug for slug in cheaper if slug is not None)
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
                    else _variable(provider.api_key_env)
                )
                key = "api_key_file" if provider.api_key_file is not None else "api_key_env"
                raise ConfigError(f"providers.{name}.{key}: no API key in {source}")


# How environment variables are named (OPENAI_API_KEY): any other name is shown as
# hidden, since a key pasted in its place (AIzaSy..., a hex key) passes the field's pattern.
_VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
_MAX_SHOWN_NAME = 40


def _variable(name: str | None) -> str:
    """The variable `api_key_env` names, as an error may show it: never a value."""
    if name is not None and len(name) <= _MAX_SHOWN_NAME and _VARIABLE_NAME.fullmatch(name):
        return f"environment variable {name}"
    return (
        "the environment variable it names (the name is not shown: it is not written as"
        " a variable's name is, in capitals; is it the key itself?)"
    )


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
        raise ConfigError(_describe(exc, environment.variables())) from None
    except SettingsError as exc:
        # A list or a table in a variable that is not JSON: pydantic-settings names only
        # the top-level field, and its own message is a traceback's.
        problems = json_problems(str(exc), environment.variables(), Settings)
        raise ConfigError("; ".join(problems) or f"environment: {exc}") from None
    settings.check()
    if require_secrets:
        settings.check_secrets()
    return settings


def _describe(exc: ValidationError, environ: Mapping[str, str]) -> str:
    """One line: each problem's key, the variable that set it if one did, and a
    "did you mean" for a key that does not exist."""
    given = {name.upper() for name, text in environ.items() if text}
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        loc = error["loc"]
        parts = [f'"{p}"' if isinstance(p, str) and "/" in p else str(p) for p in loc]
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            nearest = nearest_key(Settings, loc)
            message += f" (did you mean {nearest!r}?)" if nearest else ""
        where = ".".join(parts) or "(root)"
        # The variable that set this key, or a table above it, if one did.
        names = [PREFIX + "__".join(map(str, loc[:n])).upper() for n in range(len(loc), 0, -1)]
        setter = next((name for name in names if name in given), None)
        if setter is not None:
            where = f"{setter} ({where})"
        lines.append(f"{where}: {message}")
    return "; ".join(lines)
