"""What a canned error is made of, and the answers any provider's proxy may give."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.simulator.faults import StreamPayload

__all__ = ["JSON", "PROXIES", "CannedError", "StreamPayload", "header_args"]


@dataclass(frozen=True, slots=True)
class CannedError:
    """One provider error response: status, body and headers as sent on the wire."""

    status: int
    body: bytes | str | dict[str, Any] | list[Any]
    headers: dict[str, str] = field(default_factory=dict)

    def body_bytes(self) -> bytes:
        """The body as the server writes it (dicts as compact JSON)."""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body, separators=(",", ":")).encode()


JSON = {"content-type": "application/json"}

PROXIES: dict[str, CannedError] = {
    "proxy_502_html": CannedError(
        502,
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
        "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n"
        "</body>\r\n</html>\r\n",
        {"content-type": "text/html", "server": "cloudflare"},
    ),
    "empty_503": CannedError(503, b"", {"content-length": "0"}),
}
"""What a proxy in front of any provider may answer: an HTML 502 page as Cloudflare or
nginx serve it, an empty 503."""


def header_args(kwargs: Mapping[str, str]) -> dict[str, str]:
    """Keyword arguments as header names: `retry_after` is `retry-after`."""
    return {name.replace("_", "-"): value for name, value in kwargs.items()}
