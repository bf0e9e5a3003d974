"""The console as a person meets it: `relevo console` in a process, Chromium driven by Selenium.

`http_console` serves the application to an httpx client in this process (the HTTP
tests); `log_in` logs that client in. `console_process` starts `relevo console --config
FILE` with the given tokens and waits for its port; `chromium()` starts the
distribution's Chromium (headless, no network features, a fresh profile) through its
chromedriver, never downloading anything. Both skip locally when the browser is not
installed, and fail in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.chainkit import write_worker_config
from tests.conftest import skip_unless_ci
from tests.netkit import free_port
from worker.console import build_app
from worker.console.app import Clients
from worker.console.auth import Tokens
from worker.console.server import console_settings
from worker.fleet.operations import operator_fleet
from worker.settings import ConsoleSettings, RedisSettings

__all__ = [
    "BASE",
    "CHROMEDRIVER",
    "CHROMIUM",
    "chromium",
    "console_config",
    "console_process",
    "csrf_of",
    "http_console",
    "log_in",
]

BASE = "http://testserver"


def console_config(tmp_path: Path, redis_url: str, namespace: str) -> Path:
    """A fleet's configuration for the console alone: its providers never answer."""
    path = tmp_path / "chain.toml"
    return write_worker_config(
        path, sim="http://127.0.0.1:9", redis_url=redis_url, namespace=namespace
    )


@asynccontextmanager
async def http_console(
    config: Path,
    redis_url: str,
    tokens: Tokens,
    *,
    peer: tuple[str, int] = ("127.0.0.1", 50000),
    **console: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """The console of `config` (with `console` over its `[console]`), on `redis_url`, to
    an httpx client at BASE that connects from `peer`."""
    fleet = operator_fleet(str(config))
    given = console_settings(fleet).model_dump()
    settings = ConsoleSettings.model_validate({**given, "hosts": ("testserver",), **console})
    where = RedisSettings(url=redis_url)
    clients = Clients(viewer=where.connect(timeout_s=1), operator=where.connect(timeout_s=1))
    app = build_app(fleet, settings, tokens, clients)
    transport = httpx.ASGITransport(app=app, client=peer)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            yield http
    finally:
        await clients.viewer.aclose()
        await clients.operator.aclose()


def csrf_of(html: str) -> str:
    """The first CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


async def log_in(client: httpx.AsyncClient, token: str) -> str:
    """Log in; the session's CSRF token."""
    nonce = csrf_of((await client.get("/login")).text)
    response = await client.post("/login", data={"csrf": nonce, "token": token})
    assert response.status_code == 303, response.text
    return csrf_of((await client.get("/")).text)


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1200,760",
)


@contextmanager
def console_process(config: Path, env: Mapping[str, str]) -> Iterator[str]:
    """`relevo console` on a free loopback port; its base URL (no trailing slash)."""
    port = free_port()
    # A file, not a pipe: nobody reads the console's logs while it runs, and a full pipe blocks.
    output = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "console",
            "--config",
            str(config),
            "--port",
            f"{port}",
        ],
        env={**os.environ, **env},
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{url}/login", timeout=0.5)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output.seek(0)
                    out = output.read().decode(errors="replace")
                    raise RuntimeError(f"relevo console did not start: {out[-2000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        output.close()


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session (a selenium WebDriver) with a profile of its own."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        skip_unless_ci(
            f"no {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        )
    # Never let Selenium Manager look for (or download) a browser or a driver.
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="relevo-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
