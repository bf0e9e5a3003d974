"""The console as a person meets it: `relevo console` in a process, Chromium driven by Selenium.

`console_process` starts `relevo console --config FILE` with the given tokens and waits
for its port; `chromium()` starts the distribution's Chromium (headless, no network
features, a fresh profile) through its chromedriver, never downloading anything. Both
skip locally when the browser is not installed, and fail in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import skip_unless_ci
from tests.netkit import free_port

__all__ = ["CHROMEDRIVER", "CHROMIUM", "chromium", "console_process"]

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
