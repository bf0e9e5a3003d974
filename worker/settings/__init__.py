"""One typed settings object, read from a TOML file with environment overrides.

Environment variables override the file: `RELEVO_TURN_DEADLINE_S=30`,
`RELEVO_PROVIDERS__OPENAI__BASE_URL=http://127.0.0.1:8000/v1` (nested keys
are joined with a double underscore). A bad configuration fails here, when it
is loaded, with a `ConfigError` naming the key.
"""

from __future__ import annotations

from worker.settings.chain import (
    DEFAULT_CHAIN,
    ChainSettings,
    DegradationSettings,
    HedgingSettings,
    Lineup,
    NamedChainSettings,
    RetrySettings,
)
from worker.settings.fleet import FairnessSettings, LimitsSettings, WorkerSettings
from worker.settings.loading import Settings, load_settings
from worker.settings.operations import ConsoleSettings, HttpSettings, ObservabilitySettings
from worker.settings.providers import ModelSettings, ProviderSettings, Serving
from worker.settings.stores import BreakerSettings, BrokerSettings, BudgetSettings, RedisSettings

__all__ = [
    "DEFAULT_CHAIN",
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
    "Lineup",
    "ModelSettings",
    "NamedChainSettings",
    "ObservabilitySettings",
    "ProviderSettings",
    "RedisSettings",
    "RetrySettings",
    "Serving",
    "Settings",
    "WorkerSettings",
    "load_settings",
]
