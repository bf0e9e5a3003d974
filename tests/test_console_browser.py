"""The operator console in a real browser, against two `celery worker` processes.

A person logs in, watches a breaker open while the simulator fails the primary,
turns the kill switch on (and no provider call arrives after), off again, replays
the held turns, looks up a turn's attempts, sets a tenant's limits; a viewer cannot
act, and an action without its CSRF token is refused. The tests run in order and
share one fleet, one console and one browser. RELEVO_SCREENSHOTS=DIR keeps the
main pages as PNG files there (docs/ keeps them).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.chainkit import KEY, worker_config
from tests.consolekit import chromium, console_process
from tests.workerkit import celery_worker_process, stop
from worker.fleet.app import make_app
from worker.fleet.enqueue import TurnHandle, enqueue_turn
from worker.settings import Settings, load_settings
from worker.simulator import Fault, Simulator
from worker.types import Message, Status, TurnRequest, TurnResult

T = TypeVar("T")

pytestmark = pytest.mark.slow

OPERATOR = "alice-operator-token-0123456789"
VIEWER = "bob-viewer-token-0123456789abcd"
SECTIONS = """
[retry]
base_delay_s = 0.01

[breakers]
window_s = 30
min_calls_in_window = 4
break_s = 120
max_break_s = 120

[observability]
fallback_min_turns = 5

[console]
poll_interval_s = 0.5
"""


@pytest.fixture(scope="module")
def fleet_config(redis_url: str, sim: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Path:
    namespace = f"relevo-test-{uuid.uuid4().hex[:12]}"
    path = tmp_path_factory.mktemp("console") / "chain.toml"
    path.write_text(
        worker_config(sim=sim.url, redis_url=redis_url, namespace=namespace, sections=SECTIONS)
    )
    return path


@pytest.fixture(scope="module")
def settings(fleet_config: Path) -> Settings:
    return load_settings(fleet_config, require_secrets=False)


@pytest.fixture(scope="module")
def workers(fleet_config: Path, settings: Settings) -> Iterator[None]:
    """Two `celery worker` processes on the namespace's queue."""
    queue = settings.worker.queue
    procs = [celery_worker_process(fleet_config, queue=queue, name=f"w{i}@%h") for i in range(2)]
    yield
    stop(procs)


@pytest.fixture(scope="module")
def console(fleet_config: Path, workers: None) -> Iterator[str]:
    tokens = f"alice operator {OPERATOR};bob viewer {VIEWER}"
    env = {"RELEVO_CONSOLE_TOKENS": tokens, "RELEVO_TEST_KEY": KEY}
    with console_process(fleet_config, env) as url:
        yield url


@pytest.fixture(scope="module")
def browser(console: str) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def shared() -> dict[str, Any]:
    """What one test leaves for the next (turn ids)."""
    return {}


def _turns(settings: Settings, n: int, *, stream: bool = False) -> list[TurnHandle]:
    app = make_app(settings)
    return [
        enqueue_turn(
            TurnRequest(
                tenant_id="acme",
                messages=(Message(role="user", content=f"question {i}"),),
                max_tokens=16,
                deadline_s=10,
                stream=stream,
            ),
            app=app,
        )
        for i in range(n)
    ]


def _results(handles: list[TurnHandle]) -> list[TurnResult]:
    return [h.get(timeout_s=30) for h in handles]


def _wait(driver: Any, css: str, timeout_s: float = 15.0, text: str | None = None) -> Any:
    """The element `css` selects once it is there (and, with `text`, shows exactly that)."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> Any:
        for element in d.find_elements(By.CSS_SELECTOR, css):
            if text is None or element.text == text:
                return element
        return False

    try:
        # The fleet view re-renders every poll: an element found may be gone when read.
        wait = WebDriverWait(driver, timeout_s, ignored_exceptions=[StaleElementReferenceException])
        return wait.until(found)
    except TimeoutException:
        body = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"no {css} within {timeout_s}s at {driver.current_url}: {body[:1500]}")


def _css(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def _read(driver: Any, css: str, read: Callable[[Any], T]) -> T:
    """`read` of the element `css` selects, found again if the live view replaced it."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(50):
        try:
            return read(_css(driver, css))
        except StaleElementReferenceException:  # the fleet view re-renders every poll
            time.sleep(0.05)
    return read(_css(driver, css))


def _text(driver: Any, css: str) -> str:
    return _read(driver, css, lambda element: str(element.text))


def _attr(driver: Any, css: str, name: str) -> str | None:
    return _read(driver, css, lambda element: element.get_attribute(name))


def _load_by(driver: Any, css: str) -> None:
    """Click `css` and wait until the page it loads has replaced this one."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = _css(driver, "html")
    _css(driver, css).click()
    WebDriverWait(driver, 15).until(expected_conditions.staleness_of(page))


def _tenant_rows(driver: Any) -> list[str | None]:
    """The tenants table's rows, in order."""
    _wait(driver, "#tenants")
    return _read(
        driver,
        "#tenants",
        lambda table: [r.get_attribute("data-tenant") for r in _all(table, "tbody tr")],
    )


def _all(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def _log_in(driver: Any, console: str, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{console}/login")
    _css(driver, "#token").send_keys(token)
    _css(driver, "#login").click()
    _wait(driver, "#who")


def _act(driver: Any, form_fields: dict[str, str], button: str) -> None:
    """Fill the form, press its button, then confirm on the confirmation page."""
    for css, value in form_fields.items():
        field = _css(driver, css)
        field.clear()
        field.send_keys(value)
    _css(driver, button).click()
    _wait(driver, "#confirm").click()
    _wait(driver, "#notice")


def _shot(driver: Any, name: str) -> None:
    where = os.environ.get("RELEVO_SCREENSHOTS")
    if where:
        driver.save_screenshot(str(Path(where) / f"console-{name}.png"))


def _post_without_csrf(driver: Any, path: str, csrf: str | None) -> int:
    """The HTTP status of a POST made from the page, as a forged form would make it."""
    script = """
        const [path, csrf, done] = arguments;
        const body = new URLSearchParams({mode: "on", reason: "forged", confirmed: "yes"});
        if (csrf !== null) body.set("csrf", csrf);
        fetch(path, {method: "POST", body, credentials: "same-origin"})
            .then(r => done(r.status), () => done(-1));
    """
    status: int = driver.execute_async_script(script, path, csrf)
    return status


def test_an_operator_logs_in_and_sees_the_primary_s_breaker_open(
    browser: Any, console: str, settings: Settings, sim: Simulator, shared: dict[str, Any]
) -> None:
    sim.reset()
    browser.get(f"{console}/")
    assert browser.current_url.endswith("/login"), "a page without a session sends to login"
    _css(browser, "#token").send_keys("not-a-token-at-all-000000000")
    _css(browser, "#login").click()
    assert "Unknown token" in _wait(browser, "#error").text
    _log_in(browser, console, OPERATOR)
    assert _attr(browser, "#who", "data-role") == "operator"
    assert not _all(browser, 'tr[data-state="open"]')

    sim.set_faults("alpha", Fault(status=500))
    results = _results(_turns(settings, 8))
    assert all(r.status is Status.OK and r.effective_model == "anthropic/beta" for r in results)
    # A turn that met the failing primary itself (later ones skip it without a call).
    shared["fell_back"] = next(
        r.turn_id for r in results if any(a.outcome == "error" for a in r.attempts)
    )
    # The page updates itself: no reload between the outage and the open breaker.
    row = _wait(browser, 'tr[data-scope="model:openai/alpha@oa"][data-state="open"]')
    assert "open" in row.text


def test_the_kill_switch_stops_every_provider_call(
    browser: Any, console: str, settings: Settings, sim: Simulator, shared: dict[str, Any]
) -> None:
    _act(browser, {"#kill-reason": "provider incident"}, "#kill-on")
    _wait(browser, '#kill[data-on="1"]')
    assert "provider incident" in _text(browser, "#kill")
    calls = sim.calls()
    results = _results(_turns(settings, 3))
    assert [r.status for r in results] == [Status.REJECTED] * 3
    assert sim.calls() == calls, "a provider call arrived while the kill switch was on"
    _wait(browser, "#held", text="3")
    assert "8 of 8 turns" in _text(browser, "#fallback"), "rejected turns are not counted"
    assert _attr(browser, "#fallback", "data-alerting") == "1"
    _shot(browser, "fleet")
    shared["held"] = [r.turn_id for r in results]


def test_switched_off_the_held_turns_replay(
    browser: Any, console: str, settings: Settings, sim: Simulator, shared: dict[str, Any]
) -> None:
    sim.set_faults("alpha")  # healthy again; its breaker is still open
    _act(browser, {"#kill-reason": "incident over"}, "#kill-off")
    _wait(browser, '#kill[data-on="0"]')
    _act(browser, {"#replay-reason": "run what was held"}, "#replay")
    deadline = time.monotonic() + 30
    app = make_app(settings)
    while True:
        done = [TurnHandle(t, app.AsyncResult(t)).get(timeout_s=5) for t in shared["held"]]
        if all(r.status is Status.OK for r in done):
            break
        assert time.monotonic() < deadline, [r.status for r in done]
        time.sleep(0.3)
    _wait(browser, "#held", text="0")
    audit = _text(browser, "#audit")
    for action in ("kill_switch.on", "kill_switch.off", "replay_held"):
        assert action in audit
    assert "alice" in audit
    assert "provider incident" in audit


def test_a_turn_s_attempts_are_on_its_timeline(
    browser: Any, console: str, settings: Settings, shared: dict[str, Any]
) -> None:
    browser.get(f"{console}/turns")
    _css(browser, "#turn-id").send_keys(shared["fell_back"])
    _css(browser, "#lookup").click()
    status = _wait(browser, "#turn-status")
    assert status.get_attribute("data-status") == "ok"
    assert "anthropic/beta" in _text(browser, "#effective")
    outcomes = [row.get_attribute("data-outcome") for row in _all(browser, "#attempts tbody tr")]
    assert outcomes[-1] == "ok"
    assert {"error", "skipped"} & set(outcomes[:-1]), outcomes
    bars = _all(browser, "#attempts .bar")
    assert len(bars) == len(outcomes)
    assert all(bar.size["width"] > 0 for bar in bars), "the script placed every bar"
    _shot(browser, "turn")

    (streamed,) = _results(_turns(settings, 1, stream=True))
    browser.get(f"{console}/turns?id={streamed.turn_id}")  # waits for the page, unlike a click
    _wait(browser, '#turn-status[data-status="ok"]')
    assert _text(browser, "#streamed") == streamed.reply.text  # type: ignore[union-attr]
    answered = _css(browser, '#attempts tr[data-outcome="ok"]')
    assert _css(answered, ".first-byte").text.endswith(" ms"), "first content is on the timeline"
    assert _all(answered, ".fb"), "and marked on its bar"


def test_tenants_are_sorted_searched_and_given_limits(browser: Any, console: str) -> None:
    browser.get(f"{console}/tenants")
    _act(
        browser,
        {"#limits-tenant": "globex", "#limits-daily": "5", "#limits-monthly": "100"}
        | {"#limits-reason": "new contract"},
        "#limits-set",
    )
    tenants = _tenant_rows(browser)
    assert {"acme", "globex"} <= set(tenants)
    _load_by(browser, 'a[data-sort="tenant"]')
    tenants = _tenant_rows(browser)
    assert tenants == sorted(tenants, reverse=True)
    _css(browser, "#q").send_keys("glo")
    _load_by(browser, "#search")
    tenants = _tenant_rows(browser)
    assert tenants == ["globex"]
    assert "$5.00" in _text(browser, 'tr[data-tenant="globex"]')
    browser.get(f"{console}/tenants")
    _shot(browser, "tenants")


def test_an_action_without_its_csrf_token_is_refused(browser: Any, console: str) -> None:
    browser.get(f"{console}/")
    assert _post_without_csrf(browser, "/act/kill_switch", None) == 403
    assert _post_without_csrf(browser, "/act/kill_switch", "wrong") == 403
    browser.get(f"{console}/")
    assert _attr(browser, "#kill", "data-on") == "0"


def test_a_viewer_sees_but_cannot_act(browser: Any, console: str) -> None:
    _log_in(browser, console, VIEWER)
    assert _attr(browser, "#who", "data-role") == "viewer"
    _wait(browser, "#breakers")
    assert not _all(browser, "#actions"), "a viewer is shown no action"
    csrf = _attr(browser, 'form.who input[name="csrf"]', "value")
    assert _post_without_csrf(browser, "/act/kill_switch", csrf) == 403
    browser.get(f"{console}/")
    assert _attr(browser, "#kill", "data-on") == "0"
