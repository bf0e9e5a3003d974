"""Budget keys of the released layout move to the current one, on the real Redis server:
what the ledger reads afterwards, merges with new spend, processes racing, the CLI, a start."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from structlog.testing import capture_logs

from budgets import Ledger, MigrationReport, migrate_keys, old_keys_present
from budgets.migrate import APPLIED_TTL_MS, STALE_CLAIM_MS
from budgets.testing import ManualClock
from rediskit import LuaScripts
from tests import clusterkit
from tests import test_budgets_redis as budget_fleet
from tests.test_budgets_redis import SPAWN, clean, processes
from worker.fleet.startup import migrate_budget_keys
from worker.settings import RedisSettings

NOW = datetime(2026, 3, 14, 12, tzinfo=UTC)
DAY, MONTH = "2026-03-14", "2026-03"
RELEVO = [sys.executable, "-m", "worker.cli", "--log-level", "warning"]
# The fixture: a decoding client on the session's server, the namespace cleaned after.
redis = budget_fleet.redis

_MIGRATE = LuaScripts("budgets", "lua/migrate", library=False)
_CLAIM, _APPLY = _MIGRATE.bodies["claim"], _MIGRATE.bodies["apply"]


def old(ns: str, tenant: str, rest: str) -> str:
    """A key's name in the released layout."""
    return f"{{{ns}}}:budget:t:{tenant}:{rest}"


def ledger(client: Redis, ns: str) -> Ledger:
    return Ledger(client, namespace=ns, clock_ms=ManualClock(NOW))


async def write_old_tenant(client: Redis, ns: str, tenant: str, spent: int = 1_200_000) -> int:
    """What the released version left for `tenant`: limits, today's and this month's
    spend, a settled charge and a live hold. Returns how many keys."""
    limits = {"daily": 5_000_000, "monthly": 100_000_000, "fallback_cap": 1_000_000}
    await client.hset(old(ns, tenant, "limits"), mapping={**limits, "overdraft": 0})
    day = {"spent": spent, "fallback": 200_000, "fb:openai": 200_000}
    await client.hset(old(ns, tenant, f"day:{DAY}"), mapping=day)
    await client.pexpire(old(ns, tenant, f"day:{DAY}"), 3_000_000)
    await client.hset(old(ns, tenant, f"month:{MONTH}"), mapping={"spent": 30 * spent})
    await client.pexpire(old(ns, tenant, f"month:{MONTH}"), 9_000_000)
    charge = {"state": "settled", "actual": 400, "provider": "openai", "fallback": "0"}
    await client.hset(old(ns, tenant, "charge:turn-1:0"), mapping=charge)
    await client.pexpire(old(ns, tenant, "charge:turn-1:0"), 600_000)
    expiry = int(NOW.timestamp() * 1000) + 3_600_000
    await client.zadd(old(ns, tenant, "holds"), {"turn-2:0": expiry})
    await client.sadd(f"{{{ns}}}:budget:tenants", tenant)
    return 5


async def old_names(client: Redis, ns: str) -> list[str]:
    return [key async for key in client.scan_iter(match=f"{{{ns}}}:budget:t:*")]


async def test_old_keys_move_and_the_ledger_reads_limits_and_spend(
    redis: Redis, namespace: str
) -> None:
    written = await write_old_tenant(redis, namespace, "acme")
    assert await old_keys_present(redis, namespace)

    report = await migrate_keys(redis, namespace)

    assert report == MigrationReport(moved=written, tenants=1)
    assert await old_names(redis, namespace) == []
    assert not await old_keys_present(redis, namespace)
    budget = await ledger(redis, namespace).report("acme")
    assert budget.limits_source == "configured"
    assert (budget.limits.daily_micros, budget.limits.monthly_micros) == (5_000_000, 100_000_000)
    assert budget.limits.fallback_cap_micros == 1_000_000
    assert budget.day.spent_micros == 1_200_000
    assert budget.day.fallback_by_provider == {"openai": 200_000}
    assert budget.month.spent_micros == 36_000_000
    new = f"{{{namespace}/acme}}:budget:"
    assert await redis.pttl(new + "limits") == -1  # operators' data keeps no TTL
    assert 2_900_000 < await redis.pttl(new + f"day:{DAY}") <= 3_000_000
    assert (await redis.hgetall(new + "charge:turn-1:0"))["actual"] == "400"
    assert await redis.zrange(new + "holds", 0, -1) == ["turn-2:0"]
    assert budget.reserved_micros == 0  # the hold's record went with it, not a charge


async def test_a_run_after_new_spend_adds_counters_and_keeps_new_limits(
    redis: Redis, namespace: str
) -> None:
    budgets = ledger(redis, namespace)
    await write_old_tenant(redis, namespace, "acme")
    # Workers of this version ran before the migration: new spend, limits set again.
    await budgets.settle("acme", "after-upgrade:0", 500_000, provider="openai", fallback=True)
    await budgets.set_limits("acme", 7_000_000, 70_000_000)

    report = await migrate_keys(redis, namespace)

    assert (report.moved, report.merged, report.kept) == (2, 2, 1)
    assert f"{{{namespace}/acme}}:budget:limits" in report.conflicts
    after = await budgets.report("acme")
    assert after.limits.daily_micros == 7_000_000
    assert after.day.spent_micros == 1_700_000
    assert after.day.fallback_by_provider == {"openai": 700_000}
    assert after.month.spent_micros == 36_500_000
    # Twice: nothing left to move, nothing added again.
    assert (await migrate_keys(redis, namespace)).changed == 0
    assert (await budgets.report("acme")).day.spent_micros == 1_700_000


async def test_dry_run_counts_and_changes_nothing(redis: Redis, namespace: str) -> None:
    await write_old_tenant(redis, namespace, "acme")
    await redis.hset(f"{{{namespace}/acme}}:budget:day:{DAY}", "spent", 1)
    before = await snapshot(redis, namespace)

    report = await migrate_keys(redis, namespace, dry_run=True)

    assert (report.moved, report.merged, report.kept, report.dry_run) == (4, 1, 0, True)
    assert await snapshot(redis, namespace) == before


async def snapshot(client: Redis, ns: str) -> dict[str, Any]:
    shot: dict[str, Any] = {}
    for pattern in (f"{{{ns}}}:*", f"{{{ns}/*"):
        async for key in client.scan_iter(match=pattern):
            kind = await client.type(key)
            if kind == "hash":
                shot[key] = await client.hgetall(key)
            elif kind == "zset":
                shot[key] = await client.zrange(key, 0, -1, withscores=True)
            else:
                shot[key] = sorted(await client.smembers(key))
    return shot


async def test_names_that_are_no_budget_key_are_left_alone(redis: Redis, namespace: str) -> None:
    await redis.set(old(namespace, "acme", "something-else"), "x")
    await redis.set(old(namespace, "acme", "limits"), "not a hash")
    report = await migrate_keys(redis, namespace)
    assert (report.changed, report.skipped) == (0, 2)
    assert await redis.get(old(namespace, "acme", "limits")) == "not a hash"
    assert await redis.scard(f"{{{namespace}}}:budget:migrating") == 0


async def test_a_run_stopped_midway_is_finished_once(redis: Redis, namespace: str) -> None:
    await write_old_tenant(redis, namespace, "acme")
    await redis.hset(f"{{{namespace}/acme}}:budget:day:{DAY}", "spent", 1)
    claims = f"{{{namespace}}}:budget:migrating"
    dead = f"{claims}:{int(NOW.timestamp() * 1000) - STALE_CLAIM_MS}.dead.0:acme"
    # Stopped after writing the day's counters, before releasing its claim ...
    day = await redis.eval(
        _CLAIM, 3, old(namespace, "acme", f"day:{DAY}"), dead + f":day:{DAY}", claims
    )
    applied = f"{{{namespace}/acme}}:budget:migrated"
    args = [dead + f":day:{DAY}", APPLIED_TTL_MS, "merge", "hash", day[1], *day[2]]
    assert (
        await redis.eval(_APPLY, 2, f"{{{namespace}/acme}}:budget:day:{DAY}", applied, *args)
        == "merged"
    )
    # ... and after claiming the limits, before writing them.
    await redis.eval(_CLAIM, 3, old(namespace, "acme", "limits"), dead + ":limits", claims)

    report = await migrate_keys(redis, namespace)

    assert (report.moved, report.merged) == (4, 0)
    budget = await ledger(redis, namespace).report("acme")
    assert budget.day.spent_micros == 1_200_001
    assert budget.limits.daily_micros == 5_000_000
    assert await redis.scard(claims) == 0
    assert [key async for key in redis.scan_iter(match=f"{claims}:*")] == []


# --- several processes at once ------------------------------------------------------------

TENANTS = 12


def _child(url: str, ns: str, start: Any, out: Any) -> None:
    async def run() -> dict[str, Any]:
        client = clusterkit.client(url)
        try:
            start.wait(timeout=30)
            report = await migrate_keys(client, ns, batch=4)
        finally:
            await client.aclose()
        return {"moved": report.moved, "merged": report.merged, "kept": report.kept}

    out.put(asyncio.run(run()))


async def migrate_from_processes(client: Redis, url: str, ns: str, count: int) -> None:
    """Old keys of 12 tenants, half with spend of this version already; `count` processes
    migrate at once: every key moves once and every counter is added once."""
    budgets = ledger(client, ns)
    written = 0
    for index in range(TENANTS):
        written += await write_old_tenant(client, ns, f"t{index}", spent=1000 * (index + 1))
        if index % 2:
            await budgets.settle(f"t{index}", "new:0", 7, provider="openai")
    start, out = SPAWN.Event(), SPAWN.Queue()
    with processes(_child, [(url, ns, start, out) for _ in range(count)]):
        start.set()
        reports = [out.get(timeout=60) for _ in range(count)]
    assert sum(r["moved"] + r["merged"] + r["kept"] for r in reports) == written
    assert sum(r["merged"] for r in reports) == TENANTS  # the day and month of half of them
    for index in range(TENANTS):
        budget = await budgets.report(f"t{index}")
        extra = 7 if index % 2 else 0
        assert budget.day.spent_micros == 1000 * (index + 1) + extra
        assert budget.month.spent_micros == 30_000 * (index + 1) + extra
        assert budget.limits.daily_micros == 5_000_000
    assert await old_names(client, ns) == []


@pytest.mark.parametrize("count", [2, 4])
async def test_processes_migrating_at_once_add_nothing_twice(
    redis: Redis, redis_url: str, namespace: str, count: int
) -> None:
    await migrate_from_processes(redis, redis_url, namespace, count)


@pytest.mark.slow
async def test_old_keys_move_from_the_namespace_slot_to_the_tenants_nodes(
    redis_cluster: str, namespace: str
) -> None:
    client = clusterkit.client(redis_cluster, decode_responses=True)
    try:
        await migrate_from_processes(client, redis_cluster, namespace, 4)
        assert isinstance(client, RedisCluster)
        home = client.get_node_from_key(f"{{{namespace}}}:budget:tenants").name
        nodes = {
            client.get_node_from_key(f"{{{namespace}/t{i}}}:budget:limits").name
            for i in range(TENANTS)
        }
        assert nodes - {home}, "every tenant's slot on the namespace's node"
    finally:
        await clean(client, namespace)
        await client.aclose()


# --- the CLI and the worker's start -------------------------------------------------------


def relevo(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RELEVO, "budgets", "migrate", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_cli_previews_then_moves(
    redis: Redis, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    await write_old_tenant(redis, namespace, "acme")
    config = tmp_path / "ops.toml"
    config.write_text(f'[redis]\nurl = "{redis_url}"\nnamespace = "{namespace}"\n')

    preview = await asyncio.to_thread(relevo, config, "--dry-run")
    assert preview.returncode == 0, preview.stderr
    assert preview.stdout.startswith("Would move 5 budget key(s) of 1 tenant(s)")
    assert len(await old_names(redis, namespace)) == 5

    done = await asyncio.to_thread(relevo, config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Moved 5 budget key(s) of 1 tenant(s)")
    assert (await ledger(redis, namespace).report("acme")).day.spent_micros == 1_200_000

    again = await asyncio.to_thread(relevo, config, "--json")
    assert json.loads(again.stdout)["changed"] == 0


async def test_a_worker_start_migrates_once_and_logs_the_counts(
    redis: Redis, redis_url: str, namespace: str
) -> None:
    await write_old_tenant(redis, namespace, "acme")
    where = RedisSettings(url=redis_url, namespace=namespace)
    with capture_logs() as logs:
        first = await asyncio.to_thread(migrate_budget_keys, where)
        second = await asyncio.to_thread(migrate_budget_keys, where)
    assert first is not None
    assert first.moved == 5
    assert second is None  # the few EXISTS found nothing: no scan
    assert [line["event"] for line in logs] == ["budgets.keys_migrated"]
    assert (logs[0]["moved"], logs[0]["tenants"]) == (5, 1)


def test_a_store_that_does_not_answer_does_not_stop_the_start() -> None:
    from tests.netkit import free_port

    where = RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    with capture_logs() as logs:
        assert migrate_budget_keys(where) is None
    assert logs == [
        {"event": "budgets.keys_not_migrated", "error": "ConnectionError", "log_level": "warning"}
    ]
