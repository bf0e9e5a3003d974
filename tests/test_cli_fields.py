"""A reason or a name printed inside a line of `relevo` output stays inside that line.

The kill switch's reason is anyone's text (an operator's, or whoever wrote the key): a
newline in it would print a line of its own, "kill switch: off" under a switch that is
on. The commands run as people run them, on the session's Redis in a private namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

pytestmark = pytest.mark.redis

FORGED = "kill switch: off"
REASON = f"maintenance\n{FORGED}\n\u2028held turns: 0"


@pytest.fixture
def config(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "relevo.toml"
    path.write_text(
        'turn_deadline_s = 10\n[chain]\nmodels = ["openai/gpt-sim"]\n'
        '[providers.openai_sim]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[models."openai/gpt-sim"]\nvendor = "openai"\ncontext_window = 8000\n'
        f'[redis]\nurl = "{redis_url}"\nnamespace = "{namespace}"\nrejoin_check_s = 0.1\n'
    )
    yield path
    with redis.Redis.from_url(redis_url) as client:
        for key in client.scan_iter(f"{{{namespace}}}*"):
            client.delete(key)


def relevo(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "relevo"), *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_a_reason_with_newlines_prints_no_line_of_its_own(config: Path) -> None:
    on = relevo(config, "kill-switch", "on", "--reason", REASON)
    assert on.returncode == 0, on.stderr[-500:]
    status = relevo(config, "kill-switch", "status")
    off = relevo(config, "kill-switch", "off")
    for done in (on, status, off):
        assert FORGED not in done.stdout.splitlines(), done.stdout
    # kill switch, who, why, since, held turns: the reason is one line's field.
    assert len(status.stdout.splitlines()) == 5, status.stdout
    assert f"why: maintenance[U+000A]{FORGED}[U+000A][U+2028]held turns: 0" in status.stdout
