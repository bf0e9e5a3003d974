"""Google OAuth access tokens for Vertex AI, from application-default credentials.

google-auth finds the credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
application-default login, the metadata server of GCE, GKE or Cloud Run) and
refreshes them; both are blocking I/O, so they run in a thread, one at a time per
provider, while every other call waits for that one refresh instead of starting its
own. A token is refreshed a few minutes before it expires, never on the way to a call
that would be refused. The token itself is never logged nor put in an error.

google-auth is imported here, on the first refresh, and only by this module.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

from worker.errors import AuthFailed, ConnectionFailed, ProviderError, ServerError
from worker.observability.redact import redact_text

__all__ = ["REFRESH_MARGIN_S", "SCOPES", "AccessToken"]

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# Tokens live an hour. Refreshing this long before the expiry leaves room for clock skew
# and for a call that starts just before it (google-auth's own threshold is 3m45s).
REFRESH_MARGIN_S = 300.0
_MESSAGE_CHARS = 200


class AccessToken:
    """The current Bearer token of one provider, refreshed before it expires."""

    def __init__(self, *, timeout_s: float, margin_s: float = REFRESH_MARGIN_S) -> None:
        """`timeout_s` bounds each request to the token endpoint."""
        self._timeout_s = timeout_s
        self._margin_s = margin_s
        self._credentials: Any = None
        self._transport: Any = None
        self._thread_lock = threading.Lock()
        self._flight: asyncio.Lock | None = None
        self._tokens: tuple[str, ...] = ()
        self._refused: str | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        """The current and the previous token (a call may still carry it): to redact."""
        return self._tokens

    async def refresh_if_needed(self) -> None:
        """Make the token good for a call made now; waits for a refresh in flight."""
        if self._fresh():
            return
        if self._flight is None:
            self._flight = asyncio.Lock()
        async with self._flight:
            if not self._fresh():
                await asyncio.to_thread(self._refresh)

    def headers(self) -> dict[str, str]:
        """`authorization` (and google-auth's other headers) with the current token;
        empty before the first refresh."""
        headers: dict[str, str] = {}
        if self._credentials is not None and self._credentials.token:
            self._credentials.apply(headers)
        return headers

    def refused(self) -> None:
        """The provider refused the current token (revoked, or expired by its clock):
        the next call refreshes first."""
        if self._tokens:
            self._refused = self._tokens[0]

    def _fresh(self) -> bool:
        credentials = self._credentials
        if credentials is None or not credentials.token or credentials.token == self._refused:
            return False
        expiry: datetime | None = credentials.expiry
        if expiry is None:
            return True
        if expiry.tzinfo is None:  # google-auth keeps naive UTC
            expiry = expiry.replace(tzinfo=UTC)
        return (expiry - datetime.now(UTC)).total_seconds() > self._margin_s

    def _refresh(self) -> None:
        """In a worker thread: load the credentials once, then refresh them."""
        with self._thread_lock:
            if self._fresh():
                return  # a refresh that a cancelled caller started finished meanwhile
            try:
                self._refresh_locked()
            except ProviderError:
                raise
            except Exception as exc:
                raise self._translated(exc) from None

    def _refresh_locked(self) -> None:
        import google.auth
        import google.auth.transport.requests

        if self._credentials is None:
            credentials, _ = google.auth.default(scopes=list(SCOPES))
            self._transport = google.auth.transport.requests.Request()
            self._credentials = credentials
        timeout = self._timeout_s

        def request(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout)
            return self._transport(*args, **kwargs)

        before = self._credentials.token
        self._credentials.refresh(request)
        token = self._credentials.token
        if not isinstance(token, str) or not token:
            raise AuthFailed("the Google token endpoint returned no access token")
        self._tokens = (token, before) if isinstance(before, str) and before else (token,)

    def _translated(self, exc: Exception) -> ProviderError:
        from google.auth import exceptions

        detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
        detail = " ".join(redact_text(detail, self._tokens).split())[:_MESSAGE_CHARS]
        if isinstance(exc, exceptions.DefaultCredentialsError):
            return AuthFailed(f"no Google application-default credentials: {detail}")
        if isinstance(exc, exceptions.TransportError):
            return ConnectionFailed(f"the Google token endpoint could not be reached: {detail}")
        if isinstance(exc, exceptions.RefreshError):
            if getattr(exc, "retryable", False):
                return ServerError(f"the Google token endpoint failed: {detail}")
            return AuthFailed(f"the Google credentials were refused: {detail}")
        return AuthFailed(f"Google credentials failed: {type(exc).__name__}")
