"""The tutorial as an executed document: its simulated-fleet walkthrough runs as written.

docs/tutorial.md marks the blocks of that walkthrough: `<!-- test: fleet -->` before each
`sh`/`bash` or `python` block to run, and `<!-- test: output -->` before a `text` (or
`json`) block holding what the block before it prints on stdout. The test copies
`examples/` into a temporary directory (the walkthrough runs at the repository root,
and only reads `examples/`), writes one bash script of every marked block in page
order (shell blocks as they are, each Python block fed to `python -` on a here-document)
and runs it under `set -euo pipefail`, with `RELEVO_REDIS__URL` pointing at a private
`redis-server`. It fails if any command fails, if a block's stdout differs from the
output shown after it (or is not empty when none is shown), or if anything the
walkthrough started is still running after its last block.

Matching an output block: each line is stripped, `…` matches any text within a line
(a line of only `…`: any lines, or none), and consecutive lines may be joined by any
whitespace or none, so a one-line JSON result may be shown folded over several lines.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import skip_unless_ci
from tests.netkit import free_port

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
WHERE = "docs/tutorial.md"
# The ports the walkthrough names: the simulator, each worker node's metrics, the
# exporter's. The test runs it on free ports instead (`on_ports`), beside anything else.
FLEET_PORTS = (8900, 9464, 9465, 9466)
_FLEET_PORT = re.compile(r"\b(" + "|".join(map(str, FLEET_PORTS)) + r")\b")
TOOLS = ("bash", "curl", "grep", "mktemp")
RUN_TIMEOUT_S = 100
# A line before each block's output and after the last, with the time it was printed.
BLOCK_MARK = "@@relevo-tutorial-block {}@@"
END_MARK = "@@relevo-tutorial-end@@"
_MARK_LINE = re.compile(r"^@@relevo-tutorial-(?:block (\d+)|end)@@ ([\d.]+)$", re.M)
PY_EOF = "RELEVO_TUTORIAL_PYTHON"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_MARK = re.compile(r"^<!-- test: (\w+) -->\n+", re.M)


@dataclass
class Block:
    """One marked block of the tutorial: its language, code, line, and expected stdout."""

    lang: str
    code: str
    line: int
    expected: str | None = None


def marked_blocks(text: str, kind: str = "fleet") -> list[Block]:
    """The page's blocks marked `<!-- test: {kind} -->`, each with its output block."""
    blocks: list[Block] = []
    last: Block | None = None
    for mark in _MARK.finditer(text):
        fence = _FENCE.match(text, mark.end())
        line = text.count("\n", 0, mark.start()) + 1
        assert fence, f"{WHERE}:{line}: a test marker must be followed by a fenced block"
        lang, code = fence.group(1), fence.group(2)
        if mark.group(1) == "output":
            assert last is not None, f"{WHERE}:{line}: an output block follows no test block"
            assert last.expected is None, f"{WHERE}:{line}: a second output block"
            assert lang in ("text", "json"), f"{WHERE}:{line}: output blocks are text"
            last.expected = code
        elif mark.group(1) == kind:
            assert lang in ("sh", "bash", "python"), f"{WHERE}:{line}: cannot run {lang!r}"
            last = Block(lang, code, line)
            blocks.append(last)
        else:
            last = None
    return blocks


def output_pattern(expected: str) -> re.Pattern[str]:
    """The regular expression an output block stands for (see the module docstring)."""
    parts = []
    for raw in expected.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "…":
            parts.append(r"(?:.*?)")
        else:
            parts.append("[^\n]*?".join(re.escape(piece) for piece in line.split("…")))
    return re.compile(r"\s*".join(parts), re.S)


def _print_mark(mark: str) -> str:
    return f"printf '\\n%s %s\\n' {shlex.quote(mark)} \"$(date +%s.%N)\""


def script_of(blocks: list[Block]) -> str:
    """One bash script running every block in order, a marker line before each."""
    lines = ["set -euo pipefail"]
    for index, block in enumerate(blocks):
        lines.append(_print_mark(BLOCK_MARK.format(index)))
        if block.lang == "python":
            assert PY_EOF not in block.code
            lines += [f"python - <<'{PY_EOF}'", block.code.rstrip("\n"), PY_EOF]
        else:
            lines.append(block.code.rstrip("\n"))
    lines.append(_print_mark(END_MARK))
    return "\n".join(lines) + "\n"


def split_output(stdout: str, count: int) -> tuple[list[str | None], list[float | None]]:
    """Each block's stdout and seconds taken, by the marker lines (None: it never started;
    a block that never ended has no duration)."""
    outputs: list[str | None] = [None] * count
    seconds: list[float | None] = [None] * count
    marks = list(_MARK_LINE.finditer(stdout))
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        if mark.group(1) is None:
            continue
        index = int(mark.group(1))
        outputs[index] = stdout[mark.end() : after.start() if after else None].strip()
        if after is not None:
            seconds[index] = float(after.group(2)) - float(mark.group(2))
    return outputs, seconds


def on_ports(text: str, ports: dict[int, int]) -> str:
    """`text` with each port the walkthrough names replaced by the one the test chose."""
    return _FLEET_PORT.sub(lambda m: str(ports[int(m.group(1))]), text)


@pytest.fixture
def ports() -> dict[int, int]:
    """A free port for each one the walkthrough names."""
    chosen: dict[int, int] = {}
    while len(set(chosen.values())) < len(FLEET_PORTS):
        chosen = {port: free_port() for port in FLEET_PORTS}
    return chosen


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture
def fleet_dir(tmp_path: Path, ports: dict[int, int]) -> Path:
    """A directory laid out as the walkthrough expects: `examples/` as in the repository,
    on the test's ports."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for config in (tmp_path / "examples").rglob("*.toml"):
        config.write_text(on_ports(config.read_text(encoding="utf-8"), ports), encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    return tmp_path


def tutorial_blocks(ports: dict[int, int]) -> list[Block]:
    """The walkthrough's blocks and their outputs, on the test's ports."""
    return marked_blocks(on_ports(TUTORIAL.read_text(encoding="utf-8"), ports))


@pytest.fixture
def walkthrough(
    fleet_dir: Path, ports: dict[int, int], private_redis: tuple[str, subprocess.Popen[bytes]]
) -> Iterator[tuple[subprocess.Popen[str], float]]:
    """The tutorial's marked blocks, started as one bash script; killed whatever happens."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            skip_unless_ci(f"the tutorial's walkthrough needs {tool}")
    url, _ = private_redis
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELEVO_", "PROMETHEUS_"))}
    bindir = str(Path(sys.executable).parent)  # `relevo` and `python` of this environment
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        RELEVO_REDIS__URL=url,
        TMPDIR=str(fleet_dir / "tmp"),
    )
    script = fleet_dir / "walkthrough.sh"
    script.write_text(script_of(tutorial_blocks(ports)))
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(script)],
        cwd=fleet_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: everything it starts, killed below
    )
    try:
        yield proc, started
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def _logs(fleet_dir: Path) -> str:
    found = sorted((fleet_dir / "tmp").rglob("*.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in found)


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_the_tutorial_runs_as_written(
    walkthrough: tuple[subprocess.Popen[str], float], fleet_dir: Path, ports: dict[int, int]
) -> None:
    proc, started = walkthrough
    blocks = tutorial_blocks(ports)
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=10)
        pytest.fail(f"the walkthrough ran over {RUN_TIMEOUT_S} s\n{stdout}\n{stderr}")
    took = time.monotonic() - started
    outputs, seconds = split_output(stdout, len(blocks))
    timing = ", ".join(f"{blocks[i].line}: {s:.1f} s" for i, s in enumerate(seconds) if s)
    ran = [i for i, out in enumerate(outputs) if out is not None]
    where = f"{WHERE}:{blocks[ran[-1]].line}" if ran else "the first block"
    assert proc.returncode == 0, (
        f"the block at {where} failed (exit status {proc.returncode}) after {took:.1f} s "
        f"({timing})\n"
        f"--- its stdout\n{outputs[ran[-1]] if ran else stdout}\n--- stderr\n{stderr[-4000:]}\n"
        f"{_logs(fleet_dir)}"
    )
    assert END_MARK in stdout, "the walkthrough ended before its last block"
    print(f"tutorial walkthrough: {len(blocks)} blocks in {took:.1f} s (by line: {timing})")
    for block, out in zip(blocks, outputs, strict=True):
        assert out is not None
        if block.expected is None:
            assert out == "", f"{WHERE}:{block.line} prints what the page does not show:\n{out}"
        else:
            assert output_pattern(block.expected).fullmatch(out), (
                f"{WHERE}:{block.line} printed something else than the page shows.\n"
                f"--- shown\n{block.expected}--- printed\n{out}"
            )
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid):
        assert time.monotonic() < deadline, "the walkthrough's last block left processes running"
        time.sleep(0.1)


def test_the_walkthrough_covers_the_fleet_and_its_operators() -> None:
    """Markers are how the test finds the blocks: losing them must not shrink what runs."""
    blocks = marked_blocks(TUTORIAL.read_text(encoding="utf-8"))
    code = "\n".join(b.code for b in blocks)
    assert code.count("relevo worker ") == 2
    for needed in (
        "relevo simulate",
        "relevo turn",
        "relevo enqueue",
        "relevo result",
        "relevo breakers",
        "relevo kill-switch on",
        "relevo kill-switch off",
        "relevo replay-held",
        "relevo budgets set",
        "relevo budgets show",
        "enqueue_turn(",
        "Chain.from_settings(",
    ):
        assert needed in code, f"the tutorial's tested walkthrough no longer runs {needed!r}"
    assert {b.lang for b in blocks} >= {"sh", "python"}
    assert blocks[-1].lang == "sh"
    assert "kill " in blocks[-1].code, "the walkthrough must end by stopping what it started"


def test_the_output_matcher() -> None:
    pattern = output_pattern('{"a": 1, "b": "…",\n "c": [\n  {"d": …}]}\n')
    assert pattern.fullmatch('{"a": 1, "b": "x y", "c": [{"d": 2, "e": 3}]}')
    assert not pattern.fullmatch('{"a": 2, "b": "x", "c": [{"d": 2}]}')
    table = output_pattern("Title …\n…\n│ one │ open │ …\n…\n")
    assert table.fullmatch("Title at 12:00\n┏━━┓\n│ one │ open │ 1 │\n└──┘")
    assert not table.fullmatch("Title at 12:00\n│ one │ closed │ 1 │")
    assert not output_pattern("a … b\n").fullmatch("a x\ny b")


def test_the_walkthrough_moves_to_other_ports_whole() -> None:
    ports = {8900: 18900, 9464: 19464, 9465: 19465, 9466: 19466}
    moved = "\n".join(b.code for b in tutorial_blocks(ports))
    assert not _FLEET_PORT.search(moved), "a port the walkthrough names was left in place"
    assert "127.0.0.1:18900" in moved
    assert on_ports("port 89001 and 8900/v1", ports) == "port 89001 and 18900/v1"
