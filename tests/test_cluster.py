"""The shared state on a Redis Cluster of three primaries: the fleet tests of breakers,
budgets and the kill switch run there, and the guard's turns spread tenants over the nodes.

Every script touches one slot (a breaker script the namespace's, a budget script one
tenant's); a slot a script's keys did not share would fail with CROSSSLOT here.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from breakers import FleetBreakers, KillSwitch, ResilientBreakers, connect
from breakers.keys import Keys
from budgets import Ledger
from tests import clusterkit
from tests import test_breakers_fleet as fleet
from tests import test_budgets_redis as budget_fleet
from tests.conftest import skip_unless_ci
from worker.adapters import make_client
from worker.demo.run import demo_settings
from worker.guard.redis_guard import open_guard
from worker.settings import BreakerSettings, RedisSettings
from worker.simulator import Fault, Simulator
from worker.turn.chain import Chain
from worker.types import Message, TurnRequest

pytestmark = pytest.mark.slow

SCOPE = "vendor:openai"
LOOK_S = 0.3
TIMEOUT_S = 0.25


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


@pytest.mark.redis  # a cluster of its own: one of its primaries is killed
async def test_a_stale_on_rejects_nothing_when_the_namespace_s_primary_dies(
    tmp_path: Path, namespace: str
) -> None:
    """The switch was on at the worker's last turn and is off since: killing the primary
    that holds the namespace's slot leaves the worker with the switch as last looked at."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        skip_unless_ci("no redis-server and redis-cli to start a Redis Cluster")
    cluster = clusterkit.Cluster(tmp_path)
    cluster.start()
    client = connect(cluster.url, timeout_s=TIMEOUT_S)
    operator = clusterkit.client(cluster.url)
    worker = ResilientBreakers(
        FleetBreakers(client, namespace=namespace), timeout_s=TIMEOUT_S, rejoin_check_s=LOOK_S
    )
    switch = KillSwitch(operator, namespace=namespace)
    try:
        await switch.on("alice", "incident 6")
        assert (await worker.check([SCOPE])).kill_switch is not None
        await switch.off("alice")
        await asyncio.sleep(3 * LOOK_S)  # no turn: the worker's timer looked
        assert isinstance(operator, RedisCluster)
        holder = operator.get_node_from_key(Keys(namespace).kill)
        cluster.processes[cluster.ports.index(int(holder.port))].kill()
        state = await worker.check([SCOPE])
        assert not state.fleet_view
        assert state.kill_switch is None
    finally:
        worker.close()
        await client.aclose()
        await operator.aclose()
        cluster.stop()
