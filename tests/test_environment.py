"""One reading of the environment: `RELEVO_CONFIG` for every command that takes `--config`,
`RELEVO_<SECTION>__<KEY>` read alike by the settings, the operator commands and the
broker (any case; empty is unset), and one `--log-level` spelling, the configuration's."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import get_args

import pytest

from worker.cli.fleet import child_env
from worker.cli.main import build_parser, main
from worker.cli.parsing import LOG_LEVELS
from worker.fleet import environment
from worker.fleet.broker import _redis_from_env
from worker.fleet.operator_config import redis_settings
from worker.settings import ObservabilitySettings, RedisSettings, load_settings

ROOT = Path(__file__).resolve().parent.parent
SIMULATED = ROOT / "examples" / "simulated.toml"
MISSING = "/nonexistent/relevo-test.toml"

# Every command that takes --config, with the arguments it needs besides (demo, which
# runs its own chain unless told otherwise, is checked by parsing only).
COMMANDS = {
    ("turn",): ["turn"],
    ("worker",): ["worker"],
    ("exporter",): ["exporter"],
    ("enqueue",): ["enqueue"],
    ("replay-held",): ["replay-held"],
    ("console",): ["console"],
    ("breakers",): ["breakers"],
    ("kill-switch", "status"): ["kill-switch", "status"],
    ("budgets", "list"): ["budgets", "list"],
    ("tenants", "list"): ["tenants", "list"],
    ("handoffs",): ["handoffs"],
    ("result",): ["result", "t1"],
    ("tail",): ["tail", "t1"],
    ("config", "check"): ["config", "check"],
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("RELEVO_"):
            monkeypatch.delenv(name)


def test_an_empty_variable_is_an_unset_one_and_case_does_not_matter() -> None:
    env = {"RELEVO_CONFIG": "", "relevo_redis__url": "redis://h:1/0", "RELEVO_X__Y": ""}
    assert environment.config_path(environ=env) is None
    assert environment.config_path("given.toml", environ=env) == "given.toml"
    assert environment.value("RELEVO_REDIS__URL", env) == "redis://h:1/0"
    assert environment.section_overrides("x", ["y", "z"], env) == {}
    assert environment.section_overrides("redis", ["url"], env) == {"url": "redis://h:1/0"}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("RELEVO_REDIS__URL", "", RedisSettings().url),
        ("RELEVO_REDIS__URL", "redis://elsewhere:7000/3", "redis://elsewhere:7000/3"),
        ("relevo_redis__url", "redis://lower:7000/3", "redis://lower:7000/3"),
    ],
)
def test_every_reader_of_the_store_url_agrees(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    """The workers' settings, the operator commands and the broker's app see the same URL."""
    monkeypatch.setenv(name, value)
    settings = load_settings(SIMULATED, require_secrets=False)
    assert settings.redis.url == expected
    assert redis_settings(None).url == expected
    assert _redis_from_env().url == expected


def test_an_empty_namespace_variable_keeps_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", "")
    monkeypatch.setenv("RELEVO_REDIS__SENTINEL_MASTER", "")
    assert load_settings(SIMULATED, require_secrets=False).redis.namespace == "relevo"
    assert redis_settings(None).namespace == "relevo"
    assert _redis_from_env() == RedisSettings()


def _takes_config(parser: argparse.ArgumentParser) -> bool:
    """Whether the parser, or any below it, has a --config option."""
    for action in parser._actions:
        if "--config" in action.option_strings:
            return True
        if isinstance(action, argparse._SubParsersAction) and any(
            _takes_config(sub) for sub in action.choices.values()
        ):
            return True
    return False


def test_the_table_names_every_command_that_takes_config() -> None:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    taking = {name for name, sub in commands.choices.items() if _takes_config(sub)}
    assert taking == {path[0] for path in COMMANDS} | {"demo"}


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=" ".join)
def test_relevo_config_is_read_by_every_command(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --config, each command reads the file RELEVO_CONFIG names (a missing one
    is an error naming it, exit 2: proof it was read, and no Redis is needed)."""
    monkeypatch.setenv("RELEVO_CONFIG", MISSING)
    capsys.readouterr()
    assert main(argv) == 2
    assert f"cannot read configuration file {MISSING}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["turn"], ["worker"], ["enqueue"], ["replay-held"]])
def test_a_command_that_needs_a_configuration_says_how_to_give_one(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RELEVO_CONFIG", "")  # empty: as if unset
    capsys.readouterr()
    assert main(argv) == 2
    assert "--config FILE is needed (or RELEVO_CONFIG)" in capsys.readouterr().err


def test_the_demo_takes_relevo_config_too(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["demo"])
    assert args.config is None  # resolved by main: --config, RELEVO_CONFIG, its own chain
    monkeypatch.setenv("RELEVO_CONFIG", str(SIMULATED))
    assert environment.config_path(args.config) == str(SIMULATED)


def test_one_log_level_spelling_accepting_what_the_configuration_accepts() -> None:
    accepted = get_args(ObservabilitySettings.model_fields["log_level"].annotation)
    assert accepted == LOG_LEVELS
    assert "error" in LOG_LEVELS
    for argv in (["--log-level", "error", "handoffs"], ["worker", "--log-level", "error"]):
        assert build_parser().parse_args(argv).log_level == "error"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "--config", "F", "--loglevel", "WARNING"])


def test_the_worker_log_level_reaches_its_processes_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`relevo worker --log-level error`: each worker process loads its settings from the
    environment it is given, and finds `error` over the file's level."""
    assert "RELEVO_OBSERVABILITY__LOG_LEVEL" not in child_env(SIMULATED, None, {})
    env = child_env(SIMULATED, "error", {})
    assert env["RELEVO_CONFIG"] == str(SIMULATED)
    for name, value in env.items():
        if name.startswith("RELEVO_"):
            monkeypatch.setenv(name, value)
    settings = load_settings(environment.config_path(), require_secrets=False)
    assert settings.observability.log_level == "error"
