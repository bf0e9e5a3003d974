"""Chaos: faults of the store, the broker and a worker, against real processes, and what each cost.

Each fault gets a fresh rig: a private `redis-server` (no persistence) on a free port,
`relevo simulate` (the primary answers after `--latency-s`, so turns are in flight when the
fault lands), and two `relevo worker` nodes (1 process x 50 threads each; rabbitmq_restart:
one node of 2 processes, as two nodes on one host would share Celery node names; `rejoin_check_s`
1, `visibility_timeout_s` 30) whose JSON logs are kept in a temporary directory. The
configuration is examples/simulated.toml pointed at them. This process enqueues turns
(examples/turn.json, tenant acme, a fresh turn id each) at `--rate` per second for
`--duration-s` with `worker.fleet.enqueue_turn`; the fault lands at `--fault-at-s`; once
the producer stops, every turn enqueued is waited for (at most `--drain-s`).

- debug_sleep: `DEBUG SLEEP 3` sent to Redis from another client.
- redis_sigstop: redis-server stopped (SIGSTOP) for 5 s, then SIGCONT.
- empty_restart: the kill switch turned on (`relevo kill-switch on`), turns held for
  `--hold-s`, then redis-server killed (SIGKILL) and started again, empty, on the same port
  after 1 s. Once a worker has stored a turn on the new server the kill switch is read;
  after the drain it is turned off and `relevo replay-held` runs. Only the turns whose
  enqueue completed after the kill are waited for: the old server took the rest with it.
- worker_kill: one `relevo worker` parent killed alone (SIGKILL). Its Celery child should
  end within 10 s (PR_SET_PDEATHSIG), and every turn should still be answered.
- redis_restart: the broker restarted when it is Redis (the default): redis-server, with
  its append-only file (`appendfsync everysec`, as deploy/redis/redis.conf), stopped with
  SIGTERM (it writes the file and exits) and started again on it after 1 s. Redis is the
  store too: results, breakers and budgets go away with it for that time.
- rabbitmq_restart: the broker restarted when it is RabbitMQ: the rig gets a private
  RabbitMQ node (tests/rabbitkit.py; needs root and rabbitmq-server) and `[broker] url`;
  `rabbitmqctl stop_app`, 1 s, `start_app`. Redis stays up.
- mixed_versions: a fleet being upgraded. Node a runs the previous release (0.1.0: its
  wheel in tests/releases, unpacked, on this interpreter; tests/releasekit.py), node b this
  checkout, and every other turn is enqueued by a producer of the previous release
  (tests/releases/client.py). At the fault node a is upgraded: SIGTERM to `relevo worker`
  (it finishes its turns), then it starts again on this checkout.

- fair_items: items no one can read, and a worker killed, at once, on RabbitMQ (a
  private node, as rabbitmq_restart; two nodes named a and b). Two tenants (acme and
  beta, turns alternating) under `[fairness] default_max_in_flight = 8`; at the fault two
  poison entries go to the head of the outbox (`{ns}:fair:outbox`): bytes that are not a
  message, and a broker message without exchange or routing key naming a turn of beta's
  (a producer on the Redis transport writes those); beta's share becomes `|||nan`, node
  a's `relevo worker` is killed (SIGKILL) while it holds leases, and the kill switch hash
  is written with `since_ms=yesterday` (on for the workers); `relevo kill-switch status`
  must show it and `off` turn it off. After the drain, `relevo replay-held` runs the
  turns held meanwhile. Per tenant: sent, answered, lost, the most leases it held in
  samples every 50 ms (the bound is 8), and its p95 queue wait (enqueued to started:
  the result's save time less its run time; turns held by the kill switch and replayed
  left out) beside a clean run's: the same rig, load and tenants without the faults, run
  first in the same invocation (`fair_items_<tenant>_wait_p95_clean`, `_faulted`,
  `_ratio`, `_minus_clean`). The poison entries: those set aside in `{ns}:fair:dead`,
  and whether the named turn was answered `undeliverable`.

Per fault (`<fault>_<figure>`): turns enqueued, answered (ok or degraded), retrievable (a
stored result), lost (enqueued - retrievable); the simulator's provider calls beside the
turns answered; the spend the ledger recorded (acme, today) beside the sum of the stored
results' cost_micros; the kill switch after the fault; and, from the workers' logs, turns
run twice, the turns the sweeper sent again (`turn.resent`: the turn record at work) and
each `breakers.fleet_view_rejoined`: its `lost_s`, and how long after the fault's end it
came. mixed_versions adds the turns each release ran and enqueued, and whether the
previous release's processes ran the wheel's code (`python -v` says where each module
came from).

    .venv/bin/python bench/chaos.py            # ~2 min: 20 s of turns per fault
    .venv/bin/python bench/chaos.py --quick    # ~70 s: 10 s of turns per fault
    .venv/bin/python bench/chaos.py --faults debug_sleep,worker_kill --keep
    .venv/bin/python bench/chaos.py --faults redis_restart,rabbitmq_restart   # both brokers

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr. Only 127.0.0.1
is spoken to; the simulated providers need no API key, and none is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.rabbitkit

import kit
import redis as redis_sync
from redis.asyncio import Redis

import breakers
import budgets
from tests import releasekit
from tests.rabbitkit import PrivateRabbit, private_rabbit_missing
from worker.fleet import TurnStore, enqueue_turn, make_app
from worker.fleet.rabbitmq import RabbitQueue
from worker.settings import Settings, load_settings
from worker.simulator import Fault, SimulatorClient
from worker.types import Status, TurnResult

T = TypeVar("T")

MIXED = "mixed_versions"
FAIR = "fair_items"
# fair_items: a second tenant's turns alternate with acme's; both share the fleet's default
# max_in_flight, which the samples of the leases check.
OTHER = "beta"
BOUND = 8
FAULTS = (
    "debug_sleep",
    "redis_sigstop",
    "empty_restart",
    "worker_kill",
    MIXED,
    "redis_restart",
    "rabbitmq_restart",
    FAIR,
)
TENANT = "acme"
PRIMARY = "claude-sim"  # the simulator's model id of the chain's primary
RELEVO = str(Path(sys.executable).with_name("relevo"))
EXAMPLE_SIM = "http://127.0.0.1:8900"
TURN: dict[str, Any] = json.loads((kit.ROOT / "examples" / "turn.json").read_text())
ANSWERED = (Status.OK, Status.DEGRADED)
SLEEP_S = 3  # DEBUG SLEEP
STOP_S = 5.0  # SIGSTOP .. SIGCONT
DOWN_S = 1.0  # empty_restart: killed .. started again
CHILD_EXIT_S = 10.0  # worker_kill: the Celery child should be gone by then


# --- processes ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    """This environment without RELEVO_* (they would override the TOML file's keys)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RELEVO_")}


def _spawn(
    cmd: Sequence[str], out: Path, err: Path | None = None, *, release: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start `cmd` in a session of its own; with `release`, on that release's code (from a
    working directory outside the checkout, which `python -m` would look in first)."""
    env, cwd = _env(), kit.ROOT
    if release is not None:
        env, cwd = releasekit.env(release, verbose=True), release.parent
    with open(out, "ab") as stdout, open(err or out, "ab") as stderr:
        return subprocess.Popen(
            cmd, cwd=cwd, stdout=stdout, stderr=stderr, env=env, start_new_session=True
        )


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields after the command name) of every process (Linux /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile
        yield int(stat.parent.name), fields


def children_of(pid: int) -> list[int]:
    return [child for child, fields in _proc_stats() if int(fields[1]) == pid]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _group_alive(pgid: int) -> bool:
    return any(int(f[2]) == pgid and f[0] != "Z" for _, f in _proc_stats())


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM to the process's group (it leads one), SIGKILL whatever is left after."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGCONT)  # a stopped redis-server cannot end otherwise
        os.killpg(proc.pid, signal.SIGTERM)
    until = time.monotonic() + timeout_s
    while _group_alive(proc.pid) and time.monotonic() < until:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    until = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError, redis_sync.RedisError):
            if check():
                return
        if time.monotonic() > until:
            raise SystemExit(f"{what} not ready within {timeout_s:g} s")
        time.sleep(0.1)


# --- the rig -----------------------------------------------------------------------------------


def _config(
    sim_url: str,
    redis_port: int,
    namespace: str,
    broker_url: str | None,
    processes: int,
    *,
    fairness: str = "",
) -> str:
    base = (kit.ROOT / "examples" / "simulated.toml").read_text()
    if EXAMPLE_SIM not in base:
        raise SystemExit(f"examples/simulated.toml no longer points at {EXAMPLE_SIM}")
    if "\nturn_deadline_s = 30\n" not in base:
        raise SystemExit("examples/simulated.toml no longer sets turn_deadline_s = 30")
    # The turns' own deadline (examples/turn.json), under the visibility timeout of 30 s.
    base = base.replace("\nturn_deadline_s = 30\n", "\nturn_deadline_s = 20\n")
    broker = f'[broker]\nurl = "{broker_url}"\n' if broker_url else ""
    extra = f"""
[redis]
url = "redis://{kit.HOST}:{redis_port}/0"
namespace = "{namespace}"
rejoin_check_s = 1

[worker]
queue = "{namespace}"
processes = {processes}
threads = 50
visibility_timeout_s = 30
restore_interval_s = 2

{broker}
[budgets]
default_daily_usd = 1000
default_monthly_usd = 10000

[observability]
metrics_port = 0
log_json = true
log_level = "info"
"""
    return base.replace(EXAMPLE_SIM, sim_url) + extra + fairness


@dataclass
class Node:
    """One `relevo worker`: its process (the parent) and where its JSON logs go."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    children: list[int] = field(default_factory=list)  # its Celery worker processes


class Rig:
    """A private redis-server, `relevo simulate` and two `relevo worker` nodes, for one fault."""

    def __init__(self, fault: str, root: Path, latency_s: float, label: str | None = None) -> None:
        """`label`: another rig for the same fault (its directory and namespace)."""
        self.dir = root / (label or fault)
        self.dir.mkdir(parents=True)
        self.namespace = f"chaos_{label or fault}_{os.getpid()}"
        self.redis_port, sim_port = kit.free_port(), kit.free_port()
        self.sim_url = f"http://{kit.HOST}:{sim_port}"
        self.config = self.dir / "chain.toml"
        # The broker's restart: Redis keeps its append-only file, or RabbitMQ is the broker.
        self.persistent = fault == "redis_restart"
        self.rabbit = PrivateRabbit() if fault in ("rabbitmq_restart", FAIR) else None
        self.latency_s = latency_s
        self.fair = fault == FAIR
        self.leases: LeaseSampler | None = None
        self.nodes: list[Node] = []
        self._stack = contextlib.ExitStack()
        self.redis: subprocess.Popen[bytes] | None = None
        # mixed_versions: node a and half the producer run the previous release.
        self.previous = releasekit.unpack(self.dir / "previous") if fault == MIXED else None
        self.upgraded_at = math.inf  # when the previous release's node had stopped
        sim_cmd = [RELEVO, "--log-level", "warning", "simulate", "--port", str(sim_port)]
        self._sim_cmd = sim_cmd

    def __enter__(self) -> Rig:
        try:
            if self.rabbit is not None:
                self._stack.enter_context(self.rabbit)
            broker = None if self.rabbit is None else self.rabbit.url
            # Celery's remote-control queue is exclusive on RabbitMQ: two nodes on one host
            # would share node names (relevo-0@host), so one node runs both processes, or
            # each node is named (fair_items, which kills one of them).
            one_node = self.rabbit is not None and not self.fair
            self.names, processes = (("a",), 2) if one_node else (("a", "b"), 1)
            fairness = f"\n[fairness]\ndefault_max_in_flight = {BOUND}\n" if self.fair else ""
            config = _config(
                self.sim_url, self.redis_port, self.namespace, broker, processes, fairness=fairness
            )
            self.config.write_text(config)
            self.settings: Settings = load_settings(self.config)
            self.start_redis()
            sim = _spawn(self._sim_cmd, self.dir / "simulator.log")
            self._stack.callback(stop, sim)
            self.sim = SimulatorClient(self.sim_url)
            self._stack.callback(self.sim.close)
            wait_for(self.sim.healthy, "the simulator")
            self.sim.set_faults(PRIMARY, Fault(latency_s=self.latency_s))
            for name in self.names:
                self.nodes.append(self._start_node(name, self.previous if name == "a" else None))
            wait_for(lambda: self.consumers() >= 2, "the workers' consumers")
            for node in self.nodes:
                node.children = children_of(node.proc.pid)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for node in self.nodes:
            stop(node.proc)
        self._stack.close()
        if self.redis is not None:
            stop(self.redis)

    def start_redis(self) -> None:
        """redis-server on this rig's port, empty, without persistence (again, after a kill)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed")
        cmd = [binary, "--port", str(self.redis_port), "--bind", kit.HOST, "--save", ""]
        # Its own directory: no dump.rdb of anyone else's is read at start.
        aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.persistent else []
        cmd += ["--appendonly", "no", *aof, "--dir", str(self.dir), "--maxclients", "10000"]
        if _redis_major(binary) >= 7:
            cmd += ["--enable-debug-command", "local"]  # DEBUG is refused by default since 7
        self.redis = _spawn(cmd, self.dir / "redis.log")
        wait_for(lambda: self.sync_redis().ping(), "redis-server")

    def sync_redis(self, timeout_s: float = 2.0) -> redis_sync.Redis:
        return redis_sync.Redis(
            host=kit.HOST, port=self.redis_port, socket_timeout=timeout_s, socket_connect_timeout=1
        )

    def consumers(self) -> int:
        """Connections waiting in BRPOP (or RabbitMQ's consumers): one per Celery worker
        process that consumes."""
        if self.rabbit is not None:
            from amqp.exceptions import NotFound
            from kombu.connection import Connection

            with Connection(self.rabbit.url) as connection:
                try:
                    declared = connection.channel().queue_declare(self.namespace, passive=True)
                except NotFound:  # no worker has declared it yet
                    return 0
                return int(declared.consumer_count)
        with contextlib.closing(self.sync_redis()) as client:
            return sum(1 for c in client.client_list() if c.get("cmd") == "brpop")

    def _start_node(self, name: str, release: Path | None = None) -> Node:
        log = self.dir / f"worker-{name}.log"
        cmd = [RELEVO, "worker", "--config", str(self.config), "--metrics-port", "0"]
        if self.rabbit is not None and self.fair:
            cmd += ["--node-name", name]
        proc = _spawn(cmd, self.dir / f"worker-{name}.out", log, release=release)
        return Node(name, proc, log)

    def upgrade(self, node: Node) -> Node:
        """Stop `node` as an operator would (SIGTERM to `relevo worker`, which finishes its
        turns), then start it again on this checkout; the node that replaces it."""
        node.proc.terminate()
        until = time.monotonic() + 60
        while _group_alive(node.proc.pid) and time.monotonic() < until:
            time.sleep(0.05)
        stop(node.proc)  # whatever did not end in time
        self.upgraded_at = time.time()
        fresh = self._start_node(node.name)
        self.nodes[self.nodes.index(node)] = fresh
        wait_for(lambda: self.consumers() >= len(self.nodes), "the upgraded node's consumer")
        fresh.children = children_of(fresh.proc.pid)
        return fresh

    def relevo(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run an operator command of `relevo` on this rig's configuration."""
        return subprocess.run(
            [RELEVO, *args, "--config", str(self.config)],
            cwd=kit.ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def store(self, op: Callable[[Redis, str], Awaitable[T]]) -> T:
        """Run `op(client, namespace)` on a fresh client (2 s timeouts) on this rig's Redis."""

        async def go() -> T:
            client = self.settings.redis.connect(timeout_s=2.0)
            try:
                return await op(client, self.namespace)
            finally:
                await client.aclose()

        return asyncio.run(go())

    def results(self, turn_ids: Iterable[str]) -> dict[str, TurnResult]:
        """The stored results of those turns that have one."""

        async def read(client: Redis, namespace: str) -> dict[str, TurnResult]:
            store, ids, found = TurnStore(client, namespace=namespace), list(turn_ids), {}
            for at in range(0, len(ids), 100):
                chunk = ids[at : at + 100]
                got = await asyncio.gather(*(store.result(i) for i in chunk))
                found.update({i: r for i, r in zip(chunk, got, strict=True) if r is not None})
            return found

        return self.store(read)

    def kill_switch(self) -> breakers.KillSwitchState | None:
        return self.store(lambda c, ns: breakers.KillSwitch(c, namespace=ns).status())

    def held(self) -> list[breakers.HeldTurn]:
        return self.store(lambda c, ns: breakers.HeldTurns(c, namespace=ns).held(10_000))

    def books(self) -> tuple[int, int]:
        """acme's recorded spend today and what is still reserved (micro-dollars)."""

        async def read(client: Redis, namespace: str) -> tuple[int, int]:
            try:
                report = await budgets.Ledger(client, namespace=namespace).report(TENANT)
            except budgets.UnknownTenantError:
                return 0, 0
            return report.day.spent_micros, report.reserved_micros

        return self.store(read)


def _redis_major(binary: str) -> int:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    version = out.split("v=", 1)[1].split()[0] if "v=" in out else "0"
    return int(version.split(".")[0])


# --- the producer ------------------------------------------------------------------------------


class PreviousProducer:
    """tests/releases/client.py on the previous release's code: enqueues each turn it is
    handed with that release's `enqueue_turn`, and says when it did."""

    def __init__(self, rig: Rig) -> None:
        assert rig.previous is not None
        with open(rig.dir / "previous-producer.log", "ab") as err:
            self.proc = subprocess.Popen(
                releasekit.client("enqueue", rig.config),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=rig.dir,  # outside the checkout
                env=releasekit.env(rig.previous),
            )
        self.previous = rig.previous
        self.imported: dict[str, Any] = {}
        self.sent: list[tuple[str, float]] = []
        self.failed: list[tuple[str, str]] = []
        self._reader = threading.Thread(target=self._read, name="previous-producer", daemon=True)
        self._reader.start()

    def send(self, turn: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(turn) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            said = json.loads(line)
            if not self.imported:
                self.imported = said
            elif "sent_at" in said:
                self.sent.append((said["turn_id"], said["sent_at"]))
            else:
                self.failed.append((said["turn_id"], said["error"].split(":", 1)[0]))

    def own_code(self) -> bool:
        """Whether it imported `worker`, `breakers` and `budgets` from the previous release."""
        files = self.imported.get("modules", {}).values()
        return bool(files) and all(Path(f).is_relative_to(self.previous) for f in files)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._reader.join(timeout=10)


class Producer(threading.Thread):
    """Enqueues turns at `rate` per second for `duration_s`; never bursts to catch up. With
    `previous`, every other turn is enqueued by that producer of the previous release."""

    def __init__(
        self,
        settings: Settings,
        rate: float,
        duration_s: float,
        previous: PreviousProducer | None = None,
        tenants: Sequence[str] = (TENANT,),
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.tenants = tuple(tenants)
        self.app = make_app(settings)
        self.limits = settings.limits
        self.interval_s = 1.0 / rate
        self.duration_s = duration_s
        self.previous = previous
        self.sent: list[tuple[str, float]] = []  # turn id, time.time() its enqueue returned
        self.tenant_of: dict[str, str] = {}
        self.failed: list[tuple[str, str]] = []  # turn id, the exception's type
        self.t0 = time.monotonic()

    def at(self, offset_s: float) -> None:
        """Sleep until `offset_s` after the producer started."""
        time.sleep(max(0.0, self.t0 + offset_s - time.monotonic()))

    def run(self) -> None:
        self.t0 = next_at = time.monotonic()
        count = 0
        while (now := time.monotonic()) < self.t0 + self.duration_s:
            if next_at > now:
                time.sleep(next_at - now)
            tenant = self.tenants[count % len(self.tenants)]
            turn = {**TURN, "turn_id": uuid.uuid4().hex, "tenant_id": tenant}
            count += 1
            if self.previous is not None and count % 2:
                self.previous.send(turn)  # it says when it sent the turn
            else:
                self._enqueue(turn)
            next_at += self.interval_s
            next_at = max(next_at, time.monotonic() - self.interval_s)

    def _enqueue(self, turn: dict[str, Any]) -> None:
        try:
            enqueue_turn(turn, app=self.app, limits=self.limits)
        except Exception as exc:  # the broker is away: counted, and the producer goes on
            self.failed.append((turn["turn_id"], type(exc).__name__))
        else:
            self.sent.append((turn["turn_id"], time.time()))
            self.tenant_of[turn["turn_id"]] = turn["tenant_id"]

    def close(self) -> None:
        """After `join`: the app closed, the previous producer's turns counted in."""
        with contextlib.suppress(Exception):
            self.app.close()
        if self.previous is not None:
            self.previous.close()
            self.sent = sorted(self.sent + self.previous.sent, key=lambda sent: sent[1])
            self.failed += self.previous.failed


# --- one fault ---------------------------------------------------------------------------------


@dataclass
class Run:
    """What one fault did: when it began and ended (time.time()) and what else it measured."""

    fault: str
    start: float = math.nan
    end: float = math.nan
    split_at: float | None = None  # empty_restart: enqueues that returned after this went on
    figures: list[tuple[str, float, str]] = field(default_factory=list)
    calls_before: int = 0  # provider calls the simulator had counted when the fault began
    # fair_items: the poison entry's turn, the turns replay-held ran, the clean run's waits.
    poison_turn: str = ""
    replayed: list[str] = field(default_factory=list)
    clean_p95: dict[str, float] = field(default_factory=dict)

    def begin(self, rig: Rig) -> None:
        self.calls_before = rig.sim.calls()
        self.start = time.time()

    def figure(self, name: str, value: float, unit: str) -> None:
        self.figures.append((name, value, unit))


Inject = Callable[[Rig, Producer, Run, argparse.Namespace], None]


def debug_sleep(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    producer.at(args.fault_at_s)
    with contextlib.closing(rig.sync_redis(timeout_s=SLEEP_S + 10)) as client:
        run.begin(rig)
        client.execute_command("DEBUG", "SLEEP", SLEEP_S)
        run.end = time.time()


def redis_sigstop(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    assert rig.redis is not None
    producer.at(args.fault_at_s)
    run.begin(rig)
    rig.redis.send_signal(signal.SIGSTOP)
    time.sleep(STOP_S)
    rig.redis.send_signal(signal.SIGCONT)
    run.end = time.time()


def empty_restart(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    assert rig.redis is not None
    producer.at(args.fault_at_s)
    done = rig.relevo("kill-switch", "on", "--reason", "drill", "--who", "chaos-bench")
    if done.returncode != 0:
        raise SystemExit(f"relevo kill-switch on exited {done.returncode}")
    run.figure("kill_switch_on_before_restart", int(rig.kill_switch() is not None), "bool")
    producer.at(args.fault_at_s + args.hold_s)
    held = rig.held()
    run.figure("held_before_restart", len(held), "turns")
    run.begin(rig)
    run.split_at = run.start
    rig.redis.kill()
    rig.redis.wait(timeout=10)
    time.sleep(DOWN_S)
    rig.start_redis()
    run.end = time.time()
    with contextlib.closing(rig.sync_redis()) as client:
        run.figure("keys_after_restart", int(client.dbsize()), "keys")
    kit.say(f"# {run.fault}: {len(held)} turns held, redis-server killed and started empty")
    # The kill switch once the workers have stored a turn on the new server.
    until = time.monotonic() + 60
    while time.monotonic() < until:
        after = [i for i, at in producer.sent if at >= run.split_at]
        if after and rig.results(after):
            break
        time.sleep(0.2)
    else:
        kit.say(f"# {run.fault}: no turn stored on the new server within 60 s")
    state = rig.kill_switch()
    run.figure("kill_switch_on_after_restart", int(state is not None), "bool")
    marked = state is not None and "[restored" in state.reason
    run.figure("kill_switch_marked_restored", int(marked), "bool")
    run.figure("first_result_after_restart_s", time.time() - run.end, "s")


def worker_kill(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    node = rig.nodes[0]
    children = children_of(node.proc.pid)
    producer.at(args.fault_at_s)
    run.begin(rig)
    run.end = run.start
    node.proc.kill()
    node.proc.wait(timeout=10)
    while any(alive(pid) for pid in children) and time.time() < run.start + CHILD_EXIT_S:
        time.sleep(0.05)
    gone = bool(children) and not any(alive(pid) for pid in children)
    run.figure("children", len(children), "processes")
    run.figure("children_exited_within_10s", int(gone), "bool")
    if gone:
        run.figure("children_exit_s", time.time() - run.start, "s")
    left = sum(1 for pid in children if alive(pid))
    kit.say(f"# {run.fault}: parent {node.proc.pid} killed; {left} of its children still alive")


def mixed_versions(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    previous = rig.nodes[0]
    producer.at(args.fault_at_s)
    run.begin(rig)
    rig.upgrade(previous)
    run.end = time.time()
    code = previous.proc.returncode
    run.figure("previous_node_exit_code", -1 if code is None else code, "code")  # -1: running
    kit.say(f"# {run.fault}: node {previous.name} stopped on 0.1.0 and started on this checkout")


def redis_restart(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    assert rig.redis is not None
    producer.at(args.fault_at_s)
    run.begin(rig)
    rig.redis.terminate()  # SIGTERM: Redis writes its append-only file and exits
    rig.redis.wait(timeout=30)
    time.sleep(DOWN_S)
    rig.start_redis()
    run.end = time.time()
    with contextlib.closing(rig.sync_redis()) as client:
        run.figure("keys_after_restart", int(client.dbsize()), "keys")


def rabbitmq_restart(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    assert rig.rabbit is not None
    producer.at(args.fault_at_s)
    run.begin(rig)
    try:
        rig.rabbit.stop_app()
        time.sleep(DOWN_S)
    finally:
        rig.rabbit.start_app()
    run.end = time.time()
    run.figure(
        "ready_after_restart", RabbitQueue(rig.rabbit.url, rig.namespace).ready_sync(), "turns"
    )


class LeaseSampler(threading.Thread):
    """The leases each tenant holds, sampled every 50 ms until `stop`: the most seen."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(name="chaos-leases", daemon=True)
        self.rig = rig
        self.most: Counter[str] = Counter()
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        key = f"{{{self.rig.namespace}}}:fair:inflight"
        with contextlib.closing(self.rig.sync_redis()) as client:
            while not self.done.wait(0.05):
                with contextlib.suppress(redis_sync.RedisError, ValueError):
                    for tenant, held in client.hgetall(key).items():
                        name = tenant.decode() if isinstance(tenant, bytes) else str(tenant)
                        self.most[name] = max(self.most[name], int(held))
                    self.samples += 1


def fair_items(rig: Rig, producer: Producer, run: Run, args: argparse.Namespace) -> None:
    """A damaged share for beta, a worker killed while it holds leases, and a kill switch
    hash no one can read (on for the workers) that an operator reads and turns off."""
    rig.leases = LeaseSampler(rig)
    rig.leases.start()
    node = rig.nodes[0]
    producer.at(args.fault_at_s)
    run.begin(rig)
    with contextlib.closing(rig.sync_redis()) as client:
        # At the head of the outbox (it is published from the right): every turn is behind.
        client.rpush(f"{{{rig.namespace}}}:fair:outbox", *poison(run))
        client.hset(f"{{{rig.namespace}}}:budget:shares", OTHER, "|||nan")
        node.proc.kill()
        node.proc.wait(timeout=10)
        client.hset(
            f"{{{rig.namespace}}}:kill",
            mapping={"who": "a hand edit", "why": "chaos", "since_ms": "yesterday"},
        )
    status = rig.relevo("kill-switch", "status")
    run.figure("kill_switch_status_exit_code", status.returncode, "code")
    run.figure("kill_switch_shown_unreadable", int("unreadable" in status.stdout), "bool")
    off = rig.relevo("kill-switch", "off", "--who", "chaos-bench")
    run.figure("kill_switch_off_exit_code", off.returncode, "code")
    run.end = time.time()
    tenants = rig.relevo("tenants", "--json")
    run.figure("tenants_exit_code", tenants.returncode, "code")
    kit.say(
        f"# {run.fault}: poison in the outbox, beta's share damaged, node a killed, "
        "the kill switch off again"
    )


def poison(run: Run) -> list[bytes]:
    """Two outbox entries no broker takes: bytes that are not a message, and a message with
    no exchange or routing key that names a turn of beta's (its id kept in `run`)."""
    run.poison_turn = uuid.uuid4().hex
    headers = {"id": run.poison_turn, "relevo_tenant": OTHER, "task": "relevo.run_turn"}
    named = {"body": "e30=", "properties": {"application_headers": headers}}
    return [b"\xff\xfe not a message", json.dumps(named).encode()]


def fair_figures(rig: Rig, producer: Producer, run: Run) -> None:
    """Per tenant: turns sent, answered, lost; the most leases each held in the samples."""
    assert rig.leases is not None
    rig.leases.done.set()
    rig.leases.join(timeout=5)
    results = rig.results([i for i, _ in producer.sent])
    for tenant in (TENANT, OTHER):
        sent = [i for i, _ in producer.sent if producer.tenant_of.get(i) == tenant]
        answered = sum(1 for i in sent if i in results and results[i].status in ANSWERED)
        run.figure(f"{tenant}_enqueued", len(sent), "turns")
        run.figure(f"{tenant}_answered", answered, "turns")
        run.figure(f"{tenant}_lost", sum(1 for i in sent if i not in results), "turns")
        run.figure(f"{tenant}_most_leases", rig.leases.most[tenant], "leases")
    run.figure("max_in_flight", BOUND, "leases")
    run.figure("lease_samples", rig.leases.samples, "samples")
    with contextlib.closing(rig.sync_redis()) as client:
        run.figure("poison_set_aside", client.llen(f"{{{rig.namespace}}}:fair:dead"), "entries")
    named = rig.results([run.poison_turn]).get(run.poison_turn)
    undeliverable = named is not None and named.reason == "undeliverable"
    run.figure("poison_turn_answered_undeliverable", int(undeliverable), "bool")
    waits = queue_waits(rig, producer, exclude=run.replayed)
    for tenant in (TENANT, OTHER):
        faulted = p95(waits[tenant])
        clean = run.clean_p95.get(tenant, math.nan)
        run.figure(f"{tenant}_wait_p95_clean", clean, "s")
        run.figure(f"{tenant}_wait_p95_faulted", faulted, "s")
        run.figure(f"{tenant}_wait_p95_ratio", faulted / clean if clean else math.nan, "ratio")
        run.figure(f"{tenant}_wait_p95_minus_clean", faulted - clean, "s")
        run.figure(f"{tenant}_waits_measured", len(waits[tenant]), "turns")


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.95 * (len(ordered) - 1))] if ordered else math.nan


def queue_waits(
    rig: Rig, producer: Producer, exclude: Iterable[str] = ()
) -> dict[str, list[float]]:
    """Per tenant, each answered turn's wait from its enqueue to its start (the result's
    save time in the recent turns, less its run time); the turns in `exclude` left out."""
    skip = set(exclude)
    sent = [(i, at) for i, at in producer.sent if i not in skip]
    results = rig.results([i for i, _ in sent])
    recent = f"{{{rig.namespace}}}:turns:recent"
    with contextlib.closing(rig.sync_redis()) as client:
        saved = client.zmscore(recent, [i for i, _ in sent]) if sent else []
    waits: dict[str, list[float]] = {TENANT: [], OTHER: []}
    for (turn_id, enqueued), saved_ms in zip(sent, saved, strict=True):
        result = results.get(turn_id)
        if result is None or result.status not in ANSWERED or saved_ms is None:
            continue
        started = (saved_ms - result.latency_ms) / 1000
        waits.setdefault(producer.tenant_of[turn_id], []).append(max(0.0, started - enqueued))
    return waits


def clean_run(root: Path, args: argparse.Namespace) -> dict[str, float]:
    """fair_items without its faults: the same rig, load and tenants; p95 wait per tenant."""
    kit.say(f"# {FAIR}: a clean run first, for the waits")
    with Rig(FAIR, root, args.latency_s, label=f"{FAIR}_clean") as rig:
        producer = Producer(rig.settings, args.rate, args.duration_s, None, (TENANT, OTHER))
        producer.start()
        producer.join()
        producer.close()
        _, missing = drain(rig, [i for i, _ in producer.sent], args.drain_s)
        waits = queue_waits(rig, producer)
    kit.say(f"# {FAIR}: clean run done ({missing} turns without a result)")
    return {tenant: p95(values) for tenant, values in waits.items()}


INJECT: dict[str, Inject] = {
    "debug_sleep": debug_sleep,
    "redis_sigstop": redis_sigstop,
    "empty_restart": empty_restart,
    "worker_kill": worker_kill,
    MIXED: mixed_versions,
    "redis_restart": redis_restart,
    "rabbitmq_restart": rabbitmq_restart,
    FAIR: fair_items,
}


def drain(rig: Rig, turn_ids: Sequence[str], timeout_s: float) -> tuple[dict[str, TurnResult], int]:
    """Wait until every turn has a stored result, or `timeout_s`: (results, still missing)."""
    found: dict[str, TurnResult] = {}
    until = time.monotonic() + timeout_s
    while True:
        missing = [i for i in turn_ids if i not in found]
        if not missing or time.monotonic() > until:
            return found, len(missing)
        try:
            found.update(rig.results(missing))
        except Exception as exc:  # Redis still away: ask again
            kit.say(f"#   results not readable yet ({type(exc).__name__})")
        time.sleep(0.5)


def replay(rig: Rig, run: Run, producer: Producer) -> None:
    """empty_restart, after the drain: the switch off, then `relevo replay-held`."""
    run.figure("held_before_replay", len(rig.held()), "turns")
    off = rig.relevo("kill-switch", "off", "--who", "chaos-bench")
    if off.returncode != 0:
        raise SystemExit(f"relevo kill-switch off exited {off.returncode}")
    done = rig.relevo("replay-held")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    replayed = [line["turn_id"] for line in lines if "turn_id" in line]
    run.replayed = replayed
    stored = rig.results(replayed)
    before = {i for i, at in producer.sent if run.split_at is not None and at < run.split_at}
    run.figure("replay_held_exit_code", done.returncode, "code")
    run.figure("replayed", len(replayed), "turns")
    answered = sum(1 for r in stored.values() if r.status in ANSWERED)
    run.figure("replayed_answered_retrievable", answered, "turns")
    run.figure("replayed_enqueued_before_restart", len(before.intersection(replayed)), "turns")
    run.figure("held_after_replay", len(rig.held()), "turns")
    run.figure("kill_switch_on_at_end", int(rig.kill_switch() is not None), "bool")


def log_events(nodes: Sequence[Node]) -> list[dict[str, Any]]:
    """Every JSON line the workers logged, with its node's name."""
    events = []
    for node in nodes:
        for line in node.log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append({**event, "node": node.name})
    return events


def _when(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def settled_books(rig: Rig, stored_cost: int, timeout_s: float = 10.0) -> tuple[int, int]:
    """The ledger once it matches the stored costs with nothing reserved, or after `timeout_s`."""
    until = time.monotonic() + timeout_s
    while True:
        spent, reserved = rig.books()
        if (spent == stored_cost and reserved == 0) or time.monotonic() > until:
            return spent, reserved
        time.sleep(0.5)


def one_fault(fault: str, root: Path, args: argparse.Namespace) -> None:
    started = time.monotonic()
    clean = clean_run(root, args) if fault == FAIR else {}
    kit.say(f"# {fault}: starting the rig")
    with Rig(fault, root, args.latency_s) as rig:
        previous = PreviousProducer(rig) if rig.previous is not None else None
        if previous is not None:
            wait_for(lambda: bool(previous.imported), "the previous release's producer")
        tenants = (TENANT, OTHER) if rig.fair else (TENANT,)
        producer = Producer(rig.settings, args.rate, args.duration_s, previous, tenants)
        run = Run(fault, clean_p95=clean)
        producer.start()
        kit.say(f"# {fault}: producing {args.rate:g} turns/s for {args.duration_s:g} s")
        INJECT[fault](rig, producer, run, args)
        producer.join()
        producer.close()
        waited = [i for i, at in producer.sent if run.split_at is None or at >= run.split_at]
        drained_at = time.monotonic()
        _, missing = drain(rig, waited, args.drain_s)
        run.figure("drain_s", time.monotonic() - drained_at, "s")
        run.figure("missing_after_drain", missing, "turns")
        run.figure("kill_switch_on_after", int(rig.kill_switch() is not None), "bool")
        if fault in ("empty_restart", FAIR):
            replay(rig, run, producer)
        if fault == FAIR:
            fair_figures(rig, producer, run)
        report(rig, producer, run)
    kit.say(f"# {fault}: done in {time.monotonic() - started:.0f} s (logs in {rig.dir})")


Figure = Callable[[str, float, str], None]


def report(rig: Rig, producer: Producer, run: Run) -> None:
    """Every figure of one fault, `<fault>_<figure>`, and a summary on stderr."""

    def fig(what: str, value: float, unit: str) -> None:
        kit.figure(f"{run.fault}_{what}", value, unit)

    turn_figures(rig, producer, run, fig)
    fig("fault_s", run.end - run.start, "s")
    for what, value, unit in run.figures:
        fig(what, value, unit)
    log_figures(rig, run, fig)
    if run.fault == MIXED:
        release_figures(rig, producer, fig)


def turn_figures(rig: Rig, producer: Producer, run: Run, fig: Figure) -> None:
    """What became of the turns: stored results, provider calls, the books."""
    sent = [i for i, _ in producer.sent]
    failed = [i for i, _ in producer.failed]
    results = rig.results(sent + failed)
    statuses = Counter(results[i].status for i in sent if i in results)
    answered = sum(statuses[s] for s in ANSWERED)
    retrievable = sum(statuses.values())
    # The books read are acme's (fair_items sends beta's turns too).
    stored_cost = sum(r.cost_micros for r in results.values() if r.tenant_id == TENANT)
    spent, reserved = settled_books(rig, stored_cost)
    calls = {model: c.get("calls", 0) for model, c in rig.sim.counts().items()}
    fig("enqueued", len(sent), "turns")
    fig("enqueue_errors", len(failed), "turns")
    fig("answered", answered, "turns")
    fig("degraded", statuses[Status.DEGRADED], "turns")
    fig("failed", statuses[Status.FAILED], "turns")
    fig("rejected", statuses[Status.REJECTED], "turns")
    fig("retrievable", retrievable, "turns")
    fig("lost", len(sent) - retrievable, "turns")
    if run.split_at is not None:
        before = [i for i, at in producer.sent if at < run.split_at]
        fig("lost_enqueued_before_restart", sum(1 for i in before if i not in results), "turns")
        after = [i for i, at in producer.sent if at >= run.split_at]
        fig("lost_enqueued_after_restart", sum(1 for i in after if i not in results), "turns")
    fig("enqueue_errors_with_result", sum(1 for i in failed if i in results), "turns")
    total = sum(calls.values())
    fig("provider_calls", total, "calls")
    fig("provider_calls_before_fault", run.calls_before, "calls")
    fig("provider_calls_primary", calls.get(PRIMARY, 0), "calls")
    fig("provider_calls_per_answered_turn", total / answered if answered else math.nan, "ratio")
    fig("spend_recorded", spent, "micro-usd")
    fig("stored_cost", stored_cost, "micro-usd")
    fig("spend_minus_stored_cost", spent - stored_cost, "micro-usd")
    fig("spend_reserved", reserved, "micro-usd")
    kit.say(f"#   statuses {dict(Counter(str(s) for s in statuses.elements()))}")
    reasons = Counter(f"{r.status}:{r.reason}" for r in results.values() if r.reason)
    if reasons:
        kit.say(f"#   reasons {dict(reasons)}")
    if producer.failed:
        kit.say(f"#   enqueue errors {dict(Counter(kind for _, kind in producer.failed))}")
    kit.say(f"#   calls per model {calls}")


def log_figures(rig: Rig, run: Run, fig: Figure) -> None:
    """What the workers' logs and processes show: runs, crashes, the fleet view's return."""
    events = log_events(rig.nodes)
    completed = [e for e in events if e.get("event") == "turn.completed"]
    fig("turns_run_logged", len(completed), "turns")
    runs = Counter(str(e.get("turn_id")) for e in completed)
    fig("turns_run_twice", sum(1 for n in runs.values() if n > 1), "turns")
    if run.fault == "empty_restart":
        # The kill switch was on before the kill and restored after it: no worker should answer.
        leaked = [e for e in completed if e.get("status") in ANSWERED and _when(e) >= run.end]
        fig("answered_by_workers_after_restart", len(leaked), "turns")
    if run.fault == "worker_kill":
        killed = rig.nodes[0].name
        finished = [e for e in completed if e["node"] == killed and _when(e) >= run.end]
        fig("killed_node_turns_finished_after_kill", len(finished), "turns")
    resent = [e for e in events if e.get("event") == "turn.resent"]
    fig("turns_resent_by_sweeper", len(resent), "turns")
    fig("worker_nodes_alive_at_end", sum(1 for n in rig.nodes if n.proc.poll() is None), "nodes")
    for node in rig.nodes:
        if node.proc.returncode is not None:
            kit.say(f"#   node {node.name}: `relevo worker` exited {node.proc.returncode}")
    children = [pid for node in rig.nodes for pid in node.children]
    fig("worker_processes_alive_at_end", sum(1 for pid in children if alive(pid)), "processes")
    crashes = sum(n.log.read_text(errors="replace").count("Unrecoverable error") for n in rig.nodes)
    fig("worker_unrecoverable_errors", crashes, "errors")
    kinds = Counter(
        f"{e.get('level')}:{e.get('event')}"
        for e in events
        if e.get("level") in ("warning", "error", "critical")
        and e.get("event")
        # Not `python -v` (mixed_versions' previous node), which Celery logs once it
        # has redirected stderr.
        and not str(e["event"]).startswith(("# ", "import "))
    )
    fig("fleet_view_lost_events", kinds["warning:breakers.fleet_view_lost"], "events")
    fig("store_reset_events", kinds["error:breakers.store_reset"], "events")
    rejoins = [e for e in events if e.get("event") == "breakers.fleet_view_rejoined"]
    fig("rejoin_events", len(rejoins), "events")
    if rejoins:
        fig("rejoin_lost_s_max", max(float(e.get("lost_s", math.nan)) for e in rejoins), "s")
        fig("rejoin_after_fault_end_s_max", max(_when(e) - run.end for e in rejoins), "s")
    for e in rejoins:
        kit.say(
            f"#   node {e['node']}: fleet view rejoined, lost_s {e.get('lost_s')}, "
            f"{_when(e) - run.end:+.3f} s after the fault's end"
        )
    kit.say(f"#   worker warnings/errors {dict(kinds)}")


def release_figures(rig: Rig, producer: Producer, fig: Figure) -> None:
    """mixed_versions: what each release enqueued and ran, and that the previous release's
    processes ran the wheel's code (`python -v` in the node's log, the producer's imports)."""
    assert rig.previous is not None
    assert producer.previous is not None
    fig("enqueued_by_previous_producer", len(producer.previous.sent), "turns")
    fig("previous_producer_ran_wheel_code", int(producer.previous.own_code()), "bool")
    node = rig.nodes[0]
    code = releasekit.code_origins(node.log.read_text(errors="replace"))
    own = bool(releasekit.ours(code, rig.previous)) and not releasekit.ours(code, kit.ROOT)
    fig("previous_node_ran_wheel_code", int(own), "bool")
    completed = [e for e in log_events(rig.nodes) if e.get("event") == "turn.completed"]
    before = sum(1 for e in completed if e["node"] == node.name and _when(e) < rig.upgraded_at)
    fig("turns_run_by_previous_release", before, "turns")
    fig("turns_run_by_current_release", len(completed) - before, "turns")


# --- the command -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10 s of turns per fault")
    parser.add_argument("--faults", help=f"comma-separated, of {','.join(FAULTS)} (all)")
    parser.add_argument("--rate", type=float, default=20.0, help="turns enqueued per second")
    parser.add_argument("--duration-s", type=float, help="turns enqueued per fault (20; quick 10)")
    parser.add_argument("--fault-at-s", type=float, help="when the fault lands (5; quick 3)")
    parser.add_argument("--hold-s", type=float, help="empty_restart: switch on to kill (4; 3)")
    parser.add_argument("--drain-s", type=float, default=60.0, help="longest wait for results")
    parser.add_argument("--latency-s", type=float, default=0.5, help="the primary's latency")
    parser.add_argument("--keep", action="store_true", help="keep the logs and configurations")
    args = parser.parse_args(argv)
    quick = {"duration_s": 10.0, "fault_at_s": 3.0, "hold_s": 3.0}
    full = {"duration_s": 20.0, "fault_at_s": 5.0, "hold_s": 4.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.faults = args.faults.split(",") if args.faults else list(FAULTS)
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    missing = private_rabbit_missing()
    for needs_rabbit in ("rabbitmq_restart", FAIR):
        if needs_rabbit in args.faults and missing is not None:
            parser.error(f"{needs_rabbit}: {missing}")
    if args.fault_at_s + max(STOP_S, args.hold_s + DOWN_S) + 1 >= args.duration_s:
        parser.error("--duration-s is too short for the faults to land and end inside it")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kit.raise_fd_limit()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="relevo-chaos-"))
    try:
        for fault in args.faults:
            one_fault(fault, root, args)
    finally:
        if args.keep:
            kit.say(f"# logs and configurations kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    kit.say(f"# done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
