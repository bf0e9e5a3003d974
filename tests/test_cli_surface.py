"""What a new user meets first: options where they stand, help, the version, `--config` with
only `[redis]`, `enqueue` and `tail` ending with a clear line and exit code, closed pipes."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import pytest
import redis as sync_redis
from redis.asyncio import Redis

import breakers
import budgets
from breakers import BreakerState
from tests.netkit import free_port
from worker.cli import common
from worker.cli.main import build_parser, main
from worker.fleet.errors import UnknownTurn
from worker.fleet.turnstore import TurnKeys, TurnStore
from worker.types import Status, TurnResult

ROOT = Path(__file__).parent.parent
TURN = ROOT / "examples" / "turn.json"
RELEVO = [sys.executable, "-m", "worker.cli", "--log-level", "warning"]
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what each test passes says where Redis is."""
    for name in ("URL", "NAMESPACE", "TIMEOUT_S", "SENTINEL_MASTER"):
        monkeypatch.delenv(f"RELEVO_REDIS__{name}", raising=False)


def relevo(*args: str) -> int:
    return main(["--log-level", "warning", *args])


def redis_only(path: Path, url: str, namespace: str) -> Path:
    """A configuration file with nothing but `[redis]`."""
    path.write_text(f'[redis]\nurl = "{url}"\nnamespace = "{namespace}"\n')
    return path


def chain_config(path: Path, url: str, namespace: str) -> Path:
    """examples/simulated.toml on `url`, under `namespace`, with a queue of its own."""
    text = (ROOT / "examples" / "simulated.toml").read_text()
    redis = f'[redis]\nurl = "{url}"\nnamespace = "{namespace}"\n'
    path.write_text(f'{text}\n{redis}\n[worker]\nqueue = "{namespace}"\nresult_ttl_s = 300\n')
    return path


def on_redis(url: str, work: Callable[[Redis], Awaitable[T]]) -> T:
    async def go() -> T:
        client = breakers.connect(url, timeout_s=2.0)
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# -- options stand wherever they are given ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["breakers", "--config", "F", "open", "vendor:x"], {"config": "F"}),
        (["breakers", "open", "--config", "F", "vendor:x"], {"config": "F"}),
        (["breakers", "--json", "close", "vendor:x"], {"json": True}),
        (["breakers", "--config", "F"], {"config": "F"}),
        (["budgets", "--config", "F", "list"], {"config": "F"}),
        (["budgets", "--json", "show", "acme"], {"json": True}),
        (
            ["budgets", "--config", "F", "set", "a", "--daily", "1", "--monthly", "2"],
            {"config": "F"},
        ),
        (["kill-switch", "--config", "F", "status", "--json"], {"config": "F", "json": True}),
        (["kill-switch", "--config", "F", "on", "--reason", "r"], {"config": "F"}),
        (["handoffs", "--config", "F"], {"config": "F"}),
        (["result", "--config", "F", "t1"], {"config": "F"}),
        (["tail", "t1", "--config", "F"], {"config": "F"}),
        (["breakers", "open", "vendor:x", "--log-level", "debug"], {"log_level": "debug"}),
        (["--log-level", "warning", "budgets", "list"], {"log_level": "warning"}),
        (["breakers", "open", "vendor:x"], {"config": None, "json": False, "log_level": None}),
    ],
)
def test_a_shared_option_is_honoured_wherever_it_stands(
    argv: list[str], expected: dict[str, object]
) -> None:
    args = build_parser().parse_args(argv)
    assert {name: getattr(args, name) for name in expected} == expected


def parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under `parser` (itself included), with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


def test_no_subcommand_default_can_overwrite_an_option_given_before_it() -> None:
    """argparse copies a subparser's defaults over its parent's values: below the top,
    every shared option must leave the default to the top parser."""
    shared = {"--config", "--json", "--log-level"}
    for path, parser in parsers(build_parser()):
        if not path:
            continue
        for action in parser._actions:
            if shared.intersection(action.option_strings):
                assert action.default is argparse.SUPPRESS, (path, action)


def test_breakers_config_before_the_action_acts_on_that_configuration(
    private_redis: tuple[str, object],
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _ = private_redis
    # Had --config been lost, the command would still have reached only this private server.
    monkeypatch.setenv("RELEVO_REDIS__URL", url)
    config = chain_config(tmp_path / "chain.toml", url, namespace)
    assert relevo("breakers", "--config", str(config), "open", "vendor:anthropic") == 0

    async def state(client: Redis) -> BreakerState:
        store = breakers.FleetBreakers(client, namespace=namespace)
        return (await store.check(["vendor:anthropic"])).scopes["vendor:anthropic"].state

    assert on_redis(url, state) is BreakerState.OPEN
    assert relevo("kill-switch", "--config", str(config), "on", "--reason", "drill") == 0
    switch = on_redis(url, lambda c: breakers.KillSwitch(c, namespace=namespace).status())
    assert switch is not None
    args = ("set", "acme", "--daily", "1", "--monthly", "2")
    assert relevo("budgets", "--config", str(config), *args) == 0
    tenants = on_redis(url, lambda c: budgets.Ledger(c, namespace=namespace).tenants())
    assert tenants == ["acme"]


# -- --config with only [redis] --------------------------------------------------------


def test_operator_commands_need_only_the_redis_section(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    assert relevo("kill-switch", "status", "--config", config) == 0
    assert relevo("breakers", "--config", config, "--json") == 0
    assert (
        relevo("budgets", "set", "acme", "--daily", "1", "--monthly", "5", "--config", config) == 0
    )
    assert relevo("budgets", "list", "--config", config) == 0
    assert relevo("handoffs", "--config", config) == 0
    assert relevo("result", "never-ran", "--config", config) == 2
    err = capsys.readouterr().err
    assert "Field required" not in err
    assert one_line(err) == f"relevo: {UnknownTurn('never-ran')}"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[redis]\nurl = "http://127.0.0.1:6379"\n', "redis.url: String should match pattern"),
        ("[redis]\nsurl = 1\n", "redis.surl: Extra inputs are not permitted"),
        ('[redis]\nnamespace = "a..b"\n', "redis.namespace: "),
        ('redis = "x"\n', "redis: must be a table"),
        ("[redis\n", "not valid TOML"),
    ],
)
def test_an_operator_config_error_names_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    config = tmp_path / "ops.toml"
    config.write_text(text)
    assert relevo("kill-switch", "status", "--config", str(config)) == 2
    assert one_line(capsys.readouterr().err).startswith(f"relevo: {config}: {where}")


@pytest.mark.parametrize(
    "args",
    [
        ("enqueue", "--input", str(TURN)),
        ("replay-held",),
        ("turn", "--input", str(TURN)),
        ("breakers",),  # a broken chain is still a chain to check scopes against
    ],
)
def test_a_config_error_of_a_command_that_needs_the_chain_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    config = tmp_path / "ops.toml"
    config.write_text('[redis]\nurl = "redis://127.0.0.1:6379/0"\n[chain]\nmodels = []\n')
    assert relevo(*args, "--config", str(config)) == 2
    assert one_line(capsys.readouterr().err).startswith(f"relevo: {config}: ")


# -- relevo enqueue ----------------------------------------------------------------------


def test_enqueue_with_redis_down_is_one_line_exit_6_and_quick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = chain_config(tmp_path / "c.toml", f"redis://:hunter2@127.0.0.1:{free_port()}/0", "x")
    started = time.monotonic()
    assert relevo("enqueue", "--config", str(config), "--input", str(TURN), "--wait") == 6
    assert time.monotonic() - started < 5
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line.startswith("relevo: Redis at redis://:***@127.0.0.1:")
    assert "did not answer" in line
    assert "hunter2" not in line
    assert captured.out == ""


def test_enqueue_gives_up_quickly_when_redis_goes_away_after_answering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's own retries are cut short too: no 20 s loop, no traceback."""
    from worker.cli import enqueue

    async def answered(where: object) -> None:
        return None

    monkeypatch.setattr(enqueue, "_answers", answered)
    config = chain_config(tmp_path / "c.toml", f"redis://127.0.0.1:{free_port()}/0", "x")
    started = time.monotonic()
    assert relevo("enqueue", "--config", str(config), "--input", str(TURN), "--wait") == 6
    assert time.monotonic() - started < 5
    assert "did not answer" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("password", ["", ":wrong@"])
def test_enqueue_refused_by_redis_is_one_line_exit_6(
    private_redis: tuple[str, object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    password: str,
) -> None:
    url, _ = private_redis
    with sync_redis.Redis.from_url(url) as admin:
        admin.config_set("requirepass", "right")
    config = chain_config(tmp_path / "c.toml", url.replace("//", f"//{password}"), "x")
    started = time.monotonic()
    assert relevo("enqueue", "--config", str(config), "--input", str(TURN)) == 6
    assert time.monotonic() - started < 5
    line = one_line(capsys.readouterr().err)
    assert "refused this client (AuthenticationError)" in line
    assert "wrong" not in line


@pytest.fixture
def queue_cleaned(redis_url: str, namespace: str) -> Iterator[str]:
    """The test's namespace, its Celery queue keys (not namespaced) deleted after."""
    yield namespace
    client = sync_redis.Redis.from_url(redis_url)
    client.delete(namespace, f"_kombu.binding.{namespace}", f"_kombu.binding_permanent.{namespace}")
    client.close()


def test_enqueue_wait_timeout_names_the_turn_and_how_to_fetch_it(
    redis_url: str, queue_cleaned: str, tmp_path: Path
) -> None:
    # A process of its own: Celery's producer keeps its connections until the process ends.
    config = chain_config(tmp_path / "c.toml", redis_url, queue_cleaned)  # no worker on it
    args = ("--config", str(config), "--input", str(TURN), "--wait", "--timeout", "0.5")
    done = subprocess.run(
        [*RELEVO, "enqueue", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == common.EXIT_TIMEOUT, done.stderr
    line = one_line(done.stderr)
    turn_id = re.search(r"no result for turn (\S+) within 0.5s", line)
    assert turn_id is not None, line
    assert f"`relevo result {turn_id[1]}`" in line
    assert f"queue {queue_cleaned!r}" in line
    assert done.stdout == ""


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf", "soon"])
def test_enqueue_timeout_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        relevo("enqueue", "--config", "c.toml", "--wait", "--timeout", timeout)
    assert exit_.value.code == 2
    assert "is not a positive number of seconds" in capsys.readouterr().err


# -- relevo tail -------------------------------------------------------------------------


def finished(turn_id: str) -> TurnResult:
    return TurnResult(
        turn_id=turn_id, tenant_id="acme", status=Status.OK, primary_model="m", step=0
    )


def test_tail_of_a_finished_turn_that_did_not_stream_ends_at_once(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    on_redis(redis_url, lambda c: TurnStore(c, namespace=namespace, ttl_s=60).save(finished("t1")))
    started = time.monotonic()
    assert relevo("tail", "t1", "--config", config, "--idle-timeout", "5") == 0
    assert time.monotonic() - started < 0.5
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) == (
        "relevo: turn 't1' ended (it did not stream); `relevo result t1` prints its result"
    )


def test_tail_and_result_of_an_id_nobody_sent_say_so_at_once_and_exit_2(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    started = time.monotonic()
    assert relevo("tail", "no-such-turn", "--config", config) == 2  # idle timeout: 60 s
    assert time.monotonic() - started < 2.0
    assert one_line(capsys.readouterr().err) == (
        "relevo: unknown turn 'no-such-turn': no turn with that id is queued, running or "
        "finished (never sent, or its result expired)"
    )
    assert relevo("result", "no-such-turn", "--config", config) == 2
    assert one_line(capsys.readouterr().err).startswith("relevo: unknown turn 'no-such-turn'")


def test_tail_and_result_of_a_queued_turn_wait_for_it(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recorded as sent, no worker has it yet: `tail` waits out --idle-timeout (exit 8),
    `result` says it has not finished (exit 8)."""
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    client = sync_redis.Redis.from_url(redis_url)
    client.zadd(TurnKeys(namespace).sent, {"queued-turn": int(time.time() * 1000)})
    client.close()
    started = time.monotonic()
    assert relevo("tail", "queued-turn", "--config", config, "--idle-timeout", "0.5") == 8
    assert time.monotonic() - started >= 0.5
    assert one_line(capsys.readouterr().err).startswith(
        "relevo: gave up on turn 'queued-turn': nothing new for 0.5s"
    )
    assert relevo("result", "queued-turn", "--config", config) == 8
    assert one_line(capsys.readouterr().err) == (
        "relevo: turn 'queued-turn' has not finished (queued or running); "
        "`relevo tail queued-turn` follows it"
    )


def test_tail_gives_up_after_the_idle_timeout_with_exit_8(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))
    on_redis(redis_url, lambda c: TurnStore(c, namespace=namespace, ttl_s=60).publish("t2", "Hi"))
    started = time.monotonic()
    assert relevo("tail", "t2", "--config", config, "--idle-timeout", "0.5") == 8
    assert time.monotonic() - started < 3
    captured = capsys.readouterr()
    assert captured.out == "Hi\n"
    assert one_line(captured.err).startswith("relevo: gave up on turn 't2': nothing new for 0.5s")


def test_tail_prints_what_came_before_a_result_stored_without_an_end_marker(
    redis_url: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(redis_only(tmp_path / "ops.toml", redis_url, namespace))

    async def cut(client: Redis) -> None:
        store = TurnStore(client, namespace=namespace, ttl_s=60)
        await store.publish("t3", "part")
        await store.save(finished("t3"))

    on_redis(redis_url, cut)
    assert relevo("tail", "t3", "--config", config, "--idle-timeout", "5") == 0
    captured = capsys.readouterr()
    assert captured.out == "part\n"
    assert "its stream was cut short" in captured.err


def test_tail_idle_timeout_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        relevo("tail", "t1", "--idle-timeout", "0")
    assert exit_.value.code == 2


# -- a closed stdout ---------------------------------------------------------------------


@pytest.fixture
def stored_turn(redis_url: str, namespace: str) -> dict[str, str]:
    """A finished turn with streamed content; the environment that finds it."""

    async def store(client: Redis) -> None:
        turns = TurnStore(client, namespace=namespace, ttl_s=60)
        await turns.publish("t1", "x" * 100_000)
        await turns.end_stream("t1")
        await turns.save(finished("t1"))

    on_redis(redis_url, store)
    return {**os.environ, "RELEVO_REDIS__URL": redis_url, "RELEVO_REDIS__NAMESPACE": namespace}


@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("args", [("result", "t1"), ("tail", "t1"), ("--help",)])
def test_a_closed_stdout_ends_quietly(
    stored_turn: dict[str, str], args: tuple[str, ...], buffered: bool
) -> None:
    env = {k: v for k, v in stored_turn.items() if k != "PYTHONUNBUFFERED" or not buffered}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [*RELEVO, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # as `| head` does, before relevo writes
    with proc.stderr:
        err = proc.stderr.read().decode()
    code = proc.wait(timeout=30)
    assert err == ""
    # argparse ignores a failed write of its help itself, then exits 0.
    assert code == common.EXIT_BROKEN_PIPE or (args == ("--help",) and code == 0)


# -- --version and --help --------------------------------------------------------------


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"relevo {metadata.version('relevo')}"


def exit_codes() -> dict[str, int]:
    return {
        name: value
        for name, value in vars(common).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }


def test_top_level_help_says_what_relevo_is_lists_commands_and_every_exit_code() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "keeps AI agents answering when their model provider doesn't" in text
    for path, _ in parsers(build_parser()):
        if len(path) == 1:
            assert re.search(rf"\b{path[0]} [a-z]", text), path
    table = build_parser().epilog or ""
    for name, code in exit_codes().items():
        meaning = " ".join(common.EXIT_MEANINGS[code].split())
        assert f"{code} {meaning}" in " ".join(table.split()), name


def test_every_command_says_what_it_does_and_how_it_exits() -> None:
    for path, parser in parsers(build_parser()):
        if not path:
            continue
        assert parser.description, path
        assert (parser.epilog or "").startswith("exit status:"), path
        codes = [int(c) for c in re.findall(r"^ {2}(\d+) ", parser.epilog or "", re.M)]
        assert codes
        assert set(codes) <= set(exit_codes().values()), path


def test_exit_codes_are_defined_only_in_common() -> None:
    for module in (ROOT / "worker" / "cli").glob("*.py"):
        if module.name != "common.py":
            assert not re.search(r"^EXIT_\w+\s*=", module.read_text(), re.M), module
            assert not re.search(r"return (1\d\d|[1-9])\b", module.read_text()), module


def test_every_command_lists_its_exit_codes_in_order_and_every_option_says_what_it_is() -> None:
    for path, parser in parsers(build_parser()):
        codes = [int(c) for c in re.findall(r"^ {2}(\d+) ", parser.epilog or "", re.M)]
        assert codes == sorted(codes), path
        for action in parser._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert action.help, (path, action.option_strings)


def test_a_taken_port_ends_the_console_with_exit_11_and_one_line(
    tmp_path: Path, redis_url: str, namespace: str
) -> None:
    """uvicorn's own "could not start" is 3, which relevo gives a degraded turn."""
    config = redis_only(tmp_path / "redis.toml", redis_url, namespace)
    env = {**os.environ, "RELEVO_CONSOLE_TOKENS": "alice operator " + secrets.token_urlsafe(32)}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [*RELEVO, "console", "--config", str(config), "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 11, done.stderr
    assert f"relevo: console: could not serve on 127.0.0.1 port {port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_ends_the_simulator_with_exit_11_and_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert relevo("simulate", "--port", str(port)) == 11
    err = capsys.readouterr().err
    assert err.startswith(f"relevo: simulate: could not listen on 127.0.0.1 port {port} (")
    assert len(err.splitlines()) == 1
