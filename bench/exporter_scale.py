"""`relevo exporter` over many tenants: how long a scrape takes and how big it is.

A private `redis-server` gets `--tenants` tenants (10,000) with limits, written as
`budgets.Ledger.set_limits` writes them (tests/tenantskit.py; one of them at 95 % of its
day), and a real `relevo exporter` process reads them, its tenant snapshot refreshed every
`--every-s` seconds (1: a refresh is nearly always under way, the worst case for a scrape)
with `exporter_max_tenants` left at its default (1,000). Scrapes come from this process
over HTTP, one at a time, as Prometheus sends them:

- before the first snapshot (the exporter has just started): the fleet-wide series only;
- `--scrapes` (40) scrapes once the snapshot is there, while it is read again and again.

Figures: each phase's scrape time (median, max) and size (max), the series a scrape
carries, whether every fleet-wide series was in every scrape, and how long one reading of
every tenant takes (`relevo_tenant_snapshot_duration_seconds`).

    .venv/bin/python bench/exporter_scale.py                 # ~1 min
    .venv/bin/python bench/exporter_scale.py --tenants 50000

Output: `FIGURE <name> <value> <unit>` lines on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.tenantskit

import httpx
from node_capacity import private_redis, say
from prometheus_client.parser import text_string_to_metric_families

from tests.netkit import free_port
from tests.tenantskit import add_tenants

FLEET_WIDE = (
    "relevo_breaker_state",
    "relevo_kill_switch",
    "relevo_held_turns",
    "relevo_queue_depth",
    "relevo_exporter_read_ok",
    "relevo_tenant_snapshot_age_seconds",
)
NAMESPACE = "scale"
CONFIG = """
[chain]
models = ["openai/alpha", "openai/beta"]
[redis]
url = "{redis_url}"
namespace = "{namespace}"
[worker]
queue = "{namespace}"
[observability]
metrics_addr = "127.0.0.1"
exporter_snapshot_every_s = {every_s}
[providers.oa]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "RELEVO_BENCH_UNUSED_KEY"
[models."openai/alpha"]
vendor = "openai"
context_window = 128000
serve = [{{ provider = "oa", model_id = "alpha" }}]
[models."openai/beta"]
vendor = "openai"
context_window = 128000
serve = [{{ provider = "oa", model_id = "beta" }}]
"""


def figure(name: str, value: float, unit: str) -> None:
    print(f"FIGURE {name} {value:.4g} {unit}", flush=True)


def scrape(url: str) -> tuple[float, int, dict[str, float]]:
    """One scrape: seconds, bytes, and the value of each single-sample family."""
    began = time.perf_counter()
    body = httpx.get(url, timeout=30).content
    took = time.perf_counter() - began
    families = {}
    for family in text_string_to_metric_families(body.decode()):
        families[family.name] = family.samples[0].value if family.samples else float("nan")
    families["_series"] = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    return took, len(body), families


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=40)
    parser.add_argument("--every-s", type=float, default=1.0)
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="relevo-bench-") as tmp:
        work = Path(tmp)
        redis_url, _ = private_redis(stack, work)
        say(f"writing {args.tenants} tenants")
        asyncio.run(add_tenants(redis_url, NAMESPACE, args.tenants))
        config = work / "chain.toml"
        config.write_text(
            CONFIG.format(redis_url=redis_url, namespace=NAMESPACE, every_s=args.every_s)
        )
        port = free_port()
        log = stack.enter_context((work / "exporter.log").open("wb"))
        exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker.cli",
                "exporter",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=os.environ.copy(),
        )
        try:
            run(f"http://127.0.0.1:{port}/metrics", args.scrapes)
        except SystemExit:
            say((work / "exporter.log").read_text())
            raise
        finally:
            exporter.terminate()
            exporter.wait(timeout=30)


def run(url: str, scrapes: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url.replace("/metrics", "/healthz"), timeout=5)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise SystemExit("the exporter never answered") from None
            time.sleep(0.05)
    before: list[tuple[float, int, dict[str, float]]] = []
    after: list[tuple[float, int, dict[str, float]]] = []
    deadline = time.monotonic() + 300
    while len(after) < scrapes:
        took, size, families = scrape(url)
        (after if "relevo_tenant_snapshot_tenants" in families else before).append(
            (took, size, families)
        )
        if time.monotonic() > deadline:
            raise SystemExit("no tenant snapshot within 300 s")
        time.sleep(0.1)
    say(f"{len(before)} scrapes before the first snapshot, {len(after)} after")
    complete = all(
        all(name in families for name in FLEET_WIDE) for _, _, families in before + after
    )
    figure("exporter_fleet_wide_series_in_every_scrape", int(complete), "bool")
    for phase, scraped in (("before_snapshot", before), ("with_snapshot", after)):
        if not scraped:
            continue
        times = [t for t, _, _ in scraped]
        figure(f"exporter_scrape_{phase}_median_s", statistics.median(times), "s")
        figure(f"exporter_scrape_{phase}_max_s", max(times), "s")
        figure(f"exporter_scrape_{phase}_max_bytes", max(s for _, s, _ in scraped), "bytes")
        figure(f"exporter_scrape_{phase}_series", scraped[-1][2]["_series"], "series")
    last = after[-1][2]
    figure("exporter_snapshot_tenants", last["relevo_tenant_snapshot_tenants"], "tenants")
    figure("exporter_snapshot_duration_s", last["relevo_tenant_snapshot_duration_seconds"], "s")
    figure(
        "exporter_snapshot_age_max_s",
        max(f["relevo_tenant_snapshot_age_seconds"] for _, _, f in after),
        "s",
    )


if __name__ == "__main__":
    main()
