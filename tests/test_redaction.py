"""API keys and prompts never reach a log line, a result or an exception's text."""

from __future__ import annotations

import io
import json
import traceback

import httpx
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.chainkit import ID_OF, KEY, ORDER, run, settings, turn
from worker.adapters.classify import classify_response
from worker.errors import TurnFailed
from worker.fleet.loop import LoopThread
from worker.fleet.runner import TurnRunner
from worker.observability.logs import configure_logging
from worker.observability.redact import (
    _NAMED,
    _PATTERNS,
    _URL_PASSWORD,
    REDACTED,
    Redactor,
    provider_secrets,
    redact_exact,
    redact_text,
    redact_url,
)
from worker.settings import Settings
from worker.simulator import Fault, Simulator
from worker.types import Status, TurnResult

pytestmark = pytest.mark.usefixtures("fresh_sim")


# A key no pattern recognises: only the configured providers' exact values catch it.
PLAIN_KEY = "Zq7pLainSecretNoPattern42"
PROMPT = "canary-prompt-7f3e: my account number is 0042"
KEYS = [KEY, PLAIN_KEY]


def _log_lines() -> io.StringIO:
    return io.StringIO()


def _exception_texts(result: TurnResult) -> str:
    """Everything an exception from `raise_for_status` could show: messages, reprs, tracebacks."""
    with pytest.raises(TurnFailed) as caught:
        result.raise_for_status()
    group = caught.value
    parts = ["".join(traceback.format_exception(group))]
    for error in (group, *group.exceptions):
        parts += [str(error), repr(error), repr(error.args), repr(vars(error))]
    return "\n".join(parts)


def _assert_absent(key: str, *texts: str) -> None:
    for text in texts:
        assert key not in text
        assert key[4:-4] not in text  # nor a slice of it


def test_the_simulator_really_echoes_the_key(sim: Simulator) -> None:
    """The leak the other tests guard against exists: the provider's error body quotes the key."""
    sim.set_faults("alpha", Fault(status=401, echo_key=True))
    response = httpx.post(
        f"{sim.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {PLAIN_KEY}"},
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 401
    assert PLAIN_KEY in response.text


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("key", KEYS, ids=["patterned", "plain"])
async def test_echoed_key_is_in_no_log_result_or_exception(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, kind: str, key: str
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", key)
    config = settings(sim.url, ORDER[kind])
    primary = ORDER[kind][0]
    sim.set_faults(ID_OF[primary], Fault(status=401, echo_key=True))
    logs = _log_lines()
    configure_logging(level="debug", json=True, stream=logs, secrets=provider_secrets(config))

    result = await run(config, turn(PROMPT))

    assert result.status is Status.FAILED
    assert result.attempts[0].http_status == 401
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert {"turn.attempt", "turn.completed"} <= {line["event"] for line in lines}
    _assert_absent(key, logs.getvalue(), result.to_json(), _exception_texts(result))
    assert PROMPT not in logs.getvalue()


@pytest.mark.parametrize("key", KEYS, ids=["patterned", "plain"])
def test_echoed_key_is_absent_through_the_turn_runner(
    sim: Simulator,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", key)
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    sim.set_faults("alpha", Fault(status=401, echo_key=True))
    logs = _log_lines()
    # No secrets given here: the runner adds its providers' keys itself.
    configure_logging(level="debug", json=True, stream=logs)
    runner = TurnRunner(config, loop=LoopThread())
    try:
        payload = runner.answer(turn(PROMPT).model_dump(mode="json"))
        direct = runner.loop.run(runner.result_of(turn(PROMPT)))
    finally:
        runner.close()

    assert payload["status"] == "failed"
    assert direct.status is Status.FAILED
    assert sim.calls("alpha") == 2
    _assert_absent(key, logs.getvalue(), json.dumps(payload), _exception_texts(direct))
    assert PROMPT not in logs.getvalue()


def test_redactor_cleans_nested_values_fields_and_tracebacks() -> None:
    logs = _log_lines()
    configure_logging(level="debug", json=True, stream=logs, secrets=[PLAIN_KEY])
    log = structlog.get_logger("test")
    try:
        raise RuntimeError(f"provider said: bad key {PLAIN_KEY} and {KEY}")
    except RuntimeError:
        log.exception(
            "call.failed",
            headers={"Authorization": "Basic dXNlcjpwYXNz", "x-api-key": "whatever"},
            body={"error": {"message": f"Incorrect API key provided: {KEY}"}},
            nested=[({"deep": [PLAIN_KEY]},)],
            messages=[{"role": "user", "content": PROMPT}],
            url=f"https://example.test/v1beta/models/g:generateContent?key={PLAIN_KEY}",
            api_key=PLAIN_KEY,
        )
    text = logs.getvalue()
    event = json.loads(text)
    _assert_absent(PLAIN_KEY, text)
    _assert_absent(KEY, text)
    assert PROMPT not in text
    assert "dXNlcjpwYXNz" not in text
    assert event["headers"] == {"Authorization": REDACTED, "x-api-key": REDACTED}
    assert event["api_key"] == REDACTED
    assert event["nested"] == [[{"deep": [REDACTED]}]]
    assert "RuntimeError" in event["exception"]
    assert event["url"].endswith(f"?key={REDACTED}")


def test_console_output_is_redacted_too() -> None:
    logs = _log_lines()
    configure_logging(level="info", json=False, stream=logs, secrets=[PLAIN_KEY])
    structlog.get_logger("test").warning("echo", detail=f"key={PLAIN_KEY} bearer {KEY}")
    assert "echo" in logs.getvalue()
    _assert_absent(PLAIN_KEY, logs.getvalue())
    _assert_absent(KEY, logs.getvalue())


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Incorrect API key provided: sk-proj-abcDEF0123456789xyz.", "sk-proj-abcDEF0123456789xyz"),
        ("x-api-key: sk-ant-api03-AAAABBBBCCCCDDDD", "sk-ant-api03-AAAABBBBCCCCDDDD"),
        ("API key not valid: AIzaSyA1234567890abcdefghijklmnopqrs", "AIzaSyA1234567890abcdefghi"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ('{"api-key": "0123456789abcdef0123456789abcdef"}', "0123456789abcdef0123456789abcdef"),
        ("Error 111 connecting to redis://:hunter2hunter2@10.0.0.5:6379/0", "hunter2hunter2"),
        ("broker rediss://relevo-worker:p%40ss@redis.internal/1 down", "p%40ss"),
    ],
)
def test_key_shapes_are_redacted_without_knowing_the_key(text: str, secret: str) -> None:
    cleaned = redact_text(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def test_a_url_loses_only_its_password() -> None:
    assert redact_url("redis://app:pw@h:6379/0") == "redis://app:***@h:6379/0"
    assert redact_url("rediss://:pw@h/1") == "rediss://:***@h/1"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redact_text("see https://example.com/a:b@c") == "see https://example.com/a:b@c"


def test_ordinary_text_is_left_alone() -> None:
    text = "model openai/alpha answered in 812 ms; task-list sk- skipped; tokens=42"
    assert redact_text(text) == text


# Each was known to one of the three scrubbers that existed before `redact.py` was the only
# one: the masked key and the `…_key=` value to the provider error messages
# (adapters/classify.py), the quoted header field to the logs.
ONE_SCRUBBER_ONLY = {
    "masked sk- key": ("Incorrect API key provided: sk-live***********wxyz.", "live****"),
    "a _key= value": ("denied access_key=9f8e7d6c5b4a3f2e", "9f8e7d6c5b4a3f2e"),
    "quoted header field": ('sent {"x-api-key": "a1b2c3d4e5f6a7b8"}', "a1b2c3d4e5f6a7b8"),
}


@pytest.mark.parametrize("shape", ONE_SCRUBBER_ONLY)
async def test_a_shape_once_known_to_one_scrubber_is_redacted_on_every_path(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    text, secret = ONE_SCRUBBER_ONLY[shape]
    body = {"error": {"message": f"provider says: {text}", "type": "invalid_request_error"}}
    error = classify_response("openai", 401, {}, json.dumps(body).encode())
    logs = _log_lines()
    configure_logging(level="debug", json=True, stream=logs)
    structlog.get_logger("test").warning("echo", detail=text)
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.set_faults("alpha", Fault(status=401, body=body))

    result = await run(settings(sim.url, ORDER["openai"]), turn(PROMPT))

    assert result.attempts[0].http_status == 401
    shown = (str(error), logs.getvalue(), result.to_json(), _exception_texts(result))
    for text_shown in shown:
        assert secret not in text_shown


def test_exact_redaction_leaves_an_error_body_parseable() -> None:
    body = json.dumps({"error": {"message": f"bad key {PLAIN_KEY}, Bearer {KEY}"}})
    cleaned = json.loads(redact_exact(body, [PLAIN_KEY]))
    assert cleaned == {"error": {"message": f"bad key {REDACTED}, Bearer {KEY}"}}


def test_secrets_added_later_are_redacted_from_then_on() -> None:
    redactor = Redactor()
    assert redactor(None, "info", {"event": PLAIN_KEY}) == {"event": PLAIN_KEY}
    redactor.add([PLAIN_KEY, "", "  "])
    assert redactor(None, "info", {"event": PLAIN_KEY}) == {"event": REDACTED}


def test_provider_secrets_are_the_configured_keys(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", PLAIN_KEY)
    config: Settings = settings(sim.url)
    assert set(provider_secrets(config)) == {PLAIN_KEY}


_FRAGMENTS = st.sampled_from(
    [
        "sk-",
        "SK-",
        "sk-ant-",
        "AIza",
        "aiza",
        "Bearer ",
        "bearer\t",
        "key",
        "KEY",
        "?key=",
        "&key=",
        "x-api-key: ",
        "api_key=",
        "Authorization: Basic ",
        "proxy-authorization=",
        "abcdefgh12345678",
        "0123456789abcdefghijklmn",
        " ",
        '"',
        "'",
        ":",
        "=",
        "é",
        "redis://",
        "u:",
        "@",
    ]
)


@given(st.lists(_FRAGMENTS | st.text(max_size=6), max_size=12).map("".join))
def test_text_passed_by_the_fast_check_needs_no_rewrite(text: str) -> None:
    # The slow path, always taken: what redact_text must agree with.
    full = _NAMED.sub(lambda m: m.group(1) + REDACTED, text)
    full = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", full)
    full = _PATTERNS.sub(REDACTED, full)
    assert redact_text(text) == full
