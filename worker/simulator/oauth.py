"""A Google OAuth token endpoint, and the Bearer check of the simulated Vertex AI routes.

    POST /token    grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT
                   -> {"access_token": "ya29.…", "expires_in": N, "token_type": "Bearer"}

google-auth's service-account credentials post here when their `token_uri` points at
the simulator, so tests run its real refresh flow. Tokens live `lifetime_s` (an hour,
as Google's do, unless a test shortens it); a Vertex call with a token that is missing,
unknown or expired gets Google's 401 UNAUTHENTICATED. The token endpoint follows the
faults queued under `TOKEN_ENDPOINT`, like a model: an error status, latency, a stall.
The assertion is read, not verified: its claims must name Google's token endpoint as
their audience (google-auth always does) and a scope.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import threading
import time
from typing import Any

__all__ = ["TOKEN_ENDPOINT", "TOKEN_PATH", "TokenIssuer", "read_assertion"]

TOKEN_ENDPOINT = "oauth2-token"  # noqa: S105 - a name, not a secret
"""The name the token endpoint's calls and faults go under (as a model's do)."""
TOKEN_PATH = "/token"  # noqa: S105 - a route, not a secret
DEFAULT_LIFETIME_S = 3600.0
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_AUDIENCE = "https://oauth2.googleapis.com/token"


class TokenIssuer:
    """The access tokens handed out, and how long each is good for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        self.lifetime_s = DEFAULT_LIFETIME_S

    def issue(self) -> dict[str, Any]:
        """A new token, as the token endpoint's JSON answer."""
        token = f"ya29.sim-{secrets.token_urlsafe(24)}"
        lifetime = self.lifetime_s
        with self._lock:
            now = time.monotonic()
            self._expiry = {t: at for t, at in self._expiry.items() if at > now}
            self._expiry[token] = now + lifetime
        return {"access_token": token, "expires_in": int(lifetime), "token_type": "Bearer"}

    def check(self, authorization: str | None) -> str | None:
        """None when `authorization` carries a live token, else why it is refused."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "CREDENTIALS_MISSING"
        with self._lock:
            expiry = self._expiry.get(token.strip())
        if expiry is None:
            return "INVALID_CREDENTIALS"
        return "ACCESS_TOKEN_EXPIRED" if time.monotonic() >= expiry else None


def read_assertion(form: dict[str, str]) -> str | None:
    """None when `form` is a JWT-bearer grant for Google's endpoint, else what is wrong."""
    if form.get("grant_type") != _JWT_BEARER:
        return "unsupported_grant_type"
    parts = form.get("assertion", "").split(".")
    if len(parts) != 3:
        return "invalid_grant"
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, binascii.Error):
        return "invalid_grant"
    if not isinstance(claims, dict) or claims.get("aud") != _AUDIENCE or not claims.get("scope"):
        return "invalid_grant"
    return None
