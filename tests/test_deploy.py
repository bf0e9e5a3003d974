"""deploy/: every YAML and JSON file parses, and what the files promise holds.

Alert rules and the dashboard use only metrics (and labels) the workers export;
the image runs as a non-root user; compose's Redis has passwords and the workers
use theirs; the Kubernetes worker has probes, resources and a grace period longer
than the turn deadline; the Redis ACL users keep producers to the queue and their
results, checked on a real redis-server started with deploy/redis/start.sh.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
import yaml
from redis.exceptions import AuthenticationError, NoPermissionError, OutOfMemoryError
from structlog.testing import capture_logs

import breakers
import budgets
from tests.chainkit import KEY, run, turn, worker_config
from tests.chainkit import settings as chain_settings
from tests.conftest import skip_unless_ci
from tests.netkit import free_port
from worker.cli.fleet import EXPORTER_PORT, celery_command
from worker.console.views import fleet_view, tenant_rows, tenant_view, turn_view
from worker.fleet.app import make_app
from worker.fleet.enqueue import enqueue_turn
from worker.fleet.heartbeat import keep_scripts
from worker.fleet.operations import operator_fleet
from worker.guard.redis_guard import open_guard
from worker.observability.metrics import METRIC_NAMES
from worker.settings import BrokerSettings, ObservabilitySettings, load_settings
from worker.simulator import Simulator
from worker.types import Status

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))
JSON_FILES = sorted(DEPLOY.rglob("*.json"))
CHAIN = DEPLOY / "chain.toml"
TURN_DEADLINE_S = tomllib.loads(CHAIN.read_text())["turn_deadline_s"]
METRICS_PORT = ObservabilitySettings().metrics_port
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
TARGET_LABELS = {"instance", "job"}  # added by Prometheus to every scraped series


def rel(path: Path) -> str:
    return str(path.relative_to(DEPLOY))


def load_yaml(name: str) -> list[Any]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc is not None]


# --- PromQL: which metrics and labels an expression names ----------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{([^{}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names `expr` uses."""
    text = _STRING.sub('""', _GRAFANA_VARIABLE.sub("5m", expr))
    labels: set[str] = set()
    for matchers in _MATCHERS.findall(text):
        labels |= set(_MATCHER_LABEL.findall(matchers))
    text = _MATCHERS.sub(" ", text)
    for grouping in _GROUPING.findall(text):
        labels |= {name.strip() for name in grouping.split(",") if name.strip()}
    text = _RANGE.sub(" ", _GROUPING.sub(" ", text))
    metrics = {
        name
        for name, call in _IDENTIFIER.findall(text)
        if not call and name.lower() not in _KEYWORDS
    }
    return metrics, labels


def base_metric(series: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if series.endswith(suffix) and series.removesuffix(suffix) in METRIC_NAMES:
            return series.removesuffix(suffix)
    return series


def allowed_labels(metrics: set[str]) -> set[str]:
    labels = set(TARGET_LABELS)
    for series in metrics:
        labels |= set(METRIC_NAMES.get(base_metric(series), ()))
        if series.endswith("_bucket"):
            labels.add("le")
    return labels


def check_expression(expr: str, extra_labels: frozenset[str] = frozenset()) -> set[str]:
    """Assert `expr` names exported metrics and their labels only; return the metrics."""
    metrics, labels = promql_names(expr)
    assert metrics, f"no metric found in {expr!r}"
    unknown = {m for m in metrics if base_metric(m) not in METRIC_NAMES}
    assert not unknown, f"{expr!r} uses metrics the code does not export: {sorted(unknown)}"
    stray = (labels | extra_labels) - allowed_labels(metrics)
    assert not stray, f"{expr!r} uses labels its metrics do not have: {sorted(stray)}"
    return metrics


def test_promql_parser_finds_metrics_and_labels() -> None:
    """The helper the checks below rely on sees through functions, matchers and grouping."""
    expr = (
        "histogram_quantile(0.99, sum by (le, model) (rate(relevo_attempt_duration_seconds_bucket"
        '{outcome="ok", provider=~"a|b"}[$__rate_interval]))) / 1e6 > bool 2'
    )
    assert promql_names(expr) == (
        {"relevo_attempt_duration_seconds_bucket"},
        {"le", "model", "outcome", "provider"},
    )
    with pytest.raises(AssertionError, match="relevo_turns_totl"):
        check_expression("sum(rate(relevo_turns_totl[5m]))")
    with pytest.raises(AssertionError, match="tenant_id"):
        check_expression("max by (tenant_id) (relevo_tenant_budget_used_ratio)")


# --- every file parses ---------------------------------------------------------------


@pytest.mark.parametrize("path", YAML_FILES, ids=rel)
def test_yaml_file_parses(path: Path) -> None:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert docs
    assert all(isinstance(doc, dict) for doc in docs)


@pytest.mark.parametrize("path", JSON_FILES, ids=rel)
def test_json_file_parses(path: Path) -> None:
    assert isinstance(json.loads(path.read_text()), dict)


def test_deploy_holds_every_promised_file() -> None:
    assert {rel(p) for p in YAML_FILES} >= {
        "docker-compose.yml",
        "docker-compose.sentinel.yml",
        "docker-compose.rabbitmq.yml",
        "prometheus/prometheus.yml",
        "prometheus/rules.yml",
        "kubernetes/worker.yaml",
        "kubernetes/redis.yaml",
        "kubernetes/configmap.yaml",
        "kubernetes/secret.yaml",
    }
    assert {rel(p) for p in JSON_FILES} == {"grafana/relevo-dashboard.json"}
    load_settings(CHAIN, require_secrets=False)  # a configuration the workers accept


# --- alert rules and dashboard --------------------------------------------------------


def alert_rules() -> dict[str, dict[str, Any]]:
    (doc,) = load_yaml("prometheus/rules.yml")
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    for rule in rules:
        check_expression(rule["expr"])
    return {rule["alert"]: rule for rule in rules if "alert" in rule}


def test_alert_rules_use_exported_metrics_and_labels() -> None:
    for name, rule in alert_rules().items():
        used = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule.get("annotations", {}))))
        _, grouped = promql_names(rule["expr"])
        assert used <= grouped, f"{name} annotations use labels its expression drops"


def test_the_four_alerts_have_their_thresholds() -> None:
    rules = alert_rules()
    squeeze = {name: " ".join(rule["expr"].split()) for name, rule in rules.items()}
    fallback = squeeze["RelevoFallbackRateHigh"]
    assert 'relevo_turns_total{step!="", step!="0"}' in fallback
    assert "> 0.10" in fallback
    assert rules["RelevoFallbackRateHigh"]["for"] == "5m"
    assert squeeze["RelevoBreakerOpen"] == "max by (scope) (relevo_breaker_state) == 2"
    assert squeeze["RelevoTenantBudgetNearlySpent"].endswith(
        "(relevo_tenant_budget_used_ratio) > 0.9"
    )
    assert squeeze["RelevoKillSwitchOn"] == "max(relevo_kill_switch) == 1"
    gone = squeeze["RelevoModelNotFound"]
    assert "increase(relevo_model_not_found_total[1h])) > 0" in gone
    assert rules["RelevoModelNotFound"]["labels"]["severity"] == "critical"


# Each gauge a person must act on, and the alert that calls them.
ALERT_OF_GAUGE = {
    "relevo_local_breakers": "RelevoNodeOnLocalBreakers",
    "relevo_backlog_writes": "RelevoBacklogNotDraining",
    "relevo_backlog_dropped_total": "RelevoBacklogDropped",
    "relevo_held_turns": "RelevoTurnsHeldAfterKillSwitch",
    "relevo_queue_depth": "RelevoQueueNotDraining",
    "relevo_turns_resent_total": "RelevoTurnsResent",
    "relevo_unreadable_items_total": "RelevoUnreadableItems",
    "relevo_set_aside_total": "RelevoItemsSetAside",
    "relevo_kill_switch": "RelevoExporterDown",
}


def test_each_gauge_a_person_must_act_on_has_its_alert() -> None:
    rules = alert_rules()
    for metric, alert in ALERT_OF_GAUGE.items():
        assert metric in promql_names(rules[alert]["expr"])[0], alert
        assert rules[alert]["labels"]["severity"] in ("warning", "critical"), alert
        assert rules[alert]["annotations"]["description"].strip(), alert
    squeeze = {name: " ".join(rule["expr"].split()) for name, rule in rules.items()}
    assert squeeze["RelevoExporterDown"] == "absent(relevo_kill_switch)"
    assert squeeze["RelevoNodeOnLocalBreakers"].endswith("(relevo_local_breakers) == 1")
    assert "relevo_kill_switch) == 0" in squeeze["RelevoTurnsHeldAfterKillSwitch"]
    assert rules["RelevoBacklogDropped"]["labels"]["severity"] == "critical"


def test_the_fallback_gauge_is_a_ratio_everywhere() -> None:
    assert "relevo_fallback_ratio" in METRIC_NAMES
    for path in (*YAML_FILES, *JSON_FILES, *(ROOT / "docs").glob("*.md")):
        assert "relevo_fallback_rate" not in path.read_text(), path


def test_dashboard_panels_use_exported_metrics_and_labels() -> None:
    dashboard = json.loads((DEPLOY / "grafana/relevo-dashboard.json").read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            used |= {base_metric(m) for m in check_expression(target["expr"], frozenset(legend))}
    assert used >= {
        "relevo_turns_total",
        "relevo_attempts_total",
        "relevo_turn_duration_seconds",
        "relevo_breaker_state",
        "relevo_tenant_budget_used_ratio",
        "relevo_kill_switch",
        "relevo_fallback_ratio",
        *ALERT_OF_GAUGE,
        "relevo_build_info",
    }
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    assert "p50 / p99" in titles


# --- the image -------------------------------------------------------------------------


def dockerfile() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def test_image_runs_as_a_non_root_user() -> None:
    users = [line.split(None, 1)[1] for line in dockerfile() if line.startswith("USER ")]
    assert users, "the Dockerfile never switches user"
    assert users[-1].split(":")[0] not in ("root", "0")


def test_image_entrypoint_port_and_healthcheck_match_the_worker() -> None:
    lines = dockerfile()
    assert 'ENTRYPOINT ["relevo"]' in lines
    assert 'CMD ["worker", "--config", "/etc/relevo/chain.toml"]' in lines
    assert f"EXPOSE {METRICS_PORT}" in lines
    args = dict(line[4:].split("=", 1) for line in lines if line.startswith("ARG ") and "=" in line)
    bases = {
        re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], line.split()[1])
        for line in lines
        if line.startswith("FROM ")
    }
    assert bases == {"python:3.11-slim-bookworm"}
    (health,) = [line for line in lines if line.startswith("HEALTHCHECK")]
    assert "celery -A worker.fleet.app inspect ping" in health
    # `relevo worker` names process 0 `relevo-0@%h`; the probe must ask for that node.
    command = celery_command("relevo", 1, "relevo-0", "INFO")
    node = command[command.index("--hostname") + 1]
    assert f'-d "{node.replace("%h", "$(hostname)")}"' in health


# --- docker compose --------------------------------------------------------------------


def compose() -> dict[str, Any]:
    (doc,) = load_yaml("docker-compose.yml")
    services: dict[str, Any] = doc["services"]
    return services


def worker_services() -> dict[str, Any]:
    return {
        name: s
        for name, s in compose().items()
        if s.get("image") == "relevo:local" and s.get("command", ["worker"])[0] == "worker"
    }


def test_compose_redis_requires_passwords_and_loads_the_acl() -> None:
    redis_service = compose()["redis"]
    command = redis_service["command"]
    assert "/etc/relevo-redis/start.sh" in command
    assert command[command.index("--aclfile") + 1] == "/data/users.acl"
    for user in ("RELEVO", "PRODUCER", "OPERATOR"):
        assert ":?" in redis_service["environment"][f"REDIS_{user}_PASSWORD"]
    published = [p for s in compose().values() for p in s.get("ports", [])]
    assert published
    assert all(p.startswith("127.0.0.1:") for p in published)


def test_compose_workers_use_the_redis_password_and_the_chain() -> None:
    workers = worker_services()
    assert len(workers) >= 2
    key_vars = {p["api_key_env"] for p in tomllib.loads(CHAIN.read_text())["providers"].values()}
    for worker in workers.values():
        url = worker["environment"]["RELEVO_REDIS__URL"]
        assert url.startswith("redis://relevo:${REDIS_RELEVO_PASSWORD:?")
        assert url.endswith("@redis:6379/0")
        assert key_vars <= set(worker["environment"])
        assert "./chain.toml:/etc/relevo/chain.toml:ro" in worker["volumes"]
        assert int(worker["stop_grace_period"].removesuffix("s")) > TURN_DEADLINE_S
    assert "@redis:6379/0" in compose()["flower"]["environment"]["CELERY_BROKER_URL"]
    example = (DEPLOY / ".env.example").read_text()
    for var in (*key_vars, "REDIS_RELEVO_PASSWORD", "REDIS_PRODUCER_PASSWORD"):
        assert f"\n{var}=\n" in example


def test_compose_rabbitmq_layer_points_every_celery_client_at_rabbitmq() -> None:
    """The workers, the exporter (the queue's depth) and Flower use RabbitMQ's URL, with a
    password compose refuses to start without; Redis stays the store."""
    (doc,) = load_yaml("docker-compose.rabbitmq.yml")
    services = doc["services"]
    rabbit = services["rabbitmq"]
    assert rabbit["image"].startswith("rabbitmq:3.")
    assert ":?" in rabbit["environment"]["RABBITMQ_DEFAULT_PASS"]
    assert "rabbitmq-data:/var/lib/rabbitmq" in rabbit["volumes"]
    assert "rabbitmq-data" in doc["volumes"]
    assert rabbit["healthcheck"]["test"][1] == "rabbitmq-diagnostics"
    assert all(p.startswith("127.0.0.1:") for p in rabbit["ports"])
    clients = {*worker_services(), "exporter"}
    assert clients <= set(services)
    for name in clients:
        url = services[name]["environment"]["RELEVO_BROKER__URL"]
        assert url.startswith("amqp://relevo:${RABBITMQ_RELEVO_PASSWORD:?")
        assert url.endswith("@rabbitmq:5672//")
        assert services[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "RELEVO_REDIS__URL" in compose()[name]["environment"]  # the store stays
        filled = url.replace("${RABBITMQ_RELEVO_PASSWORD:?set it in deploy/.env}", "pw")
        assert BrokerSettings(url=filled).rabbitmq
    assert services["flower"]["environment"]["CELERY_BROKER_URL"] == url
    assert "\nRABBITMQ_RELEVO_PASSWORD=\n" in (DEPLOY / ".env.example").read_text()


def test_prometheus_loads_the_rules_and_scrapes_every_worker() -> None:
    (config,) = load_yaml("prometheus/prometheus.yml")
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    assert "./prometheus:/etc/prometheus:ro" in compose()["prometheus"]["volumes"]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "relevo-worker"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {
        f"{s.get('hostname', name)}:{METRICS_PORT}" for name, s in worker_services().items()
    }


def test_one_exporter_serves_the_fleet_state_and_prometheus_scrapes_it() -> None:
    (config,) = load_yaml("prometheus/prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "relevo-exporter"]
    (exporters,) = [s for s in compose().values() if s.get("command", [""])[0] == "exporter"]
    assert job["static_configs"] == [{"targets": [f"exporter:{EXPORTER_PORT}"]}]
    assert exporters["command"] == ["exporter", "--config", "/etc/relevo/chain.toml"]
    assert str(EXPORTER_PORT) in exporters["healthcheck"]["test"][-1]
    deployment = k8s()["Deployment", "relevo-exporter"]
    assert deployment["spec"]["replicas"] == 1
    # Replaced, not rolled: two exporters would read Redis twice per scrape.
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(EXPORTER_PORT)
    (container,) = pod["spec"]["containers"]
    assert container["args"][0] == "exporter"
    assert "exporter.yaml" in (DEPLOY / "kubernetes/kustomization.yaml").read_text()


# --- kubernetes ------------------------------------------------------------------------


def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [
        doc
        for path in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
        for doc in load_yaml(f"kubernetes/{path.name}")
    ]
    return {(d["kind"], d.get("metadata", {}).get("name", "")): d for d in docs}


def test_k8s_worker_has_probes_resources_and_a_long_enough_grace_period() -> None:
    objects = k8s()
    chain = objects["ConfigMap", "relevo-chain"]["data"]["chain.toml"]
    assert chain == CHAIN.read_text()
    pod = objects["Deployment", "relevo-worker"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["terminationGracePeriodSeconds"] > tomllib.loads(chain)["turn_deadline_s"]
    (container,) = spec["containers"]
    ready = container["readinessProbe"]
    assert (
        'celery -A worker.fleet.app inspect ping --timeout 10 -d "relevo-0@${HOSTNAME}"'
        in " ".join(ready["exec"]["command"])
    )
    assert ready["timeoutSeconds"] > 10
    # Liveness asks the node itself, never Redis: an outage must restart no pod.
    alive = container["livenessProbe"]
    assert alive["httpGet"] == {"path": "/healthz", "port": 9464}
    assert "exec" not in alive
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    assert float(resources["limits"]["cpu"]) <= 2  # fits a 2-core node
    assert spec["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["REDIS_RELEVO_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "relevo-redis"
    assert env["RELEVO_REDIS__URL"]["value"].startswith("redis://relevo:$(REDIS_RELEVO_PASSWORD)@")
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == METRICS_PORT
    assert [p["containerPort"] for p in container["ports"]] == [METRICS_PORT]


def test_k8s_secrets_are_placeholders_and_redis_uses_the_acl() -> None:
    objects = k8s()
    for name in ("relevo-redis", "relevo-providers"):
        values = objects["Secret", name]["stringData"].values()
        assert all(value.startswith("FAKE") for value in values)
    files = objects["ConfigMap", "relevo-redis-config"]["data"]
    assert files == {p.name: p.read_text() for p in (DEPLOY / "redis").iterdir()}
    (redis_container,) = objects["StatefulSet", "redis"]["spec"]["template"]["spec"]["containers"]
    assert "--aclfile" in redis_container["command"]
    (kustomization,) = load_yaml("kubernetes/kustomization.yaml")
    manifests = {p.name for p in (DEPLOY / "kubernetes").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


# --- every Redis data node: a memory limit it refuses writes at, an append-only file ---

REDIS_CONF = DEPLOY / "redis/redis.conf"
MOUNTED = "/etc/relevo-redis"  # where compose and Kubernetes mount deploy/redis/
# Redis sizes ("256mb"), Kubernetes quantities ("512Mi") and compose's ("512m").
REDIS_UNITS = {"": 1, "k": 1000, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}
K8S_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1000, "M": 10**6, "G": 10**9}
COMPOSE_UNITS = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def size(value: str, units: dict[str, int]) -> int:
    """Bytes in `value`; a unit that is not one of `units` as written is tried in lower case."""
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", value)
    assert match, f"not a size: {value!r}"
    unit = match[2] if match[2] in units else match[2].lower()
    return int(match[1]) * units[unit]


def conf_directives(text: str) -> dict[str, str]:
    """A redis.conf's directives (name -> value), quotes removed."""
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.partition(" ")[::2] for line in lines if line and not line.startswith("#"))
    return {name.lower(): value.strip().strip('"') for name, value in pairs}


def server_settings(command: list[str]) -> dict[str, str]:
    """What a redis-server started by `command` runs with: the mounted redis.conf, then
    the options after it, which override it."""
    args = command[command.index("redis-server") + 1 :]
    assert args[0] == f"{MOUNTED}/redis.conf", "redis-server does not read the deploy's redis.conf"
    running = conf_directives(REDIS_CONF.read_text())
    starts = [i for i, arg in enumerate(args) if arg.startswith("--")] + [len(args)]
    for here, following in itertools.pairwise(starts):
        running[args[here][2:].lower()] = " ".join(args[here + 1 : following])
    return running


def redis_data_nodes() -> dict[str, tuple[dict[str, str], int]]:
    """Every Redis data node the deploy files run: its settings and its memory limit (bytes)."""
    base = compose()
    (layer,) = load_yaml("docker-compose.sentinel.yml")
    # Compose merges a service named in both files; a list such as `command` is replaced.
    layered = {**base, **{n: {**base.get(n, {}), **s} for n, s in layer["services"].items()}}
    nodes = {}
    for where, services in (("compose", base), ("compose+sentinel", layered)):
        for name, service in services.items():
            if "redis-server" in service.get("command", []):
                assert f"./redis:{MOUNTED}:ro" in service["volumes"], name
                limit = size(service["mem_limit"], COMPOSE_UNITS)
                nodes[f"{where}: {name}"] = (server_settings(service["command"]), limit)
    spec = k8s()["StatefulSet", "redis"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    (volume,) = [v for v in spec["volumes"] if v["name"] == mounted[MOUNTED]]
    assert volume["configMap"]["name"] == "relevo-redis-config"
    limit = size(container["resources"]["limits"]["memory"], K8S_UNITS)
    nodes["kubernetes: redis"] = (server_settings(container["command"]), limit)
    return nodes


def test_every_redis_refuses_writes_at_half_its_memory_and_keeps_an_append_only_file() -> None:
    nodes = redis_data_nodes()
    assert set(nodes) == {
        "compose: redis",
        "compose+sentinel: redis",
        "compose+sentinel: redis-replica-1",
        "compose+sentinel: redis-replica-2",
        "kubernetes: redis",
    }
    for name, (conf, limit) in nodes.items():
        assert conf["maxmemory-policy"] == "noeviction", name
        assert 0 < size(conf["maxmemory"], REDIS_UNITS) <= limit // 2, name
        assert (conf["appendonly"], conf["appendfsync"]) == ("yes", "everysec"), name


def test_the_memory_sizes_are_read_as_their_tools_read_them() -> None:
    """The helpers the check above relies on: sizes in each tool's units, options that
    override the file."""
    assert (
        size("256MB", REDIS_UNITS)
        == size("512Mi", K8S_UNITS) // 2
        == size("512m", COMPOSE_UNITS) // 2
    )
    assert size("3gb", REDIS_UNITS) == 3 * 2**30
    assert size("1M", K8S_UNITS) == 10**6
    assert server_settings(
        [
            "sh",
            "start.sh",
            "redis-server",
            f"{MOUNTED}/redis.conf",
            "--maxmemory",
            "1gb",
            "--replicaof",
            "redis",
            "6379",
        ]
    ) == {**conf_directives(REDIS_CONF.read_text()), "maxmemory": "1gb", "replicaof": "redis 6379"}


def started_redis(
    folder: Path, *options: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """redis-server on the deploy's redis.conf (through start.sh when `env` holds the
    passwords) on a free port, writing under `folder`; `options` override the file."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary to run the deploy's Redis configuration")
    port = free_port()
    command = [str(binary), str(REDIS_CONF), "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--dir", str(folder), *options]
    if env is not None:
        command = ["sh", str(DEPLOY / "redis/start.sh"), *command]
    proc = subprocess.Popen(
        command,
        env={"PATH": os.environ["PATH"], **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, port


def wait_answering(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis.from_url(url, socket_timeout=0.5) as client:
                client.ping()
            return
        except (redis.ConnectionError, AuthenticationError):
            assert proc.poll() is None, "redis-server refused its configuration"
            assert time.monotonic() < deadline, "redis-server never answered"
            time.sleep(0.05)


@pytest.fixture
def deploy_redis(tmp_path: Path) -> Iterator[Any]:
    """Start redis-servers on the deploy's redis.conf: `start(*options)` gives a URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*options: str) -> str:
        proc, port = started_redis(tmp_path, *options)
        procs.append(proc)
        url = f"redis://127.0.0.1:{port}/0"
        wait_answering(proc, url)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.redis
def test_a_redis_server_runs_with_the_deploy_settings(deploy_redis: Any) -> None:
    """redis-server reads deploy/redis/redis.conf as the check above does."""
    with redis.Redis.from_url(deploy_redis(), decode_responses=True) as client:
        running = client.config_get("*")
        aof = client.info("persistence")["aof_enabled"]
    wanted = conf_directives(REDIS_CONF.read_text())
    assert running["maxmemory"] == str(size(wanted["maxmemory"], REDIS_UNITS)) != "0"
    assert running["maxmemory-policy"] == "noeviction"
    assert (running["appendonly"], running["appendfsync"], aof) == ("yes", "everysec", 1)
    assert running["save"] == ""


async def written_until_refused(client: Any, writes: int = 200) -> int:
    """How many 64 KiB keys that expire (as relevo's do) Redis took before refusing one."""
    for written in range(writes):
        try:
            await client.set(f"filler:{written}", bytes(64 * 1024), ex=3600)
        except OutOfMemoryError:
            return written
    return writes


@pytest.mark.redis
async def test_a_full_redis_refuses_writes_keeps_every_key_and_workers_serve_locally(
    deploy_redis: Any, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At its limit the deploy's Redis refuses writes (OOM) rather than evict a spend or a
    queued turn; relevo takes that as the store unavailable, not as a refusal of the
    worker: the turn is answered from the worker's local view (docs/deploy.md)."""
    url = deploy_redis("--maxmemory", "3mb")  # the deploy's policy, a limit filled quickly
    client = breakers.connect(url, timeout_s=2)
    ledger = budgets.Ledger(client, namespace="full")
    try:
        await ledger.set_limits("acme", 5_000_000, 100_000_000)
        await ledger.reserve(
            "acme", "t1:0", provider="openai", micros=700, fallback=False, ttl_s=60
        )
        await ledger.settle("acme", "t1:0", 700)
        await client.lpush("full", "a queued turn")
        written = await written_until_refused(client)
        assert (await ledger.report("acme")).day.spent_micros == 700
        assert await client.llen("full") == 1
        assert written < 200
    finally:
        await client.aclose()
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    sim.reset()
    config = chain_settings(sim.url, redis={"url": url, "namespace": "full"})
    guard = open_guard(config)
    try:
        with capture_logs() as logs:
            result = await run(config, turn(), guard=guard)
    finally:
        await guard.aclose()
    assert (result.status, sim.calls()) == (Status.OK, 1)
    lost = [e for e in logs if e["event"] == "breakers.fleet_view_lost"]
    assert [e["error"] for e in lost] == ["OutOfMemoryError"]
    assert not [e for e in logs if "forbidden" in e["event"]]


# --- Redis ACL users, on a real server -------------------------------------------------

PASSWORDS = {
    "relevo": "workerpassword00000000",
    "producer": "producerpassword000000",
    "operator": "operatorpassword000000",
    "viewer": "viewerpassword00000000",
}


def start_sh(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(DEPLOY / "redis/start.sh"), *command],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )


def password_env(acl_file: Path, **overrides: str) -> dict[str, str]:
    env = {f"REDIS_{user.upper()}_PASSWORD": pw for user, pw in PASSWORDS.items()}
    return {**env, "ACL_FILE": str(acl_file), **overrides}


@pytest.mark.parametrize("password", ["short1", "has/slash0000000000", "has space 000000000", ""])
def test_start_sh_refuses_passwords_that_would_break_the_acl(tmp_path: Path, password: str) -> None:
    acl = tmp_path / "users.acl"
    done = start_sh(password_env(acl, REDIS_PRODUCER_PASSWORD=password), "true")
    assert done.returncode == 1
    assert "REDIS_PRODUCER_PASSWORD" in done.stderr
    assert not acl.exists()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private redis-server as the deploy starts it (start.sh, redis.conf, the rendered
    ACL file); yields each user's URL."""
    folder = tmp_path_factory.mktemp("acl")
    acl = folder / "users.acl"
    proc, port = started_redis(folder, "--aclfile", str(acl), env=password_env(acl))
    urls = {user: f"redis://{user}:{pw}@127.0.0.1:{port}/0" for user, pw in PASSWORDS.items()}
    urls["anonymous"] = f"redis://127.0.0.1:{port}/0"
    try:
        wait_answering(proc, urls["operator"])
        yield urls
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
async def clients(acl_server: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
    made = {user: breakers.connect(url, timeout_s=2) for user, url in acl_server.items()}
    yield made
    for client in made.values():
        await client.aclose()


async def test_anonymous_clients_are_refused(clients: dict[str, Any]) -> None:
    with pytest.raises(AuthenticationError):
        await clients["anonymous"].ping()


def test_producer_enqueues_a_turn(
    acl_server: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer user can do what `enqueue_turn` does, and the turn lands on the queue."""
    monkeypatch.setenv("RELEVO_REDIS__URL", acl_server["producer"])
    loaded_by_a_worker(acl_server)
    app = make_app(load_settings(CHAIN, require_secrets=False))
    request = json.loads((ROOT / "examples/turn.json").read_text())
    try:
        handle = enqueue_turn(request, app=app)
    finally:
        app.close()
    with redis.Redis.from_url(acl_server["operator"]) as operator:
        # Fair dispatch (on by default): the message waits in its tenant's fair queue.
        (message,) = operator.hvals("{relevo}:fair:msgs")
        assert operator.llen("{relevo}:fair:wake") == 1  # a dispatcher woken, by the producer
        names = ("pending", "msgs", "index", "seq", "ready", "vtime", "clock", "queued", "wake")
        operator.delete(*(f"{{relevo}}:fair:{name}" for name in names))
    assert handle.turn_id in message.decode()


def loaded_by_a_worker(acl_server: dict[str, str]) -> None:
    """The scripts the producer and the viewer run by SHA, loaded as a worker loads them."""

    async def load() -> None:
        worker = breakers.connect(acl_server["relevo"], timeout_s=2)
        try:
            await keep_scripts(worker, worker)
        finally:
            await worker.aclose()

    asyncio.run(load())


async def test_producer_reaches_nothing_but_the_queue_and_results(clients: dict[str, Any]) -> None:
    producer = clients["producer"]
    assert await producer.get("{relevo}:turn:t1:result") is None
    assert await producer.xread({"{relevo}:turn:t1:chunks": "0"}, count=1) == []  # streams
    assert await producer.get("celery-task-meta-t1") is None
    with pytest.raises(breakers.StoreForbiddenError) as kill:
        await breakers.KillSwitch(producer).on("mallory", "because")
    assert isinstance(kill.value.__cause__, NoPermissionError)
    with pytest.raises(NoPermissionError):
        await budgets.Ledger(producer).set_limits("acme", 10**9, 10**9)
    for command in (
        ("LPOP", "relevo"),
        ("HGETALL", "{relevo}:br:vendor:openai"),
        ("SET", "{relevo}:turn:t1:result", "forged"),
        ("XADD", "{relevo}:turn:t1:chunks", "*", "text", "forged"),
    ):
        with pytest.raises(NoPermissionError):
            await producer.execute_command(*command)


async def test_the_viewer_reads_every_console_page_and_writes_nothing(
    clients: dict[str, Any], acl_server: dict[str, str], tmp_path: Path
) -> None:
    """The console's viewer role on its own ACL user: each page's reads pass, every
    write the console's actions make is refused by Redis, scripts' writes included."""
    config = tmp_path / "chain.toml"
    url = acl_server["operator"]
    config.write_text(worker_config(sim="http://127.0.0.1:9", redis_url=url, namespace="relevo"))
    fleet = operator_fleet(str(config))
    operator, viewer = clients["operator"], clients["viewer"]
    await budgets.Ledger(operator).set_limits("viewed", 5_000_000, 100_000_000)
    await fleet.force(operator, "open", "vendor:openai", 60)
    await operator.lpush("relevo", "waiting")
    await keep_scripts(clients["relevo"], clients["relevo"])  # as the workers do
    try:
        view = await fleet_view(fleet, viewer)
        assert {s.scope: str(s.state) for s in view.report.scopes}["vendor:openai"] == "open"
        assert view.queued == 1, "the viewer reads the queue's length"
        assert "viewed" in [row.tenant for row in (await tenant_rows(fleet, viewer)).rows]
        tags = budgets.encode_labels(("agent",), {"agent": "a"}, 10)
        await budgets.Ledger(operator).settle("viewed", "c1", 5, labels=tags)
        shown = (await tenant_view(fleet, viewer, "viewed")).report
        assert shown is not None
        assert shown.day.by("agent").values == {"a": 5}
        assert (await turn_view(fleet, viewer, "t1")).result is None
        for write in (
            breakers.KillSwitch(viewer).on("mallory", "because"),
            fleet.force(viewer, "close", "vendor:openai"),
            budgets.Ledger(viewer).set_limits("viewed", 1, 2),
            viewer.xadd("{relevo}:console:audit", {"who": "mallory"}),
            viewer.lpop("relevo"),
        ):
            with pytest.raises(
                (breakers.StoreUnavailableError, breakers.StoreForbiddenError, NoPermissionError)
            ):
                await write
        assert await breakers.KillSwitch(operator).status() is None
        # Only the two scripts the pages run: no EVAL, no script loaded, its own or another's.
        endless = "while true do end"
        sha = await clients["relevo"].script_load(endless)
        for command in (
            ("EVAL", endless, 0),
            ("EVAL_RO", endless, 0),
            ("EVALSHA", sha, 0),
            ("SCRIPT", "LOAD", endless),
        ):
            with pytest.raises(NoPermissionError):
                await viewer.execute_command(*command)
    finally:
        await fleet.force(operator, "reset", "vendor:openai")
        await operator.delete("relevo")


def test_the_viewer_acl_names_the_scripts_the_console_runs() -> None:
    """users.acl.in lets the viewer run exactly these scripts' SHA1s: a change to either
    script (or to the Lua libraries prepended to it) must change the file too."""
    from breakers.scripts import SCRIPTS as BREAKER_SCRIPTS
    from budgets.scripts import SCRIPTS as BUDGET_SCRIPTS

    line = next(
        line
        for line in (DEPLOY / "redis/users.acl.in").read_text().splitlines()
        if line.startswith("user viewer ")
    )
    rules = line.replace("(", " ").replace(")", " ").split()
    allowed = {rule.split("|", 1)[1] for rule in rules if rule.startswith("+evalsha|")}
    wanted = {BREAKER_SCRIPTS._shas["inspect"], BUDGET_SCRIPTS._shas["report"]}
    assert allowed == wanted
    assert not {"+eval", "+evalsha", "+@scripting", "+script|load"} & set(rules)


def test_the_producer_acl_names_the_fair_queues_enqueue_script() -> None:
    """The producer runs one script, by its SHA1 (the workers load it): a change to the
    script or its libraries must change the file too."""
    from worker.fleet.fairqueue import SCRIPTS as FAIR_SCRIPTS

    line = next(
        line
        for line in (DEPLOY / "redis/users.acl.in").read_text().splitlines()
        if line.startswith("user producer ")
    )
    rules = line.replace("(", " ").replace(")", " ").split()
    allowed = {rule.split("|", 1)[1] for rule in rules if rule.startswith("+evalsha|")}
    assert allowed == {FAIR_SCRIPTS.sha("enqueue")}
    assert not {"+eval", "+evalsha", "+@scripting", "+script|load", "+@connection"} & set(rules)


async def test_operator_flips_the_kill_switch_and_workers_see_it(clients: dict[str, Any]) -> None:
    operator, worker = clients["operator"], clients["relevo"]
    await budgets.Ledger(operator).set_limits("acme", 5_000_000, 100_000_000)
    await breakers.KillSwitch(operator).on("alice", "acl test")
    try:
        state = await breakers.KillSwitch(worker).status()
        assert state is not None
        assert state.who == "alice"
    finally:
        await breakers.KillSwitch(operator).off("alice")
    held = await budgets.Ledger(worker).reserve(
        "acme", "turn-acl:0", provider="openai", micros=1_000, fallback=False, ttl_s=60
    )
    assert isinstance(held, budgets.Reservation)


@pytest.mark.parametrize("user", ["relevo", "operator"])
async def test_no_relevo_user_administers_the_server(clients: dict[str, Any], user: str) -> None:
    for command in (
        ("CONFIG", "GET", "*"),
        ("FLUSHALL",),
        ("KEYS", "*"),
        ("ACL", "LIST"),
        ("GET", "otherapp:secret"),
    ):
        with pytest.raises(NoPermissionError):
            await clients[user].execute_command(*command)


# --- Sentinel: the compose layer, and the replica and sentinel ACL users on real servers ---


def test_compose_sentinel_layer_fails_over_through_three_sentinels_as_acl_users() -> None:
    (doc,) = load_yaml("docker-compose.sentinel.yml")
    services = doc["services"]
    sentinels = [name for name in services if name.startswith("sentinel-")]
    assert len(sentinels) == 3
    script = services["sentinel-1"]["command"][-1]
    assert "sentinel monitor relevo redis 6379 2" in script
    assert "sentinel auth-user relevo sentinel" in script
    replicas = [name for name in services if name.startswith("redis-replica-")]
    for name in replicas:
        replica = services[name]["command"]
        assert replica[replica.index("--replicaof") + 1 :][:2] == ["redis", "6379"]
        assert replica[replica.index("--masteruser") + 1] == "replica"
    primary = services["redis"]["command"]
    # Writes need this many replicas: one more keeps writes going while one restarts.
    assert 1 <= int(primary[primary.index("--min-replicas-to-write") + 1]) < len(replicas)
    for name in ("worker-1", "worker-2"):
        env = services[name]["environment"]
        assert env["RELEVO_REDIS__SENTINEL_MASTER"] == "relevo"
        # As compose fills it in: each ${...} is the password.
        parts = re.sub(r"\$\{[^}]*\}", "pw", env["RELEVO_REDIS__URL"]).split(";")
        assert [urlparse(p).hostname for p in parts] == sentinels
    assert set(services) - set(compose()) == {*replicas, *sentinels}


SENTINEL_PASSWORDS = {
    "REDIS_REPLICA_PASSWORD": "replicapassword0000000",
    "REDIS_SENTINEL_PASSWORD": "sentinelpassword000000",
}


def test_start_sh_leaves_the_sentinel_users_out_unless_their_passwords_are_set(
    tmp_path: Path,
) -> None:
    acl = tmp_path / "users.acl"
    assert start_sh(password_env(acl, REDIS_VIEWER_PASSWORD=""), "true").returncode == 0
    users = [line.split()[1] for line in acl.read_text().splitlines() if line]
    assert users == ["default", "relevo", "producer", "operator"]
    assert start_sh(password_env(acl), "true").returncode == 0
    assert "user viewer on" in acl.read_text()
    assert start_sh(password_env(acl, **SENTINEL_PASSWORDS), "true").returncode == 0
    assert "user replica on" in acl.read_text()
    assert "user sentinel on" in acl.read_text()


@pytest.mark.slow
def test_a_sentinel_fails_over_a_primary_and_replica_that_use_the_acl(tmp_path: Path) -> None:
    """The replica and sentinel users can do their jobs, and nothing needs the default user."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_unless_ci("no redis-server binary to check the Sentinel users on")
    env = {"PATH": os.environ["PATH"], **password_env(tmp_path / "users.acl", **SENTINEL_PASSWORDS)}
    primary, replica, sentinel = free_port(), free_port(), free_port()
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    replica_args = ["--replicaof", "127.0.0.1", str(primary), "--masteruser", "replica"]
    replica_args += ["--masterauth", SENTINEL_PASSWORDS["REDIS_REPLICA_PASSWORD"]]
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\nsentinel monitor relevo 127.0.0.1 {primary} 1\n"
        "sentinel down-after-milliseconds relevo 500\nsentinel failover-timeout relevo 5000\n"
        "sentinel auth-user relevo sentinel\n"
        f"sentinel auth-pass relevo {SENTINEL_PASSWORDS['REDIS_SENTINEL_PASSWORD']}\n",
        encoding="utf-8",
    )
    procs = []
    for port, extra in ((primary, []), (replica, replica_args)):
        acl = tmp_path / f"users-{port}.acl"
        procs.append(
            subprocess.Popen(
                [
                    *("sh", str(DEPLOY / "redis/start.sh"), binary, "--port", str(port)),
                    *(*common, *extra, "--aclfile", str(acl)),
                ],
                env={**env, "ACL_FILE": str(acl)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    procs.append(
        subprocess.Popen(
            [binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    )
    watcher = redis.Redis(port=sentinel, socket_timeout=0.5, decode_responses=True)
    operator = {"username": "operator", "password": PASSWORDS["operator"], "socket_timeout": 0.5}
    try:

        def replica_linked() -> bool:
            try:
                with redis.Redis(port=replica, **operator) as client:
                    return client.info("replication").get("master_link_status") == "up"
            except redis.RedisError:
                return False

        def sentinel_knows_the_replica() -> bool:
            try:
                return bool(watcher.execute_command("SENTINEL", "REPLICAS", "relevo"))
            except redis.RedisError:
                return False

        wait_until(replica_linked, 15)
        wait_until(sentinel_knows_the_replica, 15)
        procs[0].kill()  # the primary
        procs[0].wait(timeout=10)

        def promoted() -> bool:
            try:
                _, port = watcher.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "relevo")
                with redis.Redis(port=replica, **operator) as client:
                    return int(port) == replica and client.info("replication")["role"] == "master"
            except redis.RedisError:
                return False

        wait_until(promoted, 20)
    finally:
        watcher.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def wait_until(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{check.__name__} not within {timeout_s} s"
        time.sleep(0.1)


async def test_workers_and_operators_may_migrate_old_budget_keys(clients: dict[str, Any]) -> None:
    """Nothing the migration sends is refused to the `relevo` and `operator` users (no
    RESTORE: it is @dangerous)."""
    operator = clients["operator"]
    for user, tenant in (("relevo", "old-w"), ("operator", "old-o")):
        await operator.hset(f"{{relevo}}:budget:t:{tenant}:limits", "daily", 7)
        await operator.zadd(f"{{relevo}}:budget:t:{tenant}:holds", {"turn-1:0": 1})
        report = await budgets.migrate_keys(clients[user], "relevo")
        assert (report.moved, report.tenants) == (2, 1), user
        assert await operator.hget(f"{{relevo/{tenant}}}:budget:limits", "daily") == b"7"
        await operator.delete(*(f"{{relevo/{tenant}}}:budget:{k}" for k in ("limits", "holds")))
