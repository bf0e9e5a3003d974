"""Reaching providers from behind a company's egress: its proxy and its own CA.

The simulator is served over TLS with a certificate from a throwaway CA; the proxy is a
real CONNECT proxy on loopback. Turns go through the chain over real HTTP.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.chainkit import KEY, run, settings, turn
from tests.netkit import ConnectProxy, free_port
from tests.test_security_kit import Tls, make_tls
from worker.errors import ConfigError
from worker.simulator import Simulator
from worker.types import Status

CHAIN = ("openai/alpha", "anthropic/beta")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def simulator(tls: Tls, monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    with Simulator(tls=context) as sim:
        yield sim


def _config(sim: Simulator, **http: Any) -> Any:
    return settings(sim.url, CHAIN, http=http)


async def test_a_private_ca_is_refused_unless_configured(simulator: Simulator, tls: Tls) -> None:
    refused = await run(_config(simulator), turn())
    assert refused.status is Status.FAILED
    assert {a.error_class for a in refused.attempts} == {"connection_error"}
    assert all("CERTIFICATE_VERIFY_FAILED" in (a.detail or "") for a in refused.attempts)
    assert simulator.calls() == 0

    answered = await run(_config(simulator, ca_bundle=str(tls.ca)), turn())
    assert answered.status is Status.OK
    assert answered.step == 0


async def test_the_environments_ca_file_is_trusted(
    simulator: Simulator, tls: Tls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))
    assert (await run(_config(simulator), turn())).status is Status.OK
    assert (await run(_config(simulator, trust_env=False), turn())).status is Status.FAILED


async def test_the_environments_proxy_carries_the_calls_and_no_proxy_skips_it(
    simulator: Simulator, tls: Tls, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = simulator.url.removeprefix("https://")
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        result = await run(_config(simulator, ca_bundle=str(tls.ca)), turn(stream=True))
        assert result.status is Status.OK
        assert proxy.tunnels == [(target, None)]

        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert (await run(_config(simulator, ca_bundle=str(tls.ca)), turn())).status is Status.OK
        monkeypatch.delenv("NO_PROXY")
        config = _config(simulator, ca_bundle=str(tls.ca), trust_env=False)
        assert (await run(config, turn())).status is Status.OK
        assert len(proxy.tunnels) == 1  # neither went through the proxy


async def test_a_configured_proxy_authenticates_and_its_password_stays_secret(
    simulator: Simulator, tls: Tls
) -> None:
    password = "proxy-pass-0123456789"
    with ConnectProxy() as proxy:
        url = proxy.url.replace("http://", f"http://alice:{password}@")
        config = _config(simulator, ca_bundle=str(tls.ca), proxy_url=url)
        assert (await run(config, turn())).status is Status.OK
    target = simulator.url.removeprefix("https://")
    assert proxy.tunnels == [(target, "Basic YWxpY2U6cHJveHktcGFzcy0wMTIzNDU2Nzg5")]

    # The proxy is gone: the attempts fail, and nothing they report carries the password.
    dead = f"http://alice:{password}@127.0.0.1:{free_port()}"
    with structlog.testing.capture_logs() as logs:
        failed = await run(_config(simulator, ca_bundle=str(tls.ca), proxy_url=dead), turn())
    assert failed.status is Status.FAILED
    assert password not in failed.to_json()
    assert password not in repr(logs)


def test_a_ca_bundle_that_is_not_there_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELEVO_TEST_KEY", KEY)
    missing = tmp_path / "corporate-ca.pem"
    with pytest.raises(ConfigError, match=r"http\.ca_bundle: .*no file at .*corporate-ca\.pem"):
        settings("http://127.0.0.1:1", CHAIN, http={"ca_bundle": str(missing)})
