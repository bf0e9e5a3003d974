"""Many tenants in a namespace of their own: limits for each, one near its budget, and
the namespace forgotten afterwards (tests/test_exporter_scale.py, bench/exporter_scale.py)."""

from __future__ import annotations

import redis.asyncio

import budgets

NEAR = "tenant-near"  # the one tenant at 95 % of its daily budget
DAILY_MICROS = 1_000_000
MONTHLY_MICROS = 10_000_000
_BATCH = 1000


async def add_tenants(url: str, namespace: str, count: int) -> None:
    """`count` tenants with limits (`tenant-00000`…, and `NEAR`, which spent 95 % of its
    day): written as `Ledger.set_limits` writes them, a thousand per round trip."""
    client = redis.asyncio.Redis.from_url(url)
    ledger = budgets.Ledger(client, namespace=namespace)
    keys = ledger.keys
    names = [f"tenant-{i:05d}" for i in range(count - 1)]
    try:
        for start in range(0, len(names), _BATCH):
            batch = names[start : start + _BATCH]
            pipe = client.pipeline(transaction=False)
            pipe.sadd(keys.tenants(), *batch)
            for tenant in batch:
                limits = {"daily": DAILY_MICROS, "monthly": MONTHLY_MICROS, "overdraft": 0}
                pipe.hset(keys.limits(tenant), mapping=limits)
            await pipe.execute()
        await ledger.set_limits(NEAR, DAILY_MICROS, MONTHLY_MICROS)
        spent = DAILY_MICROS * 95 // 100
        await ledger.reserve(NEAR, "c1", provider="oa", micros=spent, fallback=False, ttl_s=60)
        await ledger.settle(NEAR, "c1", spent, provider="oa")
    finally:
        await client.aclose()


async def forget_namespace(url: str, namespace: str) -> None:
    """Delete every key of `namespace` (its hash-tagged keys and its queue)."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        for pattern in (f"{{{namespace}}}:*", f"{{{namespace}/*}}:*", f"{namespace}:*"):
            batch = [k async for k in client.scan_iter(match=pattern, count=1000)]
            for start in range(0, len(batch), _BATCH):
                await client.delete(*batch[start : start + _BATCH])
        await client.delete(namespace)
    finally:
        await client.aclose()
