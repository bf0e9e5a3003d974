"""What an operator sees and clicks, in Chromium, on a console whose Redis can go away.

No workers: a private redis-server the test stops and starts again. A login returns to
the page asked for; Enter in a "why" field asks for the safe action, and the
confirmation shows the state now beside the state after; an empty fallback cap keeps
the cap; with Redis stopped the live page says so and since when, the reloaded page
retries, and both recover when Redis answers again. RELEVO_SCREENSHOTS=DIR keeps the
confirmation and the banner as PNG files there.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.chainkit import KEY, worker_config
from tests.conftest import skip_unless_ci
from tests.consolekit import chromium, console_process
from tests.netkit import free_port
from tests.test_console_browser import _css, _log_in, _shot, _text, _wait

pytestmark = pytest.mark.slow

OPERATOR = "Jk7p-operator-Rt2vXq9ZmB4wLc"


class _Redis:
    """A redis-server of the test's own, on one port, that it stops and starts."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            skip_unless_ci("no redis-server binary")
        self.binary = str(binary)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with redis.Redis.from_url(self.url, socket_timeout=0.2) as r:
                    r.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        pytest.fail("redis-server did not answer")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture(scope="module")
def store() -> Iterator[_Redis]:
    server = _Redis()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def console(store: _Redis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("ui") / "chain.toml"
    sections = "[console]\npoll_interval_s = 0.5\n"
    config.write_text(
        worker_config(
            sim="http://127.0.0.1:9", redis_url=store.url, namespace="relevo-ui", sections=sections
        )
    )
    env = {"RELEVO_CONSOLE_TOKENS": f"alice operator {OPERATOR}", "RELEVO_TEST_KEY": KEY}
    with console_process(config, env) as url:
        yield url


@pytest.fixture(scope="module")
def browser(console: str) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_a_login_returns_to_the_page_asked_for(browser: Any, console: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{console}/tenants?q=acme")
    assert "/login" in browser.current_url
    _css(browser, "#token").send_keys(OPERATOR)
    _css(browser, "#login").click()
    _wait(browser, "#tenants")
    assert browser.current_url.endswith("/tenants?q=acme")


def test_enter_in_a_why_field_asks_for_the_safe_action(browser: Any, console: str) -> None:
    from selenium.webdriver.common.keys import Keys

    _log_in(browser, console, OPERATOR)
    browser.get(f"{console}/")
    _css(browser, "#kill-reason").send_keys("checking", Keys.ENTER)
    _wait(browser, "#confirm")
    assert _text(browser, "#summary") == "Turn the kill switch OFF: turns run again"
    assert _text(browser, "#now") == "kill switch off"


def test_the_confirmation_shows_now_and_after_and_keeps_an_empty_cap(
    browser: Any, console: str
) -> None:
    _log_in(browser, console, OPERATOR)
    browser.get(f"{console}/tenants")
    fields = {"#limits-tenant": "acme", "#limits-daily": "5", "#limits-monthly": "50"}
    for css, value in {**fields, "#limits-cap": "1", "#limits-reason": "contract"}.items():
        _css(browser, css).send_keys(value)
    _css(browser, "#limits-set").click()
    assert "check the id" in _wait(browser, ".warning").text, "a tenant never seen is warned of"
    _css(browser, "#confirm").click()
    _wait(browser, "#notice")
    for css, value in {**fields, "#limits-daily": "8", "#limits-reason": "raise"}.items():
        _css(browser, css).clear()
        _css(browser, css).send_keys(value)
    _css(browser, "#limits-set").click()
    _wait(browser, "#confirm")
    assert "daily $5.00, monthly $50.00, fallback cap $1.00" in _text(browser, "#now")
    assert "daily $8.00, monthly $50.00, fallback cap $1.00" in _text(browser, "#after")
    _shot(browser, "confirm")


def test_with_redis_gone_the_page_says_so_and_recovers(
    browser: Any, console: str, store: _Redis
) -> None:
    _log_in(browser, console, OPERATOR)
    browser.get(f"{console}/")
    _wait(browser, "#breakers")
    banner = _css(browser, "#stale-banner")
    assert not banner.is_displayed()
    store.stop()
    try:
        _wait(browser, "#stale-banner:not([hidden])")
        assert "Redis does not answer" in _text(browser, "#stale-banner")
        assert "Showing the data of" in _text(browser, "#stale-banner")
        _shot(browser, "redis-down")
        browser.get(f"{console}/")  # a reload meets the 503 page, which tries again
        assert "Redis did not answer" in _wait(browser, "#error").text
        _wait(browser, "#retry")
    finally:
        store.start()
    _wait(browser, "#breakers", timeout_s=20)  # the error page reloaded itself
    _wait(browser, "#stale-banner[hidden]")
