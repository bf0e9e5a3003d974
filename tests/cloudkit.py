"""Credentials for the simulated clouds: AWS keys the simulator's Bedrock accepts, and a
Google service account whose token endpoint is the simulator's. No real account, no
network beyond loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from worker.simulator.bedrock_wire import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY

GCP_PROJECT = "my-project"


def use_simulated_aws(
    monkeypatch: pytest.MonkeyPatch, where: Path, session_token: str | None = None
) -> None:
    """The simulator's AWS credentials in the environment; no file, profile or role to find."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET_ACCESS_KEY)
    if session_token is None:
        monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    else:
        monkeypatch.setenv("AWS_SESSION_TOKEN", session_token)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(where / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(where / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def simulated_service_account(token_uri: str, where: Path) -> Path:
    """A service-account key file (a fresh RSA key) whose token endpoint is `token_uri`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": GCP_PROJECT,
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": f"relevo@{GCP_PROJECT}.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }
    path = where / "service-account.json"
    path.write_text(json.dumps(info), encoding="utf-8")
    return path
