"""AWS SigV4 request signing as an `httpx.Auth`, with botocore's credential chain.

botocore is an optional extra (`pip install 'relevo[bedrock]'`), imported here and only
when a request is signed. Credentials come from botocore's standard chain (environment,
shared config and credentials files, container or instance role); looking them up, and
refreshing them when they are about to expire, may block on files or the network, so it
runs in a thread, never on the event loop. Signing itself is a few HMACs over the method,
the URL, the headers named below and the body, as they are sent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx

from worker.errors import AuthFailed

if TYPE_CHECKING:
    from botocore.credentials import Credentials, ReadOnlyCredentials

__all__ = ["SigV4"]

# Signed besides what SigV4 adds (x-amz-date, x-amz-security-token): headers the transport
# sends as given. Others (content-length, accept-encoding) it may write its own way.
_SIGNED_HEADERS = ("host", "content-type", "accept")


class SigV4(httpx.Auth):
    """Signs each request for `service` in `region` with the current credentials (async
    clients only: the credential chain may block)."""

    requires_request_body = True

    def __init__(self, *, service: str, region: str) -> None:
        self._service = service
        self._region = region
        self._chain = _CredentialChain()

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret keys and session tokens of the current and previous credentials (a
        call may still carry the previous ones): to redact."""
        return self._chain.secrets

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        credentials = await self._chain.frozen()
        body = await request.aread()
        _sign(request, body, credentials, self._service, self._region)
        yield request


def _sign(
    request: httpx.Request,
    body: bytes,
    credentials: ReadOnlyCredentials,
    service: str,
    region: str,
) -> None:
    """Add X-Amz-Date, X-Amz-Security-Token and Authorization to `request`."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    headers = {name: request.headers[name] for name in _SIGNED_HEADERS if name in request.headers}
    signed = AWSRequest(method=request.method, url=str(request.url), data=body, headers=headers)
    SigV4Auth(credentials, service, region).add_auth(signed)
    request.headers.update(dict(signed.headers.items()))


class _CredentialChain:
    """botocore's credential chain, looked up once and re-read when it is due to expire."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # adapters are shared by threads with their own loops
        self._source: Credentials | None = None
        self._frozen: ReadOnlyCredentials | None = None
        self._secrets: tuple[str, ...] = ()

    @property
    def secrets(self) -> tuple[str, ...]:
        return self._secrets

    async def frozen(self) -> ReadOnlyCredentials:
        """Credentials to sign one request with."""
        frozen, source = self._frozen, self._source
        # refresh_needed() only compares the expiry with the clock; the refresh may block.
        if frozen is None or (source is not None and _refresh_needed(source)):
            frozen = await asyncio.to_thread(self._load)
        return frozen

    def _load(self) -> ReadOnlyCredentials:
        import botocore.exceptions
        import botocore.session

        with self._lock:
            try:
                if self._source is None:
                    self._source = botocore.session.Session().get_credentials()
                if self._source is None:
                    raise AuthFailed(
                        "no AWS credentials found (environment, shared config or credentials "
                        "file, container or instance role)"
                    )
                frozen = self._source.get_frozen_credentials()
            except botocore.exceptions.BotoCoreError as exc:
                # The chain's own errors name a profile or a provider, never a secret.
                raise AuthFailed(f"AWS credentials unavailable: {type(exc).__name__}") from None
            current = tuple(s for s in (frozen.secret_key, frozen.token) if s)
            self._secrets = tuple(dict.fromkeys((*current, *self._secrets[:2])))
            self._frozen = frozen
            return frozen


def _refresh_needed(source: Credentials) -> bool:
    check = getattr(source, "refresh_needed", None)
    return bool(check()) if callable(check) else False
