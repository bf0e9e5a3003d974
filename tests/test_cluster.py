"""The shared state on a Redis Cluster of three primaries: the fleet tests of breakers,
budgets and the kill switch run there, and the guard's turns spread tenants over the nodes.

Every script touches one slot (a breaker script the namespace's, a budget script one
tenant's); a slot a script's keys did not share would fail with CROSSSLOT here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncCluster

from breakers import FleetBreakers, KillSwitch, ResilientBreakers, connect
from breakers.keys import Keys
from budgets import Ledger, Share
from tests import clusterkit
from tests import test_breakers_fleet as fleet
from tests import test_budgets_redis as budget_fleet
from tests.chainkit import KEY, settings, turn
from tests.conftest import skip_unless_ci
from worker.adapters import make_client
from worker.demo.run import demo_settings
from worker.fleet.fairqueue import FairQueue, enqueue_sync
from worker.fleet.runner import TurnRunner
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
    # Tenant ids as platforms write them among them: each keeps to its own slot too.
    platforms = ["org:1234", "team/42", "user+eu@example.com", "arn:aws:iam::1:root"]
    tenants = [f"tenant{i}" for i in range(8)] + platforms
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


async def test_each_fair_queue_script_touches_one_slot_on_a_cluster(
    redis_cluster: str, namespace: str
) -> None:
    """Enqueue, a round with leases given back, a release and the load, run on the cluster:
    every key is under the namespace's tag (the broker's queue too, here: on the broker's
    server it needs none, docs/fairness.md)."""
    client = clusterkit.client(redis_cluster)
    sync = SyncCluster.from_url(redis_cluster.replace("+cluster://", "://", 1))
    fair = FairQueue(client, namespace=namespace, queue=f"{{{namespace}}}:q")
    try:
        await fair.shares.set("capped", Share(max_in_flight=1))
        for tenant, turn in (("capped", "c1"), ("capped", "c2"), ("other", "o1")):
            assert enqueue_sync(
                sync,
                namespace,
                tenant=tenant,
                turn_id=turn,
                deadline_ms=60_000,
                input_tokens=1,
                message=f"m:{tenant}:{turn}",
            )
        first = await fair.dispatch(most=10, depth=10)
        assert sorted(t for t, _ in first.moved) == ["capped", "other"]
        assert first.held == [("capped", "max_in_flight")]
        second = await fair.dispatch(most=10, depth=10, released=[("capped", "c1")])
        assert [t for t, _ in second.moved] == ["capped"]
        assert await fair.release("capped", "c2")
        assert {x.tenant: (x.queued, x.in_flight) for x in await fair.load()} == {
            "capped": (0, 0),
            "other": (0, 1),
        }
    finally:
        await budget_fleet.clean(client, namespace)
        await client.aclose()
        sync.close()


def test_fair_dispatch_with_the_shared_state_on_a_cluster(
    sim: Simulator, redis_url: str, redis_cluster: str, namespace: str
) -> None:
    """A worker whose breakers, budgets and kill switch are on a cluster dispatches from
    the fair queue on the broker's Redis: a tenant capped at 2 gets a third turn once a
    turn it ran concludes (its lease given back through the dispatcher's round); with the
    switch turned on over the cluster, its queued turns drain past the cap."""
    os.environ.setdefault("RELEVO_TEST_KEY", KEY)
    where = {"url": redis_url, "shared_url": redis_cluster, "namespace": namespace}
    config = settings(sim.url, redis=where, fairness={"queue_depth": 10})
    runner = TurnRunner(config)
    broker = redis.Redis.from_url(redis_url)
    shared = clusterkit.client(redis_cluster)
    queue = config.worker.queue

    def put(n: int) -> list[TurnRequest]:
        requests = [turn().model_copy(update={"tenant_id": "capped"}) for _ in range(n)]
        for request in requests:
            enqueue_sync(
                broker,
                namespace,
                tenant="capped",
                turn_id=request.turn_id,
                deadline_ms=60_000,
                input_tokens=10,
                message=request.model_dump_json(),
            )
        return requests

    def taken(timeout_s: float) -> TurnRequest | None:
        raw = broker.brpop([queue], timeout=timeout_s)
        return None if raw is None else TurnRequest.model_validate_json(raw[1])

    try:
        runner.loop.run(runner.process.fair.shares.set("capped", Share(max_in_flight=2)))
        put(4)
        runner.process.start_dispatcher()
        first = [taken(5), taken(5)]
        assert None not in first
        assert taken(0.5) is None  # two running: the cap holds
        assert runner.answer(first[0].model_dump(mode="json"))["status"] == "ok"  # type: ignore[union-attr]
        assert taken(5) is not None  # its lease given back: the third goes
        runner.loop.run(KillSwitch(shared, namespace=namespace).on("alice", "drill"))
        assert taken(5) is not None  # the fourth: drained, past the cap
        put(3)
        assert all(taken(5) is not None for _ in range(3))  # drained, past the cap
        running = int(broker.hget(runner.process.fair.keys.key("inflight"), "capped") or 0)
        assert running == 6  # every lease still counted
    finally:
        runner.loop.run(KillSwitch(shared, namespace=namespace).off("alice"))
        runner.loop.run(budget_fleet.clean(shared, namespace))
        runner.loop.run(shared.aclose())
        runner.close()
        broker.delete(queue, *broker.scan_iter(match=f"{{{namespace}}}:*"))
        broker.close()
