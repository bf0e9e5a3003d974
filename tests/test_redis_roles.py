"""The deploy's Redis users, role by role, on a real server: what each is refused, what each needs.

deploy/redis/start.sh renders deploy/redis/users.acl.in; a private `redis-server` runs
on it with the deploy's redis.conf. Each role then sends the commands of its table
below: every one it must be refused gets NOPERM from Redis, every one it needs does not.
docs/security.md ("Redis users") shows the same table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import NoPermissionError, ResponseError

from tests.test_deploy import PASSWORDS, password_env, start_sh, started_redis, wait_answering
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.fairqueue import SCRIPTS, enqueue_sync
from worker.fleet.heartbeat import keep_scripts
from worker.settings import load_settings
from worker.simulator import Simulator
from worker.types import Message, Status, TurnRequest

pytestmark = pytest.mark.redis

ADMIN = "adminpassword000000000"
ENDLESS = "redis.call('SET', KEYS[1], '1') while true do end"
# Seeded as the workers and producers leave them: each holds a prompt or a reply.
PROMPT, REPLY = "a tenant's prompt", "a model's reply"

Command = tuple[str, ...]

# Commands no role may send: they stop, stall or reach into the whole server.
NOBODY: list[Command] = [
    ("CLIENT", "PAUSE", "3000", "ALL"),
    ("CLIENT", "KILL", "USER", "relevo"),
    ("CLIENT", "LIST"),
    ("CLIENT", "NO-EVICT", "ON"),
    ("CLIENT", "UNBLOCK", "1"),
    ("SCRIPT", "FLUSH"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', function() end)"),
    ("FCALL", "f", "0"),
    ("CONFIG", "GET", "*"),
    ("FLUSHALL",),
    ("KEYS", "*"),
    ("ACL", "LIST"),
    ("GET", "otherapp:secret"),
]

REFUSED: dict[str, list[Command]] = {
    "producer": [
        *NOBODY,
        ("CLIENT", "TRACKING", "ON"),
        ("EVAL", ENDLESS, "1", "{relevo}:fair:queued"),
        ("EVAL_RO", "return 1", "0"),
        ("SCRIPT", "LOAD", ENDLESS),
        ("EVALSHA", "<endless>", "1", "{relevo}:fair:queued"),  # loaded by another role
        ("LRANGE", "relevo", "0", "-1"),
        ("LPOP", "relevo"),
        ("HGET", "{relevo}:turns:payloads", "t1"),
        ("HGETALL", "{relevo}:turns:payloads"),
        ("HGET", "{relevo}:fair:msgs", "seed|0000000000000001"),
        ("HGETALL", "{relevo}:fair:msgs"),
        ("HVALS", "{relevo}:fair:msgs"),
        ("XRANGE", "{relevo}:held", "-", "+"),
        ("XRANGE", "{relevo}:handoffs", "-", "+"),
        ("HSET", "{relevo}:kill", "who", "mallory"),
        ("HGETALL", "{relevo}:br:vendor:openai"),
        ("SET", "{relevo}:turn:t1:result", "forged"),
        ("XADD", "{relevo}:turn:t1:chunks", "*", "text", "forged"),
        ("SCAN", "0"),
    ],
    "viewer": [
        *NOBODY,
        ("CLIENT", "TRACKING", "ON"),
        ("SCRIPT", "LOAD", "return 1"),
        ("EVAL", ENDLESS, "1", "{relevo}:kill"),
        ("EVAL_RO", "return 1", "0"),
        ("EVALSHA", "<endless>", "1", "{relevo}:kill"),
        ("LRANGE", "relevo", "0", "-1"),
        ("LINDEX", "relevo", "0"),
        ("HGETALL", "{relevo}:turns:payloads"),
        ("HGET", "{relevo}:fair:msgs", "seed|0000000000000001"),
        ("XRANGE", "{relevo}:held", "-", "+"),
        ("XREVRANGE", "{relevo}:handoffs", "+", "-"),
        ("XRANGE", "relevo:handoffs", "-", "+"),
        ("SCAN", "0"),
        ("RANDOMKEY",),
        ("LCS", "{relevo}:turn:t1:result", "{relevo}:turn:t1:result"),  # O(N*M): blocks
        ("HSET", "{relevo}:kill", "who", "mallory"),
        ("DEL", "{relevo}:turns:recent"),
    ],
    "operator": [
        *NOBODY,
        ("LRANGE", "relevo", "0", "-1"),
        ("LPOP", "relevo"),
        ("LINDEX", "relevo", "0"),
    ],
    "relevo": NOBODY,
}

NEEDED: dict[str, list[Command]] = {
    "producer": [
        ("PING",),
        ("LPUSH", "relevo", "a turn"),
        ("LLEN", "relevo"),
        ("SADD", "_kombu.binding.relevo", "relevo"),
        ("ZADD", "{relevo}:turns:sent", "1", "t2"),
        ("ZSCORE", "{relevo}:turns:sent", "t2"),
        ("HSET", "{relevo}:turns:payloads", "t2", "a payload"),
        ("GET", "{relevo}:turn:t1:result"),
        ("MGET", "celery-task-meta-t1", "{relevo}:turn:t1:result"),
        ("EXISTS", "{relevo}:turn:t1:result", "{relevo}:turn:t1:claim"),
        ("XREAD", "COUNT", "1", "STREAMS", "{relevo}:turn:t1:chunks", "0"),
    ],
    "viewer": [
        ("PING",),
        ("LLEN", "relevo"),
        ("XLEN", "{relevo}:held"),
        ("GET", "{relevo}:turn:t1:result"),
        ("XRANGE", "{relevo}:turn:t1:chunks", "-", "+"),
        ("HMGET", "{relevo}:kill", "who", "why"),
        ("ZRANGE", "{relevo}:turns:recent", "0", "-1"),
        ("ZRANGE", "{relevo}:workers", "0", "-1"),
        ("MGET", "{relevo}:worker:h:1"),
        ("HGETALL", "{relevo}:fair:queued"),
        ("HGETALL", "{relevo}:fair:inflight"),
        ("HGETALL", "{relevo}:budget:shares"),
        ("SMEMBERS", "{relevo}:budget:tenants"),
        ("XREVRANGE", "{relevo}:console:audit", "+", "-", "COUNT", "20"),
        ("HGETALL", "{relevo/acme}:budget:limits"),
    ],
    "operator": [
        ("LLEN", "relevo"),
        ("LPUSH", "relevo", "a replayed turn"),
        ("XRANGE", "{relevo}:held", "-", "+"),
        ("XREVRANGE", "{relevo}:handoffs", "+", "-"),
        ("HSET", "{relevo}:kill", "who", "alice"),
        ("DEL", "{relevo}:kill"),
        ("SCRIPT", "LOAD", "return 1"),
        ("INFO", "memory"),
    ],
    "relevo": [
        ("LRANGE", "relevo", "0", "-1"),
        ("SCRIPT", "LOAD", "return 1"),
        ("SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
        ("EVAL", "return 1", "0"),
        ("HGETALL", "{relevo}:turns:payloads"),
        ("INFO", "persistence"),
    ],
}


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, redis.Redis]]:
    """A private redis-server on the rendered ACL file: one client per role, the data
    seeded by the workers' user."""
    folder = tmp_path_factory.mktemp("roles")
    acl = folder / "users.acl"
    assert start_sh(password_env(acl), "true").returncode == 0
    # The test's own administrator, to empty the script cache as a restart would.
    acl.write_text(acl.read_text() + f"user admin on >{ADMIN} ~* &* +@all\n")
    proc, port = started_redis(folder, "--aclfile", str(acl))
    made = {
        user: redis.Redis(host="127.0.0.1", port=port, username=user, password=pw)
        for user, pw in [*PASSWORDS.items(), ("admin", ADMIN)]
    }
    try:
        wait_answering(proc, f"redis://relevo:{PASSWORDS['relevo']}@127.0.0.1:{port}/0")
        seed(made["relevo"])
        yield made
    finally:
        for client in made.values():
            client.close()
        proc.terminate()
        proc.wait(timeout=10)


def turn(stream: bool) -> TurnRequest:
    return TurnRequest(
        tenant_id="acme", messages=(Message(role="user", content="hi"),), stream=stream
    )


def seed(worker: redis.Redis) -> None:
    worker.lpush("relevo", PROMPT)
    worker.hset("{relevo}:turns:payloads", "t1", PROMPT)
    worker.hset("{relevo}:fair:msgs", "seed|0000000000000001", PROMPT)
    worker.xadd("{relevo}:held", {"payload": PROMPT})
    worker.xadd("{relevo}:handoffs", {"payload": PROMPT})
    worker.xadd("relevo:handoffs", {"payload": PROMPT})
    worker.set("{relevo}:turn:t1:result", REPLY)


def sent(client: redis.Redis, command: Command, endless_sha: str) -> None:
    args = [endless_sha if a == "<endless>" else a for a in command]
    client.execute_command(*args)


@pytest.mark.parametrize("role", sorted(REFUSED))
def test_each_role_is_refused_what_would_harm_the_server_or_show_it_others_text(
    users: dict[str, redis.Redis], role: str
) -> None:
    endless = users["relevo"].script_load(ENDLESS)
    allowed = []
    for command in REFUSED[role]:
        try:
            sent(users[role], command, endless)
        except NoPermissionError:
            continue
        except ResponseError as exc:  # refused, but not by the ACL: the command ran
            allowed.append((command[:2], str(exc)[:60]))
        else:
            allowed.append((command[:2], "ran"))
    assert allowed == []


@pytest.mark.parametrize("role", sorted(NEEDED))
def test_each_role_may_send_what_it_needs(users: dict[str, redis.Redis], role: str) -> None:
    refused = []
    for command in NEEDED[role]:
        try:
            sent(users[role], command, "")
        except NoPermissionError as exc:
            refused.append((command, str(exc)))
    assert refused == []


def test_the_producer_queues_a_fair_turn_by_sha_once_a_worker_loaded_the_script(
    users: dict[str, redis.Redis],
) -> None:
    """The fair enqueue runs by its SHA1 with the producer's rights (every command inside
    it included); until a worker loads it, the producer cannot load it itself and the
    turn goes to the broker's queue as it is."""
    worker, producer = users["relevo"], users["producer"]
    turn = {"tenant": "acme", "deadline_ms": 60_000, "input_tokens": 10, "message": PROMPT}
    users["admin"].script_flush()  # as a restart leaves Redis

    # NOSCRIPT, then EVAL refused: the caller sends the message to the broker's queue.
    assert enqueue_sync(producer, "relevo", turn_id="t-fair-0", **turn) is None  # type: ignore[arg-type]
    asyncio.run(loaded_by_a_worker(users))
    for i in range(2):
        assert enqueue_sync(producer, "relevo", turn_id=f"t-fair-{i}", **turn)  # type: ignore[arg-type]
    assert worker.hlen("{relevo}:fair:msgs") == 3
    with pytest.raises(NoPermissionError):
        producer.hgetall("{relevo}:fair:msgs")


def test_the_producer_queues_past_a_hand_edited_sequence_number_and_count(
    users: dict[str, redis.Redis],
) -> None:
    """The enqueue script puts a damaged sequence number and queued count right with the
    producer's rights: no turn of any tenant is refused for them."""
    worker, producer = users["relevo"], users["producer"]
    turn = {"deadline_ms": 60_000, "input_tokens": 10, "message": PROMPT}
    asyncio.run(loaded_by_a_worker(users))
    worker.set("{relevo}:fair:seq", "abc")
    worker.hset("{relevo}:fair:queued", "beta", "x")
    worker.delete("{relevo}:fair:wake")
    worker.set("{relevo}:fair:wake", "x")
    for i, tenant in enumerate(("beta", "gamma")):
        assert enqueue_sync(producer, "relevo", tenant=tenant, turn_id=f"t-seq-{i}", **turn)  # type: ignore[arg-type]
    assert int(worker.get("{relevo}:fair:seq") or b"0") > 0
    assert worker.hget("{relevo}:fair:queued", "beta") == b"1"
    worker.delete("{relevo}:fair:wake")


async def loaded_by_a_worker(users: dict[str, redis.Redis]) -> None:
    kwargs = users["relevo"].connection_pool.connection_kwargs
    worker = AsyncRedis(**{k: kwargs[k] for k in ("host", "port", "username", "password")})
    try:
        await keep_scripts(worker, worker)
        assert await keep_scripts(worker, worker) == 0  # loaded: one SCRIPT EXISTS each
    finally:
        await worker.aclose()


def test_a_worker_loads_the_scripts_other_roles_run_by_sha_as_it_starts(
    users: dict[str, redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process (`TurnRunner`, as the `relevo` user) loads the producer's and the
    viewer's scripts with its first heartbeat (and each one after: a restart empties
    Redis's script cache)."""
    from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
    from budgets.scripts import SCRIPTS as BUDGET_SCRIPTS
    from tests.chainkit import KEY
    from tests.chainkit import settings as chain_settings
    from worker.fleet.runner import TurnRunner

    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    users["admin"].script_flush()  # as a restart leaves Redis
    kwargs = users["relevo"].connection_pool.connection_kwargs
    url = f"redis://relevo:{PASSWORDS['relevo']}@127.0.0.1:{kwargs['port']}/0"
    shas = [SCRIPTS.sha("enqueue"), BREAKER_SCRIPTS.sha("inspect"), BUDGET_SCRIPTS.sha("report")]
    runner = TurnRunner(
        chain_settings("http://127.0.0.1:9", redis={"url": url, "namespace": "relevo"})
    )
    try:
        deadline = time.monotonic() + 10
        while users["relevo"].script_exists(*shas) != [True] * 3:
            assert time.monotonic() < deadline, "no heartbeat loaded the scripts"
            time.sleep(0.05)
    finally:
        runner.close()


async def test_the_viewers_pages_are_refused_until_a_worker_loads_their_scripts(
    users: dict[str, redis.Redis], tmp_path: Path
) -> None:
    """After a restart emptied the script cache, the viewer may not load the breakers'
    report itself: the page's read is refused (the console says Redis refused it) until
    a worker's heartbeat loads it."""
    from tests.chainkit import worker_config
    from worker.console.views import fleet_view
    from worker.errors import STORE_REFUSED
    from worker.fleet.operations import operator_fleet

    port = users["relevo"].connection_pool.connection_kwargs["port"]
    config = tmp_path / "chain.toml"
    url = f"redis://operator:{PASSWORDS['operator']}@127.0.0.1:{port}/0"
    config.write_text(worker_config(sim="http://127.0.0.1:9", redis_url=url, namespace="relevo"))
    fleet = operator_fleet(str(config))
    viewer = AsyncRedis(
        host="127.0.0.1", port=port, username="viewer", password=PASSWORDS["viewer"]
    )
    try:
        users["admin"].script_flush()
        with pytest.raises(STORE_REFUSED):
            await fleet_view(fleet, viewer)
        await loaded_by_a_worker(users)
        assert (await fleet_view(fleet, viewer)).queued is not None
    finally:
        await viewer.aclose()


@pytest.mark.slow
def test_a_producer_sends_a_turn_to_a_worker_and_reads_its_result_on_the_deploy_users(
    users: dict[str, redis.Redis], sim: Simulator, tmp_path: Path
) -> None:
    """A real `celery worker` as `relevo`, `enqueue_turn` and the result's wait as
    `producer`: every command of the round trip is one its user may send."""
    from tests.chainkit import worker_config
    from tests.test_security_kit import KEY_ENV, celery_worker

    sim.reset()
    port = users["relevo"].connection_pool.connection_kwargs["port"]

    def config(user: str) -> Path:
        url = f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{port}/0"
        path = tmp_path / f"{user}.toml"
        text = worker_config(sim=sim.url, redis_url=url, namespace="relevo", key_env=KEY_ENV)
        path.write_text(text)
        return path

    # The table's turns above and the fair queue's made-up messages were no turns.
    users["relevo"].delete("relevo", *users["admin"].keys("{relevo}:fair:*"))
    users["admin"].execute_command("ACL", "LOG", "RESET")
    with celery_worker(config("relevo"), "relevo"):
        app = make_app(load_settings(config("producer"), require_secrets=False))
        try:
            handles = [enqueue_turn(turn(stream), app=app) for stream in (False, True)]
            results = [handle.get(timeout_s=60) for handle in handles]
        finally:
            app.close()
    assert [r.status for r in results] == [Status.OK, Status.OK]
    refused = [(e["username"], e["object"]) for e in users["admin"].acl_log()]
    assert set(refused) <= {("producer", "eval")}  # the fallback before a worker was up
