"""`relevo turn` against `relevo simulate`, both as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.netkit import free_port
from worker.simulator import Fault, SimulatorClient

pytestmark = pytest.mark.usefixtures("fresh_sim")

ROOT = Path(__file__).parent.parent
CONFIG = ROOT / "examples" / "simulated.toml"
TURN = ROOT / "examples" / "turn.json"
RELEVO = [sys.executable, "-m", "worker.cli"]


@pytest.fixture(scope="module")
def simulator() -> Iterator[SimulatorClient]:
    port = free_port()
    proc = subprocess.Popen(
        [*RELEVO, "simulate", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = SimulatorClient(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.reset()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def sim(simulator: SimulatorClient) -> SimulatorClient:
    """The simulator process this module starts, in the place of conftest's own (its
    `fresh_sim` resets this one)."""
    return simulator


def relevo(
    simulator: SimulatorClient, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for name, suffix in (("ANTHROPIC_SIM", ""), ("OPENAI_SIM", "/v1"), ("GEMINI_SIM", "")):
        env[f"RELEVO_PROVIDERS__{name}__BASE_URL"] = simulator.url + suffix
    return subprocess.run(
        [*RELEVO, "--log-level", "warning", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_overloaded_primary_answers_from_the_second_model(simulator: SimulatorClient) -> None:
    simulator.set_faults("claude-sim", Fault(status=529))
    done = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(TURN))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["step"] == 1
    assert result["effective_model"] == "openai/gpt-sim"
    assert result["attempts"][0]["http_status"] == 529
    assert simulator.calls("claude-sim") == 1


def test_streamed_content_goes_to_stderr_and_the_result_to_stdout(
    simulator: SimulatorClient,
) -> None:
    done = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(TURN), "--stream")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # Ended by a newline: what follows on the terminal starts on a line of its own.
    assert done.stderr.endswith(result["reply"]["text"] + "\n")
    assert simulator.requests("claude-sim")[0].stream


def test_exit_status_tells_degraded_and_failed(simulator: SimulatorClient) -> None:
    quota = {"type": "error", "error": {"type": "billing_error", "message": "credit"}}
    simulator.set_faults("claude-sim", Fault(status=402, body=quota))
    assert relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(TURN)).returncode == 3
    simulator.set_faults("claude-sim", Fault(status=401))
    failed = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(TURN))
    assert failed.returncode == 4
    assert json.loads(failed.stdout)["reason"] == "auth_failed"


def test_bad_input_names_the_field_without_a_traceback(simulator: SimulatorClient) -> None:
    bad = json.dumps({"tenant_id": "acme", "messages": [{"role": "robot", "content": "x"}]})
    done = relevo(simulator, "turn", "--config", str(CONFIG), stdin=bad)
    assert done.returncode == 2
    assert "messages.0.role" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_input_that_is_not_json_is_a_usage_error(simulator: SimulatorClient) -> None:
    done = relevo(simulator, "turn", "--config", str(CONFIG), stdin="{not json")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_bad_configuration_names_the_key(simulator: SimulatorClient, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(CONFIG.read_text().replace('kind = "gemini"', 'kind = "palm"'))
    done = relevo(simulator, "turn", "--config", str(config), "--input", str(TURN))
    assert done.returncode == 2
    assert "providers.gemini_sim.kind" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_input_file_is_a_usage_error(simulator: SimulatorClient, tmp_path: Path) -> None:
    done = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(tmp_path / "no"))
    assert done.returncode == 2
    assert "cannot read input" in done.stderr


def test_turn_over_the_configured_limits_is_refused(
    simulator: SimulatorClient, tmp_path: Path
) -> None:
    config = tmp_path / "small.toml"
    config.write_text(CONFIG.read_text() + "\n[limits]\nmax_messages = 1\n")
    done = relevo(simulator, "turn", "--config", str(config), "--input", str(TURN))
    assert done.returncode == 2
    assert "limits.max_messages" in done.stderr
    assert simulator.calls() == 0


def test_the_invoice_example_is_answered_in_its_schema(simulator: SimulatorClient) -> None:
    """examples/turn_invoice.json: an image, a PDF and a JSON schema reach the primary."""
    invoice = ROOT / "examples" / "turn_invoice.json"
    done = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(invoice))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["effective_model"] == "anthropic/claude-sim"
    assert set(result["reply"]["parsed"]) == {"order", "total"}
    sent = simulator.requests("claude-sim")[0].body["messages"][-1]["content"]
    assert [block["type"] for block in sent] == ["text", "image", "document"]


def test_the_forced_tool_example_calls_its_tool(simulator: SimulatorClient) -> None:
    forced = ROOT / "examples" / "turn_forced_tool.json"
    done = relevo(simulator, "turn", "--config", str(CONFIG), "--input", str(forced))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [call["name"] for call in result["reply"]["tool_calls"]] == ["lookup_order"]
    assert simulator.requests("claude-sim")[0].body["tool_choice"] == {
        "type": "tool",
        "name": "lookup_order",
    }
