"""The confirmation page: the state now beside the state after, and no silent change.

An empty fallback cap keeps the tenant's cap (removing one takes the explicit box); a
breaker scope the chain does not have is refused before the confirmation, leaving no
line in the audit trail; limits for a tenant never seen carry a warning.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import breakers
import budgets
from tests.consolekit import console_config, http_console, log_in
from tests.test_console_defences import OPERATOR, TOKENS
from worker.fleet.audit import AuditTrail
from worker.fleet.heartbeat import Heartbeat, beat
from worker.fleet.turnstore import TurnKeys


@pytest.fixture
async def client(
    redis_url: str, namespace: str, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    config = console_config(tmp_path, redis_url, namespace)
    async with http_console(config, redis_url, TOKENS) as http:
        yield http


@pytest.fixture
async def ledger(redis_url: str, namespace: str) -> AsyncIterator[budgets.Ledger]:
    client = breakers.connect(redis_url, timeout_s=2)
    yield budgets.Ledger(client, namespace=namespace)
    await client.aclose()


async def test_an_empty_cap_keeps_the_cap_and_the_page_shows_now_and_after(
    client: httpx.AsyncClient, ledger: budgets.Ledger
) -> None:
    await ledger.set_limits("acme", 5_000_000, 100_000_000, 1_000_000)
    csrf = await log_in(client, OPERATOR)
    form = {"tenant": "acme", "daily": "8", "monthly": "100", "reason": "raise", "csrf": csrf}
    page = await client.post("/act/limits", data=form)
    assert page.status_code == 200
    assert "daily $5.00, monthly $100.00, fallback cap $1.00" in page.text  # now
    assert "daily $8.00, monthly $100.00, fallback cap $1.00" in page.text  # after
    assert "check the id" not in page.text
    assert (await client.post("/act/limits", data={**form, "confirmed": "yes"})).status_code == 303
    limits = (await ledger.report("acme")).limits
    assert (limits.daily_micros, limits.fallback_cap_micros) == (8_000_000, 1_000_000)
    removed = {**form, "remove_cap": "yes", "confirmed": "yes"}
    assert (await client.post("/act/limits", data=removed)).status_code == 303
    assert (await ledger.report("acme")).limits.fallback_cap_micros is None


async def test_limits_for_a_tenant_never_seen_carry_a_warning(client: httpx.AsyncClient) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"tenant": "acmee", "daily": "1", "monthly": "2", "reason": "typo?", "csrf": csrf}
    page = await client.post("/act/limits", data=form)
    assert page.status_code == 200, page.text[-600:]
    assert "no tenant &#39;acmee&#39; has limits or spend yet" in page.text


async def test_a_breaker_scope_the_chain_lacks_is_refused_before_confirming(
    client: httpx.AsyncClient, ledger: budgets.Ledger, namespace: str
) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"op": "open", "scope": "vendor:openia", "reason": "typo", "csrf": csrf}
    page = await client.post("/act/breaker", data=form)
    assert page.status_code == 400
    assert "vendor:openia" in page.text
    assert await AuditTrail(ledger._redis, namespace=namespace).latest() == []


async def test_the_breaker_confirmation_shows_its_state_now(client: httpx.AsyncClient) -> None:
    csrf = await log_in(client, OPERATOR)
    form = {"op": "open", "scope": "vendor:openai", "reason": "drill", "csrf": csrf}
    page = await client.post("/act/breaker", data=form)
    assert page.status_code == 200, page.text[-800:]
    assert 'id="now">vendor:openai: ' in page.text
    assert 'id="after">Open breaker vendor:openai until closed' in page.text


async def test_turning_the_switch_on_names_the_workers_cut_off_from_redis(
    client: httpx.AsyncClient, ledger: budgets.Ledger, namespace: str
) -> None:
    cut_off = Heartbeat(
        host="node-b", pid=7, version="x", in_flight=3, local_breakers=True, started_ms=0
    )
    await beat(ledger._redis, TurnKeys(namespace), cut_off)
    csrf = await log_in(client, OPERATOR)
    on = await client.post("/act/kill_switch", data={"mode": "on", "reason": "x", "csrf": csrf})
    assert on.status_code == 200
    assert "Warning: 1 worker process(es) could not reach Redis" in on.text
    assert "node-b:7" in on.text
    off = await client.post("/act/kill_switch", data={"mode": "off", "reason": "x", "csrf": csrf})
    assert "Warning" not in off.text
