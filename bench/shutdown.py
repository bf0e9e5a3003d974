"""Celery's durability settings on relevo's worker: what each one changes, measured.

One `celery worker` process (relevo's app, threads pool, 4 threads) on a private
redis-server and `relevo simulate`, one turn in flight (its primary answers after
`--latency-s`), then one of:

- sigterm: a warm shutdown (what `relevo worker`, `docker stop` and Kubernetes send);
- sigquit: a cold shutdown, as relevo configures it (`worker_soft_shutdown_timeout` 0);
- sigquit_soft: a cold shutdown with `worker_soft_shutdown_timeout = --soft-s`;
- lost_keep / lost_cancel: the worker's broker connection killed (CLIENT KILL on its
  BRPOP), with `worker_cancel_long_running_tasks_on_connection_loss` off (relevo's) or on
  (Celery 6's default).

For each: how long the worker took to exit after the signal, the turn's status, how many
calls the models got (1: the turn ran once), and the lines of the worker's log saying
Celery failed to cancel a task. A case's settings go over relevo's (`celery_app`) through
a two-line app module written next to the configuration.

    .venv/bin/python bench/shutdown.py        # ~40 s

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit
import redis as redis_sync

from worker.fleet import enqueue_turn, make_app
from worker.settings import load_settings
from worker.simulator import Fault

CASES = ("sigterm", "sigquit", "sigquit_soft", "lost_keep", "lost_cancel")
APP = """from worker.fleet.app import app
app.conf.update({settings!r})
"""


def config(sim_url: str, redis_url: str, namespace: str) -> str:
    models = [
        (kit.CHAIN[0], "openai", "oa", kit.PRIMARY),
        (kit.CHAIN[1], "anthropic", "an", kit.BACKUP),
    ]
    text = f"""turn_deadline_s = 30

[chain]
models = ["{models[0][0]}", "{models[1][0]}"]

[redis]
url = "{redis_url}"
namespace = "{namespace}"
timeout_s = 2

[worker]
queue = "{namespace}"

[providers.oa]
kind = "openai"
base_url = "{sim_url}/v1"
api_key_env = "{kit.KEY_ENV}"
first_byte_timeout_s = 20

[providers.an]
kind = "anthropic"
base_url = "{sim_url}"
api_key_env = "{kit.KEY_ENV}"
"""
    for name, vendor, provider, model_id in models:
        text += f"""
[models."{name}"]
vendor = "{vendor}"
context_window = 100000
serve = [{{ provider = "{provider}", model_id = "{model_id}" }}]
"""
    return text


def worker_command(case: str, rig: kit.Rig, root: Path, args: argparse.Namespace) -> Case:
    """The case's configuration and app module, and the command that starts its worker."""
    namespace = f"shutdown_{case}"
    path = root / case / "chain.toml"
    path.parent.mkdir()
    path.write_text(config(rig.sim_url, rig.redis_url, namespace))
    settings = {
        "sigquit_soft": {"worker_soft_shutdown_timeout": args.soft_s},
        "lost_cancel": {"worker_cancel_long_running_tasks_on_connection_loss": True},
    }.get(case, {})
    (path.parent / "bench_app.py").write_text(APP.format(settings=settings))
    env = {**os.environ, "RELEVO_CONFIG": str(path), "PYTHONPATH": f"{path.parent}:{kit.ROOT}"}
    cmd = [sys.executable, "-m", "celery", "-A", "bench_app", "worker", "-P", "threads"]
    cmd += ["-c", "4", "-Q", namespace, "-n", f"{case}@%h", "--without-gossip"]
    cmd += ["--without-mingle", "--without-heartbeat", "--loglevel", "INFO"]
    return Case(case, path, cmd, env)


@dataclass(frozen=True)
class Case:
    name: str
    config: Path
    cmd: list[str]
    env: dict[str, str]

    def start(self, out: IO[str] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.cmd, cwd=self.config.parent, env=self.env, stdout=out, stderr=out
        )


def run_case(case: Case, rig: kit.Rig, args: argparse.Namespace) -> None:
    log = case.config.parent / "worker.log"
    client = redis_sync.Redis.from_url(rig.redis_url)
    rig.sim.reset()
    rig.sim.set_faults(kit.PRIMARY, Fault(latency_s=args.latency_s, times=1))
    app = make_app(load_settings(case.config))
    with log.open("w") as out:
        worker = case.start(out)
    try:
        handle = enqueue_turn(kit.turn_request().model_copy(update={"deadline_s": 30}), app=app)
        wait_for(lambda: rig.sim.calls(kit.PRIMARY) >= 1, "the turn's call")
        began = time.monotonic()
        if case.name.startswith("lost"):
            for conn in client.client_list():
                if conn.get("cmd") == "brpop":  # a private server: only this worker's
                    client.client_kill_filter(_id=conn["id"])
            result = handle.get(timeout_s=60)
            time.sleep(2.0)  # for a delivery put back to be taken and answered again
        else:
            worker.send_signal(signal.SIGTERM if case.name == "sigterm" else signal.SIGQUIT)
            worker.wait(timeout=120)
            kit.figure(f"{case.name}_exit_after_signal", time.monotonic() - began, "s")
            second = case.start()
            try:
                result = handle.get(timeout_s=60)
            finally:
                second.terminate()
                second.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=60)
        client.close()
        app.close()
    calls = sum(rig.sim.calls(model) for model in (kit.PRIMARY, kit.BACKUP))
    kit.figure(f"{case.name}_model_calls", calls, "calls")
    kit.figure(f"{case.name}_turn_ok", int(result.status.value == "ok"), "bool")
    failed = log.read_text().count("Failed to cancel active request")
    kit.figure(f"{case.name}_failed_cancel_log_lines", failed, "lines")


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    until = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > until:
            raise SystemExit(f"{what} did not come within {timeout_s:g} s")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--latency-s", type=float, default=3.0, help="the turn's call")
    parser.add_argument("--soft-s", type=float, default=10.0, help="sigquit_soft's timeout")
    parser.add_argument("--cases", default=",".join(CASES), help="which, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, kit.rig(None) as rig:
        for case in args.cases.split(","):
            kit.say(f"{case} ...")
            run_case(worker_command(case, rig, Path(tmp), args), rig, args)


if __name__ == "__main__":
    main()
