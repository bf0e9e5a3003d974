"""The shared state on a Redis Cluster of three primaries: the fleet tests of breakers,
budgets and the kill switch run there, and the guard's turns spread tenants over the nodes.

Every script touches one slot (a breaker script the namespace's, a budget script one
tenant's); a slot a script's keys did not share would fail with CROSSSLOT here.
"""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.cluster import RedisCluster

from budgets import Ledger
from tests import clusterkit
from tests import test_breakers_fleet as fleet
from tests import test_budgets_redis as budget_fleet
from worker.adapters import make_client
from worker.demo.run import demo_settings
from worker.guard.redis_guard import open_guard
from worker.settings import BreakerSettings, RedisSettings
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Message, TurnRequest

pytestmark = pytest.mark.slow


def test_the_half_open_herd_sends_one_probe_on_a_cluster(
    redis_cluster: str, namespace: str
) -> None:
    fleet.test_half_open_herd_sends_exactly_one_probe_per_break(redis_cluster, namespace)


def test_one_opened_transition_for_the_fleet_on_a_cluster(
    redis_cluster: str, namespace: str
) -> None:
    fleet.test_one_opened_transition_for_the_whole_fleet(redis_cluster, namespace)


def test_the_kill_switch_is_seen_by_every_process_on_a_cluster(
    redis_cluster: str, namespace: str
) -> None:
    fleet.test_kill_switch_is_seen_by_every_process(redis_cluster, namespace)


async def test_concurrent_turns_never_settle_past_a_limit_on_a_cluster(
    redis_cluster: str, namespace: str
) -> None:
    client = clusterkit.client(redis_cluster, decode_responses=True)
    try:
        await budget_fleet.test_200_concurrent_turns_from_4_processes_never_settle_past_the_limit(
            client, redis_cluster, namespace
        )
        await budget_fleet.clean(client, namespace)
        await budget_fleet.test_a_charge_delivered_by_4_processes_at_once_is_charged_once(
            client, redis_cluster, namespace
        )
    finally:
        await budget_fleet.clean(client, namespace)
        await client.aclose()


async def test_the_guard_spreads_tenants_over_the_nodes(
    sim: Simulator, redis_cluster: str, namespace: str
) -> None:
    sim.reset()
    base = demo_settings(sim.url)
    settings = base.model_copy(
        update={
            "redis": RedisSettings(namespace=namespace, shared_url=redis_cluster, timeout_s=2),
            "breakers": BreakerSettings(min_calls_in_window=10**6),
        }
    )
    guard = open_guard(settings)
    tenants = [f"tenant{i}" for i in range(12)]
    async with make_client() as http:
        chain = Chain.from_settings(settings, http, guard=guard)

        async def turn(tenant: str) -> tuple[str, int]:
            request = TurnRequest(tenant_id=tenant, messages=(Message(role="user", content="hi"),))
            result = await chain.run(request)
            return result.status, result.step

        assert await asyncio.gather(*(turn(t) for t in tenants)) == [("ok", 0)] * len(tenants)
        sim.set_faults("claude-sim", Fault(status=529))  # the primary: every turn falls back
        assert await asyncio.gather(*(turn(t) for t in tenants)) == [("ok", 1)] * len(tenants)
    # A script refused by the cluster (CROSSSLOT) would have cost the fleet view or budgets.
    assert guard.circuits.fleet_view
    assert guard.budgets_reachable
    await guard.aclose()

    client = clusterkit.client(redis_cluster, decode_responses=True)
    assert isinstance(client, RedisCluster)
    try:
        ledger = Ledger(client, namespace=namespace)
        assert await ledger.tenants() == sorted(tenants)
        spent = [(await ledger.report(t)).day.spent_micros for t in tenants]
        assert all(micros > 0 for micros in spent)
        nodes = {client.get_node_from_key(ledger.keys.limits(t)).name for t in tenants}
        assert len(nodes) > 1  # twelve tenants, three primaries
    finally:
        await budget_fleet.clean(client, namespace)
        await client.aclose()
