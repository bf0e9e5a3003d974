"""Point 4: API keys come only from the worker's side and never come back out.

A task payload cannot carry a key, a header or an endpoint. When a provider
echoes the key it received (the simulator's `echo_key`), the key appears in no
result, no exception (message, repr or traceback) and no `relevo turn` output.
The Celery result backend is read raw in tests/test_security_redis.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.chainkit import run, turn
from tests.chainkit import settings as chain_settings
from worker.errors import InputError, TurnFailed
from worker.settings import ProviderSettings
from worker.simulator import Fault, Simulator
from worker.types import parse_turn_request

USER = {"role": "user", "content": "hi"}
# One key shaped like OpenAI's (which pattern-based redaction also catches) and one that no
# pattern knows (Azure's 32 hex digits): only scrubbing the exact key protects that one.
KEYS = {"sk-shaped": "sk-test-0123456789abcdef", "hex": "4f9c2b7e1d8a4c3fb6e05d92a7c1e8f3"}
KEY = KEYS["hex"]
# (where in the payload, the field an attacker adds)
SMUGGLED: list[tuple[str, str]] = [
    ("top", "api_key"),
    ("top", "headers"),
    ("top", "authorization"),
    ("top", "base_url"),
    ("top", "providers"),
    ("top", "api_key_env"),
    ("top", "api_key_file"),
    ("top", "model"),
    ("message", "api_key"),
    ("message", "headers"),
    ("message", "name"),
    ("tool", "api_key"),
    ("tool", "url"),
]


@pytest.mark.parametrize(("where", "field"), SMUGGLED)
def test_a_payload_cannot_carry_keys_headers_or_endpoints(where: str, field: str) -> None:
    value = {"x-api-key": "sk-attacker"} if field == "headers" else "sk-attacker"
    data: dict[str, object] = {"tenant_id": "acme", "messages": [USER]}
    if where == "top":
        data[field] = value
    elif where == "message":
        data["messages"] = [{**USER, field: value}]
    else:
        data["tools"] = [{"name": "f", field: value}]
    with pytest.raises(InputError, match="Extra inputs are not permitted") as caught:
        parse_turn_request(data)
    assert field in str(caught.value)
    assert "sk-attacker" not in str(caught.value)  # the refused value is not echoed


def test_the_key_comes_from_a_mounted_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "openai.key"
    secret.write_text(KEY + "\n")
    mounted = ProviderSettings(kind="openai", base_url="http://x", api_key_file=secret)
    assert mounted.api_key() == KEY
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    env = ProviderSettings(kind="openai", base_url="http://x", api_key_env="RELEVO_TEST_KEY")
    assert env.api_key() == KEY


@pytest.fixture(params=list(KEYS))
def key(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    secret: str = KEYS[request.param]
    monkeypatch.setenv("RELEVO_TEST_KEY", secret)
    return secret


ECHOES: dict[str, Fault] = {
    "401 with the default body": Fault(status=401, echo_key=True),
    "403 quoting it in text": Fault(status=403, echo_key=True, body="key $API_KEY refused"),
    "400 quoting it in HTML": Fault(status=400, echo_key=True, body="<p>bad $API_KEY</p>"),
    "500 quoting it in JSON": Fault(
        status=500, echo_key=True, body={"error": {"message": "oops $API_KEY", "type": "x"}}
    ),
    "429 quoting it": Fault(
        status=429, echo_key=True, body={"error": {"message": "slow down $API_KEY"}}
    ),
}
ORDERS = {
    "openai": ("openai/alpha", "anthropic/beta"),
    "anthropic": ("anthropic/beta", "google/gamma"),
    "gemini": ("google/gamma", "openai/alpha"),
}
MODEL_IDS = ("alpha", "beta", "gamma")


def assert_no_key(text: str, key: str) -> None:
    for form in (key, quote(key, safe=""), key[-16:]):
        assert form not in text


@pytest.mark.parametrize("api", ORDERS)
@pytest.mark.parametrize("echo", ECHOES, ids=list(ECHOES))
async def test_an_echoed_key_appears_in_no_result_and_no_exception(
    api: str, echo: str, key: str, sim: Simulator
) -> None:
    sim.reset()
    for model in MODEL_IDS:
        sim.set_faults(model, ECHOES[echo])
    result = await run(chain_settings(sim.url, ORDERS[api]), turn())
    assert result.status == "failed"
    assert any(a.http_status == ECHOES[echo].status for a in result.attempts)
    assert_no_key(result.to_json(), key)
    assert_no_key(repr(result), key)
    with pytest.raises(TurnFailed) as caught:
        result.raise_for_status()
    group = caught.value
    assert group.exceptions
    shown = [str(group), repr(group), *traceback.format_exception(group)]
    for error in group.exceptions:
        shown += [str(error), repr(error), repr(error.args), repr(vars(error))]
    assert_no_key("\n".join(shown), key)


def test_relevo_turn_output_never_shows_an_echoed_key(
    key: str, sim: Simulator, tmp_path: Path
) -> None:
    sim.reset()
    for model in MODEL_IDS:
        sim.set_faults(model, Fault(status=401, echo_key=True))
    config = tmp_path / "chain.toml"
    config.write_text(
        f"""
turn_deadline_s = 10
[chain]
models = ["openai/alpha", "anthropic/beta"]
[providers.oa]
kind = "openai"
base_url = "{sim.url}/v1"
api_key_env = "RELEVO_TEST_KEY"
[providers.an]
kind = "anthropic"
base_url = "{sim.url}"
api_key_env = "RELEVO_TEST_KEY"
[models."openai/alpha"]
vendor = "openai"
context_window = 100000
serve = [{{ provider = "oa", model_id = "alpha" }}]
[models."anthropic/beta"]
vendor = "anthropic"
context_window = 100000
serve = [{{ provider = "an", model_id = "beta" }}]
"""
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "--log-level",
            "debug",
            "turn",
            "--config",
            str(config),
        ],
        input='{"tenant_id": "acme", "messages": [{"role": "user", "content": "hi"}]}',
        capture_output=True,
        text=True,
        env={**os.environ, "RELEVO_TEST_KEY": key},
        timeout=60,
        check=False,
    )
    assert done.returncode == 4, done.stderr  # failed: a 401 is not worth a fallback
    assert '"auth_failed"' in done.stdout
    assert sim.calls("alpha") == 1
    assert_no_key(done.stdout, key)
    assert_no_key(done.stderr, key)
