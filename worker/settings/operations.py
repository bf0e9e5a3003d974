"""What operators see and reach: logs, metrics and traces, the console, the egress proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, field_validator

from worker.settings.base import Section


class ObservabilitySettings(Section):
    """Logs, the metrics endpoint, the fleet fallback-rate alert and traces."""

    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """The port of `relevo worker`'s Prometheus endpoint (0: off)."""
    # Loopback: tenant ids and spend are not for every host on the network. A deployment
    # whose Prometheus runs elsewhere sets the address (deploy/chain.toml does).
    metrics_addr: str = "127.0.0.1"
    """The address the metrics endpoints (`relevo worker`, `relevo exporter`) listen on."""
    metrics_token_file: Path | None = None
    """A file holding the bearer token every scrape must send (a mounted secret);
    `RELEVO_METRICS_TOKEN` holds the same. Unset and unset: no token asked."""
    exporter_snapshot_every_s: float = Field(default=15.0, ge=1, le=3600)
    """How often `relevo exporter` reads every tenant again, in the background."""
    exporter_max_tenants: int = Field(default=1000, ge=0, le=10_000)
    """The most tenants with series of their own in each of the exporter's tenant
    families: those nearest their budget, and those with the most turns queued or running."""
    fallback_alert_threshold: float = Field(default=0.10, gt=0, lt=1)
    """The fallback-rate warning: above this share of turns with `step` >= 1..."""
    fallback_window_s: float = Field(default=300.0, gt=0, le=86_400)
    """...over this window..."""
    # 1 of 2 is not 50 %.
    fallback_min_turns: int = Field(default=20, ge=1)
    """...once at least this many turns are in it."""
    log_json: bool | None = None
    """JSON log lines; unset, JSON unless the output is a terminal."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """relevo's own lines at this level and above; Celery's, kombu's and redis-py's join the
    same stream, each with its `logger` name (warnings and above; everything at `debug`)."""
    log_content: bool = False
    """Keep the turns and results in Celery's task lines, prompts and replies included:
    for debugging only. Off, no log line holds a prompt, reply, tool argument or tool output."""
    tracing: bool = False
    """OpenTelemetry spans (`pip install 'relevo[otel]'`; docs/observability.md)."""
    # Unused when the process has set up its own tracer provider.
    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://")
    """The collector's OTLP/HTTP URL (`/v1/traces` is added); unset, the
    `OTEL_EXPORTER_OTLP_*` variables, else `http://localhost:4318`."""


class ConsoleSettings(Section):
    """`relevo console`: where it listens, who may log in, how each role reaches Redis."""

    host: str = "127.0.0.1"
    """Where the console listens: loopback; put a TLS-terminating proxy in front to serve
    it further."""
    port: int = Field(default=8800, ge=0, le=65535)
    """The console's port."""
    tokens_file: Path | None = None
    """A file of `NAME ROLE TOKEN` lines (a mounted secret); `RELEVO_CONSOLE_TOKENS`
    holds the same."""
    viewer_redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    """The viewer role's Redis user (deploy/redis/users.acl.in); unset, `[redis] url`."""
    operator_redis_url: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    """The operator role's Redis user; unset, `[redis] url`."""
    poll_interval_s: float = Field(default=2.0, ge=0.5, le=60)
    """How often the pages read the fleet again."""
    session_ttl_s: float = Field(default=8 * 3600, gt=0, le=7 * 86_400)
    """How long a login lasts."""
    sessions_per_token: int = Field(default=20, ge=1, le=1000)
    """Sessions one token may hold; its next login past this ends its own oldest one."""
    logins_per_minute: int = Field(default=20, ge=1, le=10_000)
    """Login attempts a minute from one client address, and logins of one token."""
    hosts: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9.:\[\]-]{1,253}$")], ...] = ()
    """The names browsers reach the console by (Host header), e.g. the TLS proxy's public
    name; empty: the loopback names and `host`."""
    trusted_proxies: tuple[IPvAnyNetwork, ...] = ()
    """Addresses or networks (CIDR) of the proxies whose X-Forwarded-Proto/-For/-Host are
    believed; anyone else's are ignored."""


class HttpSettings(Section):
    """How the worker reaches providers: the egress proxy and the CAs it trusts."""

    trust_env: bool = True
    """Honour `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (any case, as curl reads them), and
    `SSL_CERT_FILE` / `SSL_CERT_DIR` when `ca_bundle` is not set, for calls to providers."""
    proxy_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """One egress proxy for every provider, over the environment's (`NO_PROXY` does not
    apply to it): `http://user:password@proxy:3128`, the password redacted like a key."""
    ca_bundle: Path | None = None
    """A PEM file of the CAs to trust instead of the system's (a TLS-inspecting proxy, a
    private endpoint)."""

    @field_validator("ca_bundle")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no file at {path}")
        return path
