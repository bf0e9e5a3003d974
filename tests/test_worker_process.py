"""A worker process beside its turns: one heartbeat step, the fair-queue headers a turn's
message carries, the broker channel one class for every app."""

from __future__ import annotations

import asyncio
import os
import time

import redis
from celery import Celery

from tests.chainkit import KEY, settings, turn
from worker.fleet.fairqueue import DEADLINE_HEADER, TENANT_HEADER, TOKENS_HEADER, FairTurn
from worker.fleet.heartbeat import read_heartbeats
from worker.fleet.loop import LoopThread
from worker.fleet.rabbitmq import rabbitmq_conf
from worker.fleet.runner import TurnRunner
from worker.fleet.turnstore import TurnKeys
from worker.simulator import Fault, Simulator
from worker.turn.tokens import estimate_tokens


def test_one_heartbeat_tells_the_fleet_and_writes_a_lost_claim_back(
    sim: Simulator, redis_url: str, namespace: str
) -> None:
    """The store lost a running turn's claim (emptied): the next heartbeat, one step,
    both beats and writes the claim again under this process."""
    os.environ.setdefault("RELEVO_TEST_KEY", KEY)
    config = settings(sim.url, redis={"url": redis_url, "namespace": namespace})
    runner = TurnRunner(config, loop=LoopThread())
    keys = TurnKeys(namespace)
    request = turn()
    client = redis.Redis.from_url(redis_url)
    try:
        sim.set_faults("alpha", Fault(latency_s=1.0, times=1))
        running = asyncio.run_coroutine_threadsafe(runner.result_of(request), runner.loop.loop)
        time.sleep(0.5)  # the turn waits on the slow model, its claim held
        assert client.delete(keys.claim(request.turn_id)) == 1
        runner.loop.run(runner.process.heartbeat(), timeout_s=5)
        claimed_by = client.get(keys.claim(request.turn_id))
        beats = runner.loop.run(read_heartbeats(runner.store.redis, keys), timeout_s=5).beats
        running.result(timeout=10)
    finally:
        client.close()
        runner.close()
    assert claimed_by == runner.holder.encode()
    assert [beat.process for beat in beats] == [runner.holder]


def test_a_runner_given_a_process_runs_on_its_parts() -> None:
    """Runners of one process share its guard, store and loop: none builds its own."""
    config = settings("http://127.0.0.1:9", redis={"url": "redis://127.0.0.1:9/0"})
    first = TurnRunner(config, loop=LoopThread())
    try:
        second = TurnRunner(config, process=first.process)
        assert (second.guard, second.store, second.loop) == (first.guard, first.store, first.loop)
    finally:
        first.close()


def test_a_turns_fair_headers_read_back_as_written() -> None:
    """What `send_turn` writes, a broker channel reads: whose turn, its id (Celery's), its
    queue deadline, its input tokens; a message without them is not the fair queue's."""
    request = turn(deadline_s=7.5)
    headers = {**FairTurn.headers(request), "id": request.turn_id}
    assert FairTurn.read(headers) == FairTurn(
        request.tenant_id,
        request.turn_id,
        7500,
        estimate_tokens(request.messages, request.tools),
    )
    assert set(FairTurn.headers(request)) == {TENANT_HEADER, DEADLINE_HEADER, TOKENS_HEADER}
    assert FairTurn.read({"id": request.turn_id}) is None


def test_every_app_on_rabbitmq_shares_one_transport_and_states_its_own_fair_queue() -> None:
    """The channel reads fair dispatch from its connection's options: one transport class
    for every app, each app's options naming its own namespace and itself."""
    apps = [Celery(f"app-{i}", set_as_current=False) for i in range(2)]
    confs = [
        rabbitmq_conf(
            app,
            "amqp://guest:guest@127.0.0.1//",
            "relevo",
            fair_namespace=f"ns-{i}",
            send_timeout_s=3,
        )
        for i, app in enumerate(apps)
    ]
    assert confs[0]["broker_transport"] is confs[1]["broker_transport"]
    fairs = [conf["broker_transport_options"]["relevo_fair"] for conf in confs]
    assert [(fair.app(), fair.namespace) for fair in fairs] == [
        (apps[0], "ns-0"),
        (apps[1], "ns-1"),
    ]
    assert {conf["broker_transport_options"]["relevo_confirm_timeout_s"] for conf in confs} == {3}
    off = rabbitmq_conf(
        apps[0], "amqps://127.0.0.1//", "relevo", fair_namespace=None, send_timeout_s=3
    )
    assert "relevo_fair" not in off["broker_transport_options"]
    assert off["broker_transport"] is not confs[0]["broker_transport"]  # TLS
