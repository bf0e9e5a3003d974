"""An incident in Chromium: from the fleet page's counts to the recent turns, filtered;
a breaker opened and closed again from its own row, which stays put while one types.

The stored turns and a worker's heartbeat are written straight to Redis, as workers
write them. RELEVO_SCREENSHOTS=DIR keeps the recent turns and the fleet page's
breakers and workers as PNG files there.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

import breakers
from tests.chainkit import KEY, worker_config
from tests.consolekit import chromium, console_process
from tests.test_console_browser import _all, _css, _shot, _text, _wait
from tests.test_console_incident import TURNS
from worker.fleet.heartbeat import Heartbeat, beat
from worker.fleet.turnstore import TurnKeys, TurnStore

pytestmark = pytest.mark.slow

OPERATOR = "Wq3z-operator-Hn8cYp2LtV6xKd"


async def _beat(redis_url: str, namespace: str) -> None:
    """Two processes of node-a say they live (a worker does every few seconds)."""
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        now_ms = int(time.time() * 1000)
        for pid, in_flight in ((4101, 2), (4102, 1)):
            await beat(
                client,
                TurnKeys(namespace),
                Heartbeat(
                    host="node-a",
                    pid=pid,
                    version="0.1.0",
                    in_flight=in_flight,
                    local_breakers=False,
                    started_ms=now_ms - 3_600_000,
                ),
            )
    finally:
        await client.aclose()


async def _arrange(redis_url: str, namespace: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        turns = TurnStore(client, namespace=namespace)
        for result in TURNS:
            await turns.save(result)
        await client.lpush(namespace, "waiting-1", "waiting-2", "waiting-3")
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def namespace() -> str:
    return f"relevo-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def console(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    asyncio.run(_arrange(redis_url, namespace))
    config: Path = tmp_path_factory.mktemp("incident") / "chain.toml"
    sections = "[console]\npoll_interval_s = 0.5\n"
    config.write_text(
        worker_config(
            sim="http://127.0.0.1:9", redis_url=redis_url, namespace=namespace, sections=sections
        )
    )
    env = {"RELEVO_CONSOLE_TOKENS": f"alice operator {OPERATOR}", "RELEVO_TEST_KEY": KEY}
    with console_process(config, env) as url:
        yield url


@pytest.fixture(scope="module")
def browser(console: str) -> Iterator[Any]:
    with chromium() as driver:
        driver.get(f"{console}/login")
        _css(driver, "#token").send_keys(OPERATOR)
        _css(driver, "#login").click()
        _wait(driver, "#who")
        yield driver


def _shown_turns(driver: Any) -> list[str]:
    _wait(driver, "#recent")
    return [row.get_attribute("data-turn") for row in _all(driver, "#recent tbody tr[data-turn]")]


def test_the_degraded_count_leads_to_those_turns_and_the_filter_narrows_them(
    browser: Any, console: str
) -> None:
    browser.get(f"{console}/")
    _wait(browser, "#degraded-link", text="1 degraded").click()
    assert browser.current_url.endswith("/recent?status=degraded")
    assert _shown_turns(browser) == ["t-degraded"]
    from selenium.webdriver.support.ui import Select

    Select(_css(browser, "#f-status")).select_by_value("")
    _css(browser, "#f-tenant").send_keys("acme")
    _css(browser, "#f-apply").click()
    _wait(browser, "#recent-count", text=None)
    assert sorted(_shown_turns(browser)) == ["t-failed", "t-fellback", "t-plain"]
    _css(browser, "#f-fell-back").click()
    _css(browser, "#f-apply").click()
    _wait(browser, "#f-fell-back:checked")
    assert _shown_turns(browser) == ["t-fellback"]
    assert "1 of the 4 turns" in _text(browser, "#recent-count")
    browser.get(f"{console}/recent")
    _shot(browser, "recent")


def _row(scope: str) -> str:
    return f'#breakers tr[data-scope="{scope}"]'


async def _reset(redis_url: str, namespace: str, scope: str) -> None:
    """Forget the scope: a run of the test before this one (a rerun) may have left it open."""
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        store = breakers.FleetBreakers(client, namespace=namespace, scopes=[scope])
        await breakers.Operators(store).reset(scope)
    finally:
        await client.aclose()


def test_a_breaker_opens_and_closes_from_its_own_row(
    browser: Any, console: str, redis_url: str, namespace: str
) -> None:
    from selenium.webdriver.common.keys import Keys

    asyncio.run(_reset(redis_url, namespace, "vendor:openai"))
    browser.get(f"{console}/")
    _wait(browser, "#breakers tbody tr[data-state]")
    scope = "vendor:openai"
    assert _css(browser, _row(scope)).get_attribute("data-state") == "closed"
    reason = _css(browser, f"{_row(scope)} input[name=reason]")
    reason.send_keys("primary melting")
    time.sleep(1.5)  # three polls: the row being typed in is not swapped away
    field = _css(browser, f"{_row(scope)} input[name=reason]")
    assert field.get_attribute("value") == "primary melting"
    field.send_keys(Keys.ENTER)
    _wait(browser, "#confirm")
    assert _text(browser, "#summary").startswith(f"Open breaker {scope}")
    assert "closed" in _text(browser, "#now")
    _css(browser, "#confirm").click()
    _wait(browser, "#notice")
    # Open now, so first in the table, with a Close button of its own.
    _wait(browser, f'#breakers tbody tr:first-child[data-scope="{scope}"][data-state="open"]')
    assert "overloaded" in _text(browser, f"{_row(scope)} td.errors")
    _shot(browser, "fleet-breakers")
    _css(browser, f"{_row(scope)} input[name=reason]").send_keys("recovered", Keys.ENTER)
    _wait(browser, "#confirm")
    assert _text(browser, "#summary").startswith(f"Close breaker {scope}")
    _css(browser, "#confirm").click()
    _wait(browser, "#notice")
    _wait(browser, f'{_row(scope)}[data-state="closed"]')


def test_the_workers_and_the_queue_are_on_the_fleet_page(
    browser: Any, console: str, redis_url: str, namespace: str
) -> None:
    asyncio.run(_beat(redis_url, namespace))
    browser.get(f"{console}/")
    row = _wait(browser, '#workers tr[data-host="node-a"]')
    assert "2 of 2" in row.text
    assert _text(browser, "#queued") == "3"
    assert "3 turns in flight" in _text(browser, "#workers-card")
