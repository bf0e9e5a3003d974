"""A fair share of the fleet: weighted fair dispatch against first in, first out.

Real `celery worker` processes (`--processes`, `-P threads -c --concurrency`) on a private
redis-server, the simulated providers answering after `--latency-s` (1 s). Each scenario
runs on a fresh fleet, with `[fairness]` on (fair) or off (FIFO: the broker's one queue):

- quiet: a noisy tenant enqueues `--noisy` turns at once, then `--quiet` tenants send one
  turn a second each for `--quiet-s`: the quiet tenants' wait from enqueue to start, p50
  and p95 (start = the result's save time minus its run time; one host, one clock);
- alone: the noisy tenant alone, `--alone` turns: turns per second, fair and FIFO, the
  Redis server's CPU per turn (INFO used_cpu_sys + used_cpu_user), fair minus FIFO, and
  what fair dispatch added per turn by command (INFO commandstats: scripts per turn,
  and the commands they ran);
- jain: `--tenants` equally weighted tenants, all saturating (each one's queue topped up
  all along): Jain's index of the turns each started in the `--window-s` window after
  `--settle-s`;
- weights: three tenants of weights 1, 2 and 4, saturating: their shares of the window;
- cap: a tenant with max_in_flight 5 on 3 worker processes, `--capped` turns: the most
  leases it held at once, sampled from Redis every 5 ms.

    .venv/bin/python bench/fairness.py                  # full size, ~15 min
    .venv/bin/python bench/fairness.py --noisy 1000 --quiet-s 20 --alone 600 --window-s 20

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import redis
from node_capacity import CONFIG, ROOT, private_redis, say, simulator, started, wait_for

import budgets
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.turnstore import TurnKeys
from worker.settings import load_settings
from worker.types import Message, TurnRequest

NAMESPACE = "cap"


def figure(name: str, value: float, unit: str) -> None:
    print(f"FIGURE {name} {value:.4g} {unit}", flush=True)


def turn(tenant: str) -> TurnRequest:
    return TurnRequest(
        tenant_id=tenant, messages=[Message(role="user", content="hello")], deadline_s=3600
    )


class Fleet:
    """Worker processes of one configuration, and a producer app on it."""

    def __init__(
        self,
        stack: ExitStack,
        work: Path,
        url: str,
        sim: str,
        *,
        fair: bool,
        processes: int,
        concurrency: int,
        gather_s: float | None,
    ) -> None:
        queue = f"fair-{fair}-{time.monotonic_ns()}"
        config = work / f"{queue}.toml"
        text = CONFIG.format(redis_url=url, queue=queue, sim=sim)
        fairness = f"enabled = {'true' if fair else 'false'}\n"
        if gather_s is not None:
            fairness += f"gather_s = {gather_s}\n"
        config.write_text(text + "\n[fairness]\n" + fairness)
        env = {**os.environ, "RELEVO_CONFIG": str(config), "PYTHONPATH": str(ROOT)}
        for i in range(processes):
            cmd = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "worker.fleet.app",
                "worker",
                "-P",
                "threads",
                "-c",
                str(concurrency),
                "-Q",
                queue,
                "-n",
                f"f{i}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "WARNING",
            ]
            stack.enter_context(started(cmd, work / "workers.log", env))
        self.url = url
        self.redis = redis.Redis.from_url(url)
        stack.callback(self.redis.close)
        wait_for(
            lambda: sum(c.get("cmd") == "brpop" for c in self.redis.client_list()) >= processes,
            "workers to consume",
        )
        self.app = make_app(load_settings(config, require_secrets=False))
        self.keys = TurnKeys(NAMESPACE)
        self.sent: dict[str, tuple[str, float]] = {}
        self.started: dict[str, tuple[str, float, float]] = {}
        stop = threading.Event()
        collector = threading.Thread(target=self._collect, args=(stop,), daemon=True)
        collector.start()
        stack.callback(collector.join)
        stack.callback(stop.set)

    def send(self, tenant: str) -> None:
        request = turn(tenant)
        self.sent[request.turn_id] = (tenant, time.time())
        enqueue_turn(request, app=self.app)

    def _collect(self, stop: threading.Event) -> None:
        """Reads each result as it is saved: the store keeps the newest 1,000 turns in its
        recent set and a result for `result_ttl_s`, fewer than a full-size run's."""
        client = redis.Redis.from_url(self.url)
        since = 0.0
        while not stop.wait(0.25):
            fresh = client.zrangebyscore(self.keys.recent, since, "+inf", withscores=True)
            ids = [i.decode() for i, _ in fresh if i.decode() not in self.started]
            raws = client.mget([self.keys.result(i) for i in ids]) if ids else []
            for (turn_id, ms), raw in zip(
                ((i.decode(), ms) for i, ms in fresh if i.decode() in ids), raws, strict=True
            ):
                if raw is None or turn_id not in self.sent:
                    continue
                latency_ms = float(raw.split(b'"latency_ms":')[1].split(b",")[0].rstrip(b"}"))
                tenant, enqueued = self.sent[turn_id]
                self.started[turn_id] = (tenant, enqueued, (ms - latency_ms) / 1000)
            if fresh:  # a second back: saves from several processes land out of order
                since = max(ms for _, ms in fresh) - 1000
        client.close()

    def starts(self) -> dict[str, tuple[str, float, float]]:
        """turn id -> (tenant, enqueued, started), for the turns that have a result."""
        return dict(self.started)

    def done(self) -> int:
        return len(self.started)


def set_share(client: redis.Redis, tenant: str, share: budgets.Share) -> None:
    """As `relevo tenants set` writes it (`budgets.Shares`), from this blocking client."""
    client.hset(f"{{{NAMESPACE}}}:budget:shares", tenant, share.packed())


def cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def commands(client: redis.Redis) -> dict[str, tuple[int, float]]:
    """Calls and seconds per command from INFO commandstats (a script's own commands are
    counted apart from its EVALSHA, whose time includes theirs)."""
    stats = client.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"]) / 1e6)
        for k, v in stats.items()
    }


def per_turn(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], turns: int
) -> dict[str, tuple[float, float]]:
    """Calls and microseconds per turn for each command, between two snapshots."""
    out = {}
    for name, (calls, secs) in after.items():
        calls0, secs0 = before.get(name, (0, 0.0))
        out[name] = ((calls - calls0) / turns, (secs - secs0) * 1e6 / turns)
    return out


@contextmanager
def fleet(
    args: argparse.Namespace,
    rig: tuple[Path, str, str],
    *,
    fair: bool,
    processes: int | None = None,
) -> Iterator[Fleet]:
    work, url, sim = rig
    with ExitStack() as stack:
        yield Fleet(
            stack,
            work,
            url,
            sim,
            fair=fair,
            processes=processes or args.processes,
            concurrency=args.concurrency,
            gather_s=args.gather_s,
        )
    client = redis.Redis.from_url(url)
    client.flushdb()  # the private server only
    client.close()


def quiet(args: argparse.Namespace, rig: tuple[Path, str, str], fair: bool) -> None:
    label = "fair" if fair else "fifo"
    with fleet(args, rig, fair=fair) as f:
        for _ in range(args.noisy):
            f.send("noisy")
        began = time.time()
        while time.time() - began < args.quiet_s:
            for q in range(args.quiet):
                f.send(f"quiet{q}")
            time.sleep(max(0.0, began + (int(time.time() - began) + 1) - time.time()))
        wanted = [t for t, (tenant, _) in f.sent.items() if tenant != "noisy"]
        until = time.time() + args.noisy / (args.processes * args.concurrency) * 1.5 + 60
        while time.time() < until and len(set(wanted) & set(f.starts())) < len(wanted):
            time.sleep(1)
        starts = f.starts()
        waits = [starts[t][2] - starts[t][1] for t in wanted if t in starts]
    waits.sort()
    figure(f"fairness_quiet_wait_p50_{label}", statistics.median(waits), "s")
    figure(f"fairness_quiet_wait_p95_{label}", waits[int(0.95 * (len(waits) - 1))], "s")
    figure(f"fairness_quiet_started_{label}", len(waits) / len(wanted), "share")


Stats = dict[str, tuple[float, float]]  # command -> (calls, µs) per turn


def alone(
    args: argparse.Namespace, rig: tuple[Path, str, str], fair: bool
) -> tuple[float, float, Stats]:
    """Turns per second, Redis CPU per turn, and each command's calls and time per turn."""
    with fleet(args, rig, fair=fair) as f:
        cpu0, stats0, t0 = cpu_s(f.redis), commands(f.redis), time.time()
        for _ in range(args.alone):
            f.send("noisy")
        while f.done() < args.alone and time.time() - t0 < 600:
            time.sleep(0.05)
        elapsed, cpu = time.time() - t0, cpu_s(f.redis) - cpu0
        stats = per_turn(stats0, commands(f.redis), args.alone)
    rate = args.alone / elapsed
    figure(f"fairness_alone_turns_per_s_{'fair' if fair else 'fifo'}", rate, "turns/s")
    return rate, cpu / args.alone, stats


def breakdown(fifo: dict[str, tuple[float, float]], fair: dict[str, tuple[float, float]]) -> float:
    """Says on stderr which commands fair dispatch added per turn; returns the scripts'
    (EVALSHA, EVAL) added time per turn in µs."""
    rows = []
    for name in sorted(set(fifo) | set(fair)):
        calls = fair.get(name, (0, 0))[0] - fifo.get(name, (0, 0))[0]
        usec = fair.get(name, (0, 0))[1] - fifo.get(name, (0, 0))[1]
        if abs(calls) >= 0.05 or abs(usec) >= 0.5:
            rows.append((usec, name, calls))
    say("commands fair dispatch added per turn (fair minus FIFO; inside scripts too):")
    for usec, name, calls in sorted(rows, reverse=True):
        say(f"  {name:24} {calls:+7.2f} calls  {usec:+8.1f} us")
    return sum(u for u, n, _ in rows if n in ("evalsha", "eval"))


def throughput(args: argparse.Namespace, rig: tuple[Path, str, str]) -> None:
    """The noisy tenant alone, FIFO then fair, `--repeat` times: the medians, and the
    commands fair dispatch added in the last pair."""
    runs = [(alone(args, rig, False), alone(args, rig, True)) for _ in range(args.repeat)]

    def median(
        of: Callable[[tuple[float, float, Stats], tuple[float, float, Stats]], float],
    ) -> float:
        return statistics.median(of(fifo, fair) for fifo, fair in runs)

    figure("fairness_alone_fair_vs_fifo", median(lambda o, f: f[0] / o[0]), "ratio")
    figure("fairness_redis_cpu_per_turn_fifo", median(lambda o, _: o[1]) * 1e6, "us")
    figure("fairness_redis_cpu_per_turn_fair", median(lambda _, f: f[1]) * 1e6, "us")
    added = median(lambda o, f: f[1] - o[1]) * 1e6
    figure("fairness_dispatch_redis_cpu_per_turn", added, "us")
    (_, _, fifo_stats), (_, _, fair_stats) = runs[-1]
    figure("fairness_dispatch_script_per_turn", breakdown(fifo_stats, fair_stats), "us")
    scripts = sum(fair_stats.get(n, (0.0, 0.0))[0] for n in ("evalsha", "eval"))
    scripts -= sum(fifo_stats.get(n, (0.0, 0.0))[0] for n in ("evalsha", "eval"))
    figure("fairness_dispatch_scripts_per_turn", scripts, "calls")


def served(
    args: argparse.Namespace, rig: tuple[Path, str, str], weights: dict[str, int]
) -> Counter[str]:
    """Turns each tenant started inside the window, all of them saturating: each tenant's
    queue is topped up whenever it holds less than its share of 5 s of the fleet's turns
    (enqueueing thousands at once takes this loaded machine longer than a window)."""
    capacity = args.processes * args.concurrency
    total = sum(weights.values())
    low = {t: max(10, capacity * 5 * w // total) for t, w in weights.items()}
    with fleet(args, rig, fair=True) as f:
        for tenant, weight in weights.items():
            set_share(f.redis, tenant, budgets.Share(weight=weight))
        for tenant in weights:
            for _ in range(2 * low[tenant]):
                f.send(tenant)
        start = time.time() + args.settle_s
        while time.time() < start + args.window_s + 2:
            queued = f.redis.hgetall(f"{{{NAMESPACE}}}:fair:queued")
            for tenant in weights:
                for _ in range(2 * low[tenant] - int(queued.get(tenant.encode(), 0))):
                    f.send(tenant)
            time.sleep(0.5)
        counts: Counter[str] = Counter(
            tenant for tenant, _, s in f.starts().values() if start <= s < start + args.window_s
        )
    return counts


def cap(args: argparse.Namespace, rig: tuple[Path, str, str]) -> None:
    with fleet(args, rig, fair=True, processes=3) as f:
        set_share(f.redis, "capped", budgets.Share(max_in_flight=5))
        peak, samples, stop = [0], [0], threading.Event()

        def sample() -> None:
            client = redis.Redis.from_url(rig[1])
            while not stop.is_set():
                peak[0] = max(peak[0], int(client.hget("{cap}:fair:inflight", "capped") or 0))
                samples[0] += 1
                time.sleep(0.005)
            client.close()

        thread = threading.Thread(target=sample)
        thread.start()
        for _ in range(args.capped):
            f.send("capped")
        while f.done() < args.capped:
            time.sleep(0.2)
        stop.set()
        thread.join()
    figure("fairness_cap_most_in_flight", peak[0], "turns")
    figure("fairness_cap_samples", samples[0], "samples")


def jain(xs: Sequence[int]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def main(args: argparse.Namespace) -> None:
    began = time.monotonic()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fairness-")))
        url, _ = private_redis(stack, work)
        sim, _ = simulator(stack, work, args.latency_s)
        rig = (work, url, sim.url)
        only = set(args.only.split(",")) if args.only else None
        if not only or "alone" in only:
            throughput(args, rig)
        if not only or "quiet" in only:
            for fair in (False, True):
                quiet(args, rig, fair)
        if not only or "jain" in only:
            tenants = {f"t{i:03d}": 1 for i in range(args.tenants)}
            counts = served(args, rig, tenants)
            figure("fairness_jain_index", jain([counts[t] for t in tenants]), "index")
            figure("fairness_jain_turns_per_tenant", sum(counts.values()) / len(tenants), "turns")
        if not only or "weights" in only:
            counts = served(args, rig, {"w1": 1, "w2": 2, "w4": 4})
            total = sum(counts.values()) or 1
            for tenant, weight in (("w1", 1), ("w2", 2), ("w4", 4)):
                figure(f"fairness_weight_{weight}_share", counts[tenant] / total, "share")
                figure(
                    f"fairness_weight_{weight}_vs_goal",
                    counts[tenant] / total * 7 / weight,
                    "ratio",
                )
        if not only or "cap" in only:
            cap(args, rig)
    say(f"done in {time.monotonic() - began:.0f} s")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--latency-s", type=float, default=1.0)
    p.add_argument("--noisy", type=int, default=5000)
    p.add_argument("--quiet", type=int, default=10)
    p.add_argument("--quiet-s", type=float, default=60)
    p.add_argument("--alone", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3, help="alone: FIFO and fair runs, medians")
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--settle-s", type=float, default=10)
    p.add_argument("--window-s", type=float, default=60)
    p.add_argument("--capped", type=int, default=500)
    p.add_argument("--gather-s", type=float, help="[fairness] gather_s (unset: its default)")
    p.add_argument("--only", default="", help="alone,quiet,jain,weights,cap")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
