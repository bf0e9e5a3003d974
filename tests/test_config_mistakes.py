"""Configuration mistakes a new user makes, each met by one line that names the variable or
the key and says what it expects, the exit status configuration errors share (2), and never
a traceback; `relevo config check` shows what a configuration comes to."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog

from tests.chainkit import KEY, worker_config
from worker.cli.config_command import stray_variables
from worker.cli.main import main
from worker.settings import Settings
from worker.settings.variables import nearest_variable, setting_of, unknown

ROOT = Path(__file__).parent.parent
SIMULATED = str(ROOT / "examples" / "simulated.toml")
TURN = str(ROOT / "examples" / "turn.json")
SECRET = "hunter2-not-for-output"


@dataclass(frozen=True)
class Mistake:
    """`relevo ARGS` under `env` (`{dir}`: the test's directory), what it exits with and
    what its output says; `tty`: a terminal on stdin; `fresh`: in a new interpreter, for
    what happens as the command is imported."""

    name: str
    args: tuple[str, ...]
    code: int
    says: str
    env: dict[str, str] = field(default_factory=dict)
    tty: bool = False
    fresh: bool = False


MISTAKES = [
    Mistake(
        "a list variable not written as JSON",
        ("turn", "--config", SIMULATED, "--input", TURN),
        2,
        'relevo: RELEVO_CHAIN__MODELS: expects JSON (a list, e.g. ["vendor/model-a", ',
        {"RELEVO_CHAIN__MODELS": "a,b"},
    ),
    Mistake(
        "a table variable not written as JSON",
        ("config", "check", "--config", SIMULATED),
        2,
        "relevo: RELEVO_CONSOLE__HOSTS: expects JSON (a list",
        {"RELEVO_CONSOLE__HOSTS": "example.com"},
    ),
    Mistake(
        "a variable with one underscore where two are needed",
        ("config", "check", "--config", SIMULATED),
        0,
        "relevo: warning: RELEVO_REDIS_URL sets nothing (did you mean RELEVO_REDIS__URL?)",
        {"RELEVO_REDIS_URL": "redis://127.0.0.1:6390/0"},
    ),
    Mistake(
        "a variable like no setting at all",
        ("config", "check", "--config", SIMULATED),
        0,
        "relevo: warning: RELEVO_FLEET_SIZE sets nothing (a setting's variable is "
        "RELEVO_<KEY> or RELEVO_<SECTION>__<KEY>)",
        {"RELEVO_FLEET_SIZE": "3"},
    ),
    Mistake(
        "a variable missing its unit",
        ("config", "check", "--config", SIMULATED),
        0,
        "RELEVO_TURN_DEADLINE sets nothing (did you mean RELEVO_TURN_DEADLINE_S?)",
        {"RELEVO_TURN_DEADLINE": "30"},
    ),
    Mistake(
        "a key under a table that does not have it, from a variable",
        ("config", "check", "--config", SIMULATED),
        2,
        "relevo: RELEVO_CHAIN__MODEL (chain.model): Extra inputs are not permitted "
        "(did you mean 'models'?)",
        {"RELEVO_CHAIN__MODEL": "x"},
    ),
    Mistake(
        "a variable that is not a number",
        ("config", "check", "--config", SIMULATED),
        2,
        "relevo: RELEVO_TURN_DEADLINE_S (turn_deadline_s): Input should be a valid number",
        {"RELEVO_TURN_DEADLINE_S": "soon"},
    ),
    Mistake(
        "a misspelt key in the file",
        ("config", "check", "--config", "{dir}/typo.toml"),
        2,
        "typo.toml: chain.modles: Extra inputs are not permitted (did you mean 'models'?)",
    ),
    Mistake(
        "a misspelt key in the [redis] an operator command reads",
        ("breakers", "--config", "{dir}/redis.toml"),
        2,
        "redis.toml: redis.namspace: Extra inputs are not permitted (did you mean 'namespace'?)",
    ),
    Mistake(
        "--version with a RELEVO_CONFIG that does not exist",
        ("--version",),
        0,
        "relevo ",
        {"RELEVO_CONFIG": "{dir}/missing.toml"},
        fresh=True,
    ),
    Mistake(
        "--help with a RELEVO_CONFIG that is not TOML",
        ("--help",),
        0,
        "check a configuration and show what it comes to",
        {"RELEVO_CONFIG": "{dir}/not.toml"},
        fresh=True,
    ),
    Mistake(
        "a turn without --input, at a terminal",
        ("turn", "--config", SIMULATED),
        2,
        "relevo: turn: the turn request is JSON on stdin or in --input FILE",
        tty=True,
    ),
    Mistake(
        "config check without a configuration",
        ("config", "check"),
        2,
        "relevo: config: --config FILE is needed (or RELEVO_CONFIG)",
    ),
    Mistake(
        "config check where a provider's key is missing",
        ("config", "check", "--config", "{dir}/keyed.toml"),
        2,
        "providers.oa.api_key_env: no API key in environment variable RELEVO_TEST_KEY",
    ),
    Mistake(
        "config check --without-keys on a machine without them",
        ("config", "check", "--without-keys", "--config", "{dir}/keyed.toml"),
        0,
        "keyed.toml: valid",
    ),
    Mistake(
        "config check names what a variable set and hides the password in it",
        ("config", "check", "--config", "{dir}/keyed.toml"),
        0,
        'redis.url = "redis://relevo:[redacted]@127.0.0.1:6390/0"  # RELEVO_REDIS__URL',
        {"RELEVO_TEST_KEY": KEY, "RELEVO_REDIS__URL": f"redis://relevo:{SECRET}@127.0.0.1:6390/0"},
    ),
]


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("configs")
    text = Path(SIMULATED).read_text()
    (where / "typo.toml").write_text(text.replace("[chain]\n", "[chain]\nmodles = []\n", 1))
    (where / "redis.toml").write_text('[redis]\nnamspace = "acme"\n')
    (where / "not.toml").write_text("this is not = = TOML\n")
    (where / "keyed.toml").write_text(
        worker_config(sim="http://127.0.0.1:9", redis_url="redis://127.0.0.1:6390/0", namespace="x")
    )
    return where


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` binds structlog to this test's captured stderr; later tests must not log there."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_a_configuration_mistake_gets_one_line_naming_it_and_its_exit_status(
    configs: Path,
    mistake: Mistake,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in os.environ:
        if name.upper().startswith("RELEVO_"):
            monkeypatch.delenv(name)
    for name, value in mistake.env.items():
        monkeypatch.setenv(name, value.format(dir=configs))
    args = [a.format(dir=configs) for a in mistake.args]
    if mistake.fresh:
        code, out, err = _in_a_new_process(args)
    else:
        code, out, err = _in_process(args, mistake.tty, monkeypatch, capsys)
    output = out + err
    assert code == mistake.code, output
    assert mistake.says in output
    assert "Traceback" not in output
    assert SECRET not in output
    # Every word to the user on stderr is a line of its own, "relevo: ..."
    assert all(line.startswith("relevo: ") for line in err.splitlines()), err


def _in_process(
    args: list[str],
    tty: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    with contextlib.ExitStack() as stack:
        if tty:
            terminal, other_end = pty.openpty()
            stack.callback(os.close, terminal)
            monkeypatch.setattr(sys, "stdin", stack.enter_context(open(other_end)))
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse's --help and --version
            code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _in_a_new_process(args: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_which_variables_set_what_and_which_are_ignored() -> None:
    """As pydantic-settings reads them: any case, tables by name, a list's items never; a
    variable under a table is taken in (and fails if no key); an empty one is unset."""
    assert setting_of("relevo_redis__url", Settings) == ("redis", "url")
    assert setting_of("RELEVO_PROVIDERS__OA__BASE_URL", Settings) == ("providers", "oa", "base_url")
    assert setting_of("RELEVO_CHAIN__MODELS__0", Settings) is None
    assert setting_of("RELEVO_REDIS__URL__X", Settings) is None
    env = {
        "RELEVO_REDIS_URL": "x",
        "RELEVO_CHAIN__MODEL": "x",
        "RELEVO_TURN_DEADLINE_S__X": "1",
        "RELEVO_EMPTY": "",
        "relevo_config": "f.toml",
        "OTHER": "x",
    }
    assert unknown(env, Settings, ["RELEVO_CONFIG"]) == [
        "RELEVO_REDIS_URL",
        "RELEVO_TURN_DEADLINE_S__X",
    ]
    assert nearest_variable("RELEVO_CHAIN_MODELS", Settings) == "RELEVO_CHAIN__MODELS"
    assert nearest_variable("RELEVO_XYZZY", Settings) is None


def test_every_variable_relevo_reads_is_a_setting_or_known_not_to_be_one() -> None:
    """A variable the code reads that `stray_variables` does not know would be warned
    about as setting nothing on every command."""
    named = set()
    for module in (ROOT / "worker").rglob("*.py"):
        named |= set(re.findall(r"[\"'](RELEVO_[A-Z0-9_]*[A-Z0-9])[\"']", module.read_text()))
    assert named
    assert stray_variables(None, dict.fromkeys(named, "x")) == []
