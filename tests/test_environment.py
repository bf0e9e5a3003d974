"""One reading of the environment: `RELEVO_CONFIG` for every command that takes `--config`,
`RELEVO_<SECTION>__<KEY>` read alike by the settings and the operator commands (any case;
empty is unset), every other variable through the same reader, and one `--log-level`
spelling, the configuration's."""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from worker.cli.fleet import child_env
from worker.cli.main import build_parser, main
from worker.cli.parsing import LOG_LEVELS
from worker.fleet.operator_config import redis_settings
from worker.settings import ObservabilitySettings, RedisSettings, environment, load_settings

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
    both = {"openai_api_key": "lower", "OPENAI_API_KEY": "as asked"}
    assert environment.value("OPENAI_API_KEY", both) == "as asked"


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
    """The workers' settings (and the broker's app, built from them) and the operator
    commands see the same URL."""
    monkeypatch.setenv(name, value)
    settings = load_settings(SIMULATED, require_secrets=False)
    assert settings.redis.url == expected
    assert redis_settings(None).url == expected


def test_an_empty_namespace_variable_keeps_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELEVO_REDIS__NAMESPACE", "")
    monkeypatch.setenv("RELEVO_REDIS__SENTINEL_MASTER", "")
    assert load_settings(SIMULATED, require_secrets=False).redis.namespace == "relevo"
    assert redis_settings(None) == RedisSettings()


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


# What reads a variable: `os.environ`, `os.getenv` and their kin, however imported.
_READERS = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
ONE_READER = ROOT / "worker" / "settings" / "environment.py"


def environment_reads(source: str) -> list[int]:
    """The lines of `source` that touch the process's environment other than through
    `worker.settings.environment`."""
    tree = ast.parse(source)
    aliases = {"os"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "posix"):
            lines += [node.lineno for a in node.names if a.name in _READERS]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _READERS
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_one_reader_reads_the_environment() -> None:
    """A module of worker, breakers or budgets that reads a variable itself would read it
    by a rule of its own (case, empty values): it goes through the one reader."""
    found = {
        str(path.relative_to(ROOT)): reads
        for package in ("worker", "breakers", "budgets")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ONE_READER and (reads := environment_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_finds_every_way_of_reading() -> None:
    source = "\n".join(
        [
            "import os",
            "import os as system",
            "from os import getenv",
            "a = os.environ['X']",
            "b = os.getenv('X')",
            "c = system.environ.get('X')",
            "d = dict(os.environ)",
            "e = os.path.join('a', 'b')",
        ]
    )
    assert environment_reads(source) == [3, 4, 5, 6, 7]
    assert environment_reads(ONE_READER.read_text(encoding="utf-8")) != []


def test_variables_read_outside_the_settings_follow_its_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parent's pid, a provider's key, the console's token: any case, empty is unset."""
    from worker.console.auth import TOKENS_ENV, load_tokens
    from worker.settings import ProviderSettings

    monkeypatch.setenv("relevo_parent_pid", "7")
    assert environment.value("RELEVO_PARENT_PID") == "7"
    monkeypatch.setenv("RELEVO_TEST_PROVIDER_KEY", "")
    provider = ProviderSettings(
        kind="openai", base_url="http://127.0.0.1:9/v1", api_key_env="RELEVO_TEST_PROVIDER_KEY"
    )
    assert provider.api_key() is None
    monkeypatch.setenv("relevo_test_provider_key", "sk-lower")
    monkeypatch.delenv("RELEVO_TEST_PROVIDER_KEY")
    assert provider.api_key() == "sk-lower"
    token = "Zq8vN3xR7tLm2WcY5pKd9sHf4Jb6"
    monkeypatch.setenv(TOKENS_ENV.lower(), f"ana operator {token}")
    assert [p.name for p, _ in load_tokens(None).entries] == ["ana"]


def test_the_fleet_app_needs_the_configuration(tmp_path: Path) -> None:
    """`celery -A worker.fleet.app` builds its app from the whole configuration: without
    RELEVO_CONFIG it says so, and reads no `[redis]` variable on its own."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RELEVO_")}
    env["RELEVO_REDIS__URL"] = "redis://127.0.0.1:9/0"
    made = subprocess.run(
        [sys.executable, "-c", "from worker.fleet.app import app"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert made.returncode != 0
    assert "RELEVO_CONFIG must name the chain configuration" in made.stderr
