"""Node capacity: which Celery pool and shape a 2-core node should run turns on.

Each shape (pool, processes x concurrency) runs as real `celery worker`
processes against a private redis-server (started here on a free port, no
persistence) and the simulated providers in their own process, whose primary
model answers after `--latency-s` (1 s). A feeder in this process keeps K turns
in flight: it pushes Celery's own task messages (a template captured from
`send_task`) onto the queue and tops up as results are published (by relevo's
turn store, or Celery's own result backend for the floor: one PSUBSCRIBE, no
per-turn polling). For each K it
reports, over a measured window after a settling period:

- turns per second completed, and turns waiting on the provider (sampled at the
  simulator: calls arrived minus calls finished) and waiting in the queue;
- overhead per turn: end to end (enqueue to result published) minus the
  provider latency, and the turn's own `latency_ms` minus it (the worker's
  share; the difference is queueing and Celery);
- CPU per turn: the worker processes' utime+stime (their children included),
  and the simulator's, Redis's and the feeder's, from /proc.

Shapes run one after another (then again in reverse order while the time budget
allows) and cells are reported as medians over passes. Only 127.0.0.1.

    .venv/bin/python bench/node_capacity.py           # ~6 min
    .venv/bin/python bench/node_capacity.py --quick   # ~90 s
    .venv/bin/python bench/node_capacity.py --shapes threads:2x500 --loads 500,1000

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from worker.fleet.app import TASK_NAME, make_app
from worker.fleet.runner import TurnRunner
from worker.settings import load_settings
from worker.simulator import Fault, SimulatorClient
from worker.types import Message, TurnRequest

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
TARGET_P99_MS = 50.0
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
RESULT_CHANNEL = "celery-task-meta-"
# Where relevo's turn store publishes each result (`TurnKeys.result`, any namespace).
TURN_CHANNEL = "{*}:turn:*:result"
# Every process here and in the workers holds sockets: ~2 per in-flight turn in a worker.
WANT_FDS = 16_384

CONFIG = """
turn_deadline_s = 30
[chain]
models = ["openai/alpha", "anthropic/beta"]
[redis]
url = "{redis_url}"
namespace = "cap"
[worker]
queue = "{queue}"
result_ttl_s = 120
[budgets]
default_daily_usd = 1000000
default_monthly_usd = 10000000
[providers.oa]
kind = "openai"
base_url = "{sim}/v1"
[providers.an]
kind = "anthropic"
base_url = "{sim}"
[models."openai/alpha"]
vendor = "openai"
context_window = 100000
input_usd_per_mtok = 2
output_usd_per_mtok = 8
serve = [{{ provider = "oa", model_id = "alpha" }}]
[models."anthropic/beta"]
vendor = "anthropic"
context_window = 100000
input_usd_per_mtok = 3
output_usd_per_mtok = 15
serve = [{{ provider = "an", model_id = "beta" }}]
"""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Shape:
    """A node's worker layout: `processes` celery workers, each `-P pool -c concurrency`."""

    pool: str
    processes: int
    concurrency: int
    floor: bool = False  # Celery alone: each task only sleeps the provider's latency

    @property
    def name(self) -> str:
        kind = "floor_" if self.floor else ""
        return f"{kind}{self.pool}_{self.processes}x{self.concurrency}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        """`threads:2x500`, `prefork:1x64`, or `floor-threads:2x500`."""
        pool, _, dims = text.partition(":")
        floor = pool.startswith("floor-")
        processes, _, concurrency = dims.partition("x")
        return cls(pool.removeprefix("floor-"), int(processes), int(concurrency), floor)

    def loads(self, wanted: Sequence[int]) -> list[int]:
        # A prefork child runs one turn at a time: offer its ceiling, then the smallest K.
        if self.pool == "prefork":
            return sorted({self.processes * self.concurrency, min(wanted)})
        return list(wanted)


@dataclass
class Cell:
    """What one shape did at one K in one pass."""

    turns_per_s: float
    at_provider: float
    queued: float
    e2e_p50: float
    e2e_p99: float
    worker_p50: float
    worker_p99: float
    not_ok: int
    cpu_ms: dict[str, float] = field(default_factory=dict)


STORE_LOST = ("breakers.fleet_view_lost", "guard.budgets_unreachable", "turn.store_unreachable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < WANT_FDS:
        soft = min(WANT_FDS, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


@contextmanager
def started(cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """A child in its own process group, killed (group-wide) on exit; yields its pid."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )
    try:
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def wait_for(check: Any, what: str, timeout_s: float = 60.0) -> None:
    until = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > until:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def tree_cpu_s(roots: Sequence[int]) -> float:
    """utime+stime of `roots` and every live descendant, plus their reaped children's."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        ticks = sum(int(f) for f in fields[11:15])
        stats[int(entry)] = (int(fields[1]), ticks * TICK_S)
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [p for p in roots if p in stats]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo.extend(children[pid])
    return total


def pct(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class Feeder:
    """Keeps `target` turns in flight on one queue; records each turn's times."""

    def __init__(self, url: str, queue: str, message: dict[str, Any], payload: dict[str, Any]):
        self.client = aioredis.Redis.from_url(url)
        self.queue = queue
        self.message = message
        self.payload = payload
        self.sent_at: dict[str, float] = {}
        # (enqueued, result published, turn latency_ms, ok)
        self.done: list[tuple[float, float, int, bool]] = []
        self._ramp = (0, 0, 0.0, 1.0)  # from, to, start, seconds
        self._tasks: list[asyncio.Task[None]] = []

    def set_target(self, target: int, ramp_s: float) -> None:
        self._ramp = (self.target(), target, time.monotonic(), ramp_s)

    def target(self) -> int:
        low, high, start, ramp_s = self._ramp
        share = min(1.0, (time.monotonic() - start) / ramp_s)
        return round(low + (high - low) * share)

    async def start(self) -> None:
        pubsub = self.client.pubsub()
        await pubsub.psubscribe(RESULT_CHANNEL + "*", TURN_CHANNEL)
        self._tasks = [asyncio.create_task(self._listen(pubsub)), asyncio.create_task(self._pump())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.aclose()

    def _encode(self, turn_id: str) -> bytes:
        payload = {**self.payload, "turn_id": turn_id, "tenant_id": f"t{turn_id[:2]}"}
        body = json.dumps([[payload], {}, {"callbacks": None, "errbacks": None}])
        message = dict(self.message)
        message["body"] = base64.b64encode(body.encode()).decode()
        message["headers"] = {**message["headers"], "id": turn_id, "root_id": turn_id}
        message["properties"] = {
            **message["properties"],
            "correlation_id": turn_id,
            "delivery_tag": str(uuid.uuid4()),
        }
        return json.dumps(message).encode()

    async def _pump(self) -> None:
        while True:
            wanted = self.target() - len(self.sent_at)
            if wanted > 0:
                ids = [uuid.uuid4().hex for _ in range(wanted)]
                messages = [self._encode(turn_id) for turn_id in ids]
                now = time.monotonic()
                for turn_id in ids:
                    self.sent_at[turn_id] = now
                # BRPOP takes from the tail, LPUSH puts each value at the head: FIFO.
                await self.client.lpush(self.queue, *messages)
            await asyncio.sleep(0.005)

    async def _listen(self, pubsub: Any) -> None:
        async for message in pubsub.listen():
            if message["type"] != "pmessage":
                continue
            ended = time.monotonic()
            channel = message["channel"].decode()
            if channel.startswith(RESULT_CHANNEL):  # Celery's own backend (the floor)
                meta = json.loads(message["data"])
                turn_id, result = channel[len(RESULT_CHANNEL) :], meta.get("result") or {}
                ok = meta.get("status") == "SUCCESS" and result.get("status") == "ok"
            else:  # relevo's: the turn store publishes the result itself
                result = json.loads(message["data"])
                turn_id, ok = result.get("turn_id", ""), result.get("status") == "ok"
            sent = self.sent_at.pop(turn_id, None)
            if sent is None:
                continue
            self.done.append((sent, ended, int(result.get("latency_ms", 0)), ok))


def template(url: str, config: Path, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One real Celery task message for a turn (as `enqueue_turn` sends it), and its payload."""
    app = make_app(load_settings(config))
    request = TurnRequest(
        tenant_id="t0",
        messages=(Message(role="user", content="Where is my order?"),),
        max_tokens=16,
        deadline_s=30,
    )
    payload = request.model_dump(mode="json")
    scratch = f"{queue}-template"
    app.send_task(TASK_NAME, args=[payload], task_id=request.turn_id, queue=scratch)
    client = redis.Redis.from_url(url)
    raw = client.rpop(scratch)
    client.close()
    assert isinstance(raw, bytes), "send_task put nothing on the queue"
    message: dict[str, Any] = json.loads(raw)
    message["headers"]["argsrepr"] = "[turn]"
    message["properties"]["delivery_info"]["routing_key"] = queue
    return message, payload


def in_flight_at(sim: SimulatorClient) -> int:
    counts = sim.counts().values()
    return sum(m["calls"] - sum(v for k, v in m.items() if k != "calls") for m in counts)


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (every process, ours or not)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in first[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) * TICK_S


@dataclass
class Rig:
    """What every shape run shares: options, the private Redis, the simulator, a scratch dir."""

    args: argparse.Namespace
    url: str
    sim: SimulatorClient
    fixed_pids: dict[str, list[int]]
    work: Path


async def measure_cell(rig: Rig, feeder: Feeder, k: int, pids: dict[str, list[int]]) -> Cell:
    args = rig.args
    feeder.set_target(k, args.ramp_s)
    await asyncio.sleep(args.settle_s)
    admin = aioredis.Redis.from_url(rig.url)
    first = len(feeder.done)
    cpu0 = {name: tree_cpu_s(p) for name, p in pids.items()}
    feeder0, busy0, t0 = time.process_time(), machine_busy_s(), time.monotonic()
    at_provider, queued = [], []
    while time.monotonic() - t0 < args.window_s:
        at_provider.append(await asyncio.to_thread(in_flight_at, rig.sim))
        queued.append(int(await admin.llen(feeder.queue)))
        await asyncio.sleep(0.25)
    elapsed = time.monotonic() - t0
    await admin.aclose()
    turns = feeder.done[first:]
    n = max(1, len(turns))
    cpu = {name: (tree_cpu_s(p) - cpu0[name]) * 1000 / n for name, p in pids.items()}
    cpu["feeder"] = (time.process_time() - feeder0) * 1000 / n
    # Everyone else on this shared machine, in cores: what the node could not use.
    ours_s = sum(cpu.values()) * n / 1000
    cpu["others_cores"] = (machine_busy_s() - busy0 - ours_s) / elapsed
    latency_ms = args.latency_s * 1000
    e2e = [(end - sent) * 1000 - latency_ms for sent, end, _, _ in turns]
    own = [ms - latency_ms for _, _, ms, _ in turns]
    return Cell(
        turns_per_s=len(turns) / elapsed,
        at_provider=statistics.median(at_provider),
        queued=statistics.median(queued),
        e2e_p50=pct(e2e, 50),
        e2e_p99=pct(e2e, 99),
        worker_p50=pct(own, 50),
        worker_p99=pct(own, 99),
        not_ok=sum(not ok for *_, ok in turns),
        cpu_ms=cpu,
    )


def worker_command(shape: Shape, queue: str, index: int) -> list[str]:
    # `floor` runs Celery alone: the same app and settings, a task that only sleeps.
    module = "node_capacity:floor" if shape.floor else "worker.fleet.app"
    return [
        *(sys.executable, "-m", "celery", "-A", module, "worker"),
        *("-P", shape.pool, "-c", str(shape.concurrency), "-Q", queue, "-n", f"cap{index}@%h"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"),
    ]


async def warm_up(feeder: Feeder, shape: Shape, first_load: int) -> None:
    """Until every process (every prefork child) has run turns: runners, pools, scripts made."""
    slots = shape.processes * shape.concurrency
    enough = 2 * slots if shape.pool == "prefork" else 50 * shape.processes
    feeder.set_target(min(first_load, slots, 200), 0.5)
    for _ in range(300):  # 30 s at most
        if len(feeder.done) >= enough:
            break
        await asyncio.sleep(0.1)
    if not feeder.done:
        raise SystemExit(f"{shape.name}: no turn completed")


def describe(name: str, k: int, cell: Cell) -> str:
    cpu = " ".join(f"{part}={v:.2f}" for part, v in cell.cpu_ms.items())
    return (
        f"  {name} K={k}: {cell.turns_per_s:.0f}/s, at provider {cell.at_provider:.0f}, "
        f"queued {cell.queued:.0f}, e2e p50/p99 {cell.e2e_p50:.0f}/{cell.e2e_p99:.0f} ms, "
        f"worker p50/p99 {cell.worker_p50:.0f}/{cell.worker_p99:.0f} ms, "
        f"not ok {cell.not_ok}, cpu ms/turn {cpu}"
    )


Measure = Callable[[Rig, "Feeder", int, dict[str, list[int]]], Awaitable[Cell]]


async def run_shape(
    rig: Rig, shape: Shape, loads: Sequence[int], measure: Measure | None = None
) -> dict[int, Cell]:
    """`shape`'s workers at each K of `loads`, each cell measured by `measure`."""
    measure = measure or measure_cell
    queue = f"cap-{shape.name}-{uuid.uuid4().hex[:6]}"
    config = rig.work / f"{queue}.toml"
    config.write_text(CONFIG.format(redis_url=rig.url, queue=queue, sim=rig.sim.url))
    message, payload = template(rig.url, config, queue)
    env = {
        **os.environ,
        "RELEVO_CONFIG": str(config),
        "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
        "NODE_CAP_LATENCY_S": str(rig.args.latency_s),
    }
    cells: dict[int, Cell] = {}
    log = rig.work / f"{shape.name}.log"
    with ExitStack() as stack:
        pids = [
            stack.enter_context(started(worker_command(shape, queue, i), log, env))
            for i in range(shape.processes)
        ]
        sync = redis.Redis.from_url(rig.url)
        stack.callback(sync.close)
        try:
            wait_for(
                lambda: sum(c.get("cmd") == "brpop" for c in sync.client_list()) >= shape.processes,
                f"{shape.name} workers to consume",
            )
        except SystemExit:
            say("\n".join(log.read_text().splitlines()[-15:]))
            raise
        feeder = Feeder(rig.url, queue, message, payload)
        await feeder.start()
        try:
            await warm_up(feeder, shape, loads[0])
            for k in loads:
                cells[k] = await measure(rig, feeder, k, {"worker": pids, **rig.fixed_pids})
                say(describe(shape.name, k, cells[k]))
        finally:
            await feeder.stop()
        lines = log.read_text().splitlines()
        errors = [i for i, line in enumerate(lines) if "ERROR" in line]
        if errors:
            say(f"  worker log: {len(errors)} errors; the first:")
            say("\n".join(f"    {line[:200]}" for line in lines[errors[0] : errors[0] + 30]))
        # A worker that thinks Redis is gone: breakers go local, budgets and claims lapse.
        for event in STORE_LOST:
            count = sum(f'"{event}"' in line for line in lines)
            print(f"FIGURE node_{shape.name}_log_{event.replace('.', '_')} {count} lines")
    assert not rig.url.startswith(f"redis://{HOST}:6379/")
    sync = redis.Redis.from_url(rig.url)
    sync.flushdb()  # the private server only: the next shape starts from an empty store
    sync.close()
    return cells


def private_redis(stack: ExitStack, work: Path) -> tuple[str, int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    maxclients = str(WANT_FDS - 64)
    cmd = [binary, "--bind", HOST, "--port", str(port), "--save", ""]
    cmd += ["--appendonly", "no", "--maxclients", maxclients]
    pid = stack.enter_context(started(cmd, work / "redis.log"))
    url = f"redis://{HOST}:{port}/0"
    client = redis.Redis.from_url(url)
    wait_for(lambda: _pings(client), "the private redis-server")
    client.close()
    return url, pid


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def simulator(stack: ExitStack, work: Path, latency_s: float) -> tuple[SimulatorClient, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "worker.cli", "--log-level", "warning", "simulate"]
    cmd += ["--host", HOST, "--port", str(port)]
    pid = stack.enter_context(started(cmd, work / "simulator.log"))
    sim = SimulatorClient(f"http://{HOST}:{port}")
    stack.callback(sim.close)
    wait_for(sim.healthy, "the simulator")
    sim.set_faults("alpha", Fault(latency_s=latency_s))
    return sim, pid


MEDIANS = ("turns_per_s", "at_provider", "queued", "e2e_p50", "e2e_p99", "worker_p50")
UNITS = {"turns_per_s": "turns/s", "at_provider": "turns", "queued": "turns"}


def report(shapes: Sequence[Shape], runs: dict[tuple[str, int], list[Cell]]) -> None:
    """Medians over passes, one FIGURE line per number, then the verdict per shape."""
    best: tuple[float, str] = (0.0, "none")
    for shape in shapes:
        sustained = 0
        for (name, k), cells in sorted(runs.items()):
            if name != shape.name:
                continue
            med = {a: statistics.median(getattr(c, a) for c in cells) for a in MEDIANS}
            med["worker_p99"] = statistics.median(c.worker_p99 for c in cells)
            prefix = f"FIGURE node_{name}_k{k}"
            for attr, value in med.items():
                print(f"{prefix}_{attr} {value:.1f} {UNITS.get(attr, 'ms')}")
            for part in cells[0].cpu_ms:
                cpu = statistics.median(c.cpu_ms[part] for c in cells)
                unit = "cores" if part.endswith("cores") else "ms/turn"
                print(f"{prefix}_cpu_{part} {cpu:.2f} {unit}")
            not_ok = sum(c.not_ok for c in cells)
            print(f"{prefix}_not_ok {not_ok} turns")
            print(f"{prefix}_runs {len(cells)} runs")
            if med["e2e_p99"] < TARGET_P99_MS and not_ok == 0:
                sustained = max(sustained, k)
                if not shape.floor:
                    best = max(best, (med["turns_per_s"], f"{name}_k{k}"))
        print(f"FIGURE node_{shape.name}_max_k_p99_under_{TARGET_P99_MS:.0f}ms {sustained} turns")
    print(f"FIGURE node_best_sustained_turns_per_s {best[0]:.1f} turns/s  # {best[1]}")


async def main(args: argparse.Namespace) -> None:
    shapes = [Shape.parse(s) for s in args.shapes.split(",")]
    loads = [int(k) for k in args.loads.split(",")]
    say(f"file descriptors: soft limit {raise_fd_limit()} (raised to at most {WANT_FDS})")
    began = time.monotonic()
    runs: dict[tuple[str, int], list[Cell]] = defaultdict(list)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="node-cap-")))
        url, redis_pid = private_redis(stack, work)
        sim, sim_pid = simulator(stack, work, args.latency_s)
        rig = Rig(args, url, sim, {"simulator": [sim_pid], "redis": [redis_pid]}, work)
        order = list(shapes)
        for rerun in range(args.passes):
            for shape in order:
                cost = 12 + len(shape.loads(loads)) * (args.settle_s + args.window_s)
                if time.monotonic() - began + cost > args.budget_s:
                    say(f"skipping {shape.name} on pass {rerun + 1}: time budget")
                    continue
                say(f"pass {rerun + 1}: {shape.name}")
                for k, cell in (await run_shape(rig, shape, shape.loads(loads))).items():
                    runs[(shape.name, k)].append(cell)
            order.reverse()
    report(shapes, runs)
    say(f"done in {time.monotonic() - began:.0f} s")


class _Sleeper:
    """The floor's runner: the provider's latency and nothing else, in the Celery thread."""

    def answer(self, payload: object, **_: object) -> dict[str, Any]:
        latency_s = float(os.environ.get("NODE_CAP_LATENCY_S", "1"))
        time.sleep(latency_s)
        turn_id = payload.get("turn_id") if isinstance(payload, dict) else None
        return {"turn_id": turn_id, "status": "ok", "latency_ms": round(latency_s * 1000)}


_FLOOR: list[Any] = []


def __getattr__(name: str) -> Any:
    # `celery -A node_capacity:floor`: made only when a floor worker asks for it.
    if name != "floor":
        raise AttributeError(name)
    if not _FLOOR:
        sleeper = cast(TurnRunner, _Sleeper())
        app = make_app(load_settings(os.environ["RELEVO_CONFIG"]), runner=lambda: sleeper)
        # Celery's floor: its result backend as Celery ships it, storing each task's return
        # value, not relevo's, which reads the turn store.
        app.backend_cls = None
        # make_app's task is shared: finalizing also attaches worker.fleet.app's module-level
        # app's task of the same name, which may win. Pin the sleeper explicitly.
        app.finalize()
        app.tasks[TASK_NAME].run = sleeper.run
        app.tasks[TASK_NAME].ignore_result = False
        _FLOOR.append(app)
    return _FLOOR[0]


DEFAULT_SHAPES = (
    "threads:1x500,threads:1x1000,threads:2x500,threads:2x1000,threads:4x250,"
    "prefork:1x64,floor-threads:2x500"
)
QUICK_SHAPES = "threads:1x1000,threads:2x500,prefork:1x64"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes, shorter windows")
    parser.add_argument("--shapes", help=f"[floor-]pool:PROCESSESxTHREADS,... [{DEFAULT_SHAPES}]")
    parser.add_argument("--loads", help="turns kept in flight, K,... [100,250,500,1000,1500]")
    parser.add_argument("--latency-s", type=float, default=1.0, help="the primary's latency")
    parser.add_argument("--settle-s", type=float, help="after each change of K [2.5; quick 2]")
    parser.add_argument("--window-s", type=float, help="measured, per K [4; quick 3]")
    parser.add_argument("--ramp-s", type=float, default=1.0, help="K is raised over this long")
    parser.add_argument("--passes", type=int, default=2, help="even passes run in reverse order")
    parser.add_argument("--budget-s", type=float, help="no shape starts past this [330; quick 80]")
    args = parser.parse_args(argv)
    quick = args.quick
    args.shapes = args.shapes or (QUICK_SHAPES if quick else DEFAULT_SHAPES)
    args.loads = args.loads or ("250,500,1000" if quick else "100,250,500,1000,1500")
    args.settle_s = args.settle_s or (2.0 if quick else 2.5)
    args.window_s = args.window_s or (3.0 if quick else 4.0)
    args.budget_s = args.budget_s or (80.0 if quick else 330.0)
    args.passes = 1 if quick else args.passes
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
