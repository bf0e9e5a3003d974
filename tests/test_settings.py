"""Configuration: the example loads, environment overrides it, bad keys are named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from breakers.sentinel import SentinelAddress
from worker.errors import ConfigError
from worker.settings import ProviderSettings, load_settings

EXAMPLE = Path(__file__).parent.parent / "examples" / "chain.toml"
KEYS = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")

BASE: dict[str, Any] = {
    "chain": {"models": ["a/one", "b/two"]},
    "providers": {
        "pa": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "PA_KEY"},
        "pb": {"kind": "anthropic", "base_url": "http://127.0.0.1:1"},
    },
    "models": {
        "a/one": {
            "vendor": "a",
            "context_window": 1000,
            "serve": [{"provider": "pa", "model_id": "one"}],
            "input_usd_per_mtok": "1.25",
        },
        "b/two": {
            "vendor": "b",
            "context_window": 1000,
            "serve": [{"provider": "pb", "model_id": "two"}],
        },
    },
}


def config(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = data
        for part in path:
            node = node[part]
        node[last] = value
    return data


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*KEYS, "PA_KEY"):
        monkeypatch.setenv(name, "sk-test")


def test_example_configuration_loads() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.chain.models[0] == "openai/gpt-5"
    assert settings.models["openai/gpt-5"].input_micros_per_mtok == 1_250_000
    assert settings.chain_providers() == [
        "openai",
        "azure_east",
        "anthropic",
        "bedrock",
        "vertex",
        "google",
    ]


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_TURN_DEADLINE_S", "7.5")
    monkeypatch.setenv("RELEVO_PROVIDERS__OPENAI__BASE_URL", "http://127.0.0.1:9/v1")
    settings = load_settings(EXAMPLE)
    assert settings.turn_deadline_s == 7.5
    assert settings.providers["openai"].base_url == "http://127.0.0.1:9/v1"
    assert settings.providers["openai"].kind == "openai"


def test_prices_become_integer_micros_rounded_up() -> None:
    data = config()
    data["models"]["a/one"]["input_usd_per_mtok"] = "0.0000005"
    settings = load_settings(data=data)
    assert settings.models["a/one"].input_micros_per_mtok == 1
    assert isinstance(settings.models["a/one"].input_micros_per_mtok, int)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (config(chain__models=["a/one"]), "chain.models"),
        (config(chain__models=["a/one", "b/two", "a/one", "b/two"]), "chain.models"),
        (config(chain__models=["a/one", "a/one"]), "chain.models"),
        (config(chain__models=["a/one", "c/three"]), "chain.models[1]"),
        (config(providers__pa__kind="cohere"), "providers.pa.kind"),
        (config(providers__pa__base_url="ftp://x"), "providers.pa.base_url"),
        (config(chain__models=["a/one", "b/two"], turn_deadline_s=0), "turn_deadline_s"),
    ],
)
def test_bad_configuration_names_the_key(data: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        load_settings(data=data)


def test_model_served_by_no_provider_is_refused() -> None:
    data = config()
    data["models"]["b/two"]["serve"] = []
    with pytest.raises(ConfigError, match=r'models\."b/two"\.serve'):
        load_settings(data=data)


def test_model_served_by_an_unknown_provider_is_refused() -> None:
    data = config()
    data["models"]["b/two"]["serve"] = [{"provider": "nowhere", "model_id": "x"}]
    with pytest.raises(ConfigError, match=r'models\."b/two"\.serve\[0\]\.provider'):
        load_settings(data=data)


def test_negative_price_is_refused() -> None:
    data = config()
    data["models"]["b/two"]["output_usd_per_mtok"] = -1
    with pytest.raises(ConfigError, match=r'models\."b/two"\.output_usd_per_mtok'):
        load_settings(data=data)


def test_duplicate_model_in_the_file_is_refused(tmp_path: Path) -> None:
    text = EXAMPLE.read_text() + '\n[models."openai/gpt-5"]\nvendor = "openai"\n'
    path = tmp_path / "dup.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)


def test_missing_api_key_of_a_chain_provider_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PA_KEY")
    with pytest.raises(ConfigError, match=r"providers\.pa\.api_key_env.*PA_KEY"):
        load_settings(data=config())
    assert load_settings(data=config(), require_secrets=False).providers["pa"]


@pytest.mark.parametrize(
    "key", ["AIzaSyD3adb33fC4f3b4b3cafe0123456789abc", "f86d081884c7d659a2feaa0c55ad0159"]
)
def test_a_key_written_where_its_variables_name_goes_is_never_shown(key: str) -> None:
    """`api_key_env = "<the key itself>"`: the error says where to look, not the value."""
    changed = config()
    changed["providers"]["pa"] = {**changed["providers"]["pa"], "api_key_env": key}
    with pytest.raises(ConfigError, match=r"providers\.pa\.api_key_env") as refused:
        load_settings(data=changed)
    assert "the key itself" in str(refused.value)
    assert key not in str(refused.value)
    assert key[:12] not in repr(refused.value)


def test_api_key_from_a_mounted_file(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("sk-from-file\n")
    data = config()
    data["providers"]["pa"] = {
        "kind": "openai",
        "base_url": "http://127.0.0.1:1/v1",
        "api_key_file": str(secret),
    }
    assert load_settings(data=data).providers["pa"].api_key() == "sk-from-file"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_settings(tmp_path / "absent.toml")


SENTINELS = "sentinel://:pw@127.0.0.1:26379;sentinel://127.0.0.1:26380;sentinel://127.0.0.1:26381/2"


def test_a_sentinel_store_names_its_primary() -> None:
    settings = load_settings(data={**BASE, "redis": {"url": SENTINELS, "sentinel_master": "m"}})
    assert settings.redis.sentinel_master == "m"
    address = SentinelAddress.parse(SENTINELS)
    assert address.sentinels == (("127.0.0.1", 26379), ("127.0.0.1", 26380), ("127.0.0.1", 26381))
    assert (address.db, address.password) == (2, "pw")


@pytest.mark.parametrize(
    ("redis", "says"),
    [
        ({"url": SENTINELS}, "sentinel_master: needed"),
        ({"url": "redis://127.0.0.1:6379/0", "sentinel_master": "m"}, "only with a sentinel"),
        (
            {"url": "sentinel://127.0.0.1:26379;redis://x:1", "sentinel_master": "m"},
            "sentinel://host",
        ),
        ({"url": "sentinel://127.0.0.1:26379/zero", "sentinel_master": "m"}, "must be a number"),
    ],
)
def test_a_bad_sentinel_setting_says_what_is_wrong(redis: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        load_settings(data={**BASE, "redis": redis})
    assert "pw" not in str(raised.value)


@pytest.mark.parametrize(
    ("provider", "name"),
    [
        ({"kind": "openai"}, "openai"),
        ({"kind": "openai", "azure_api_version": "2024-10-21"}, "azure.ai.openai"),
        ({"kind": "anthropic"}, "anthropic"),
        ({"kind": "gemini"}, "gcp.gemini"),
    ],
)
def test_each_api_has_its_opentelemetry_provider_name(provider: dict[str, str], name: str) -> None:
    settings = ProviderSettings.model_validate({"base_url": "https://api.example.com", **provider})
    assert settings.gen_ai_provider == name
