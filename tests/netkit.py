"""Network helpers for tests: no imports from the packages under test."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago; nothing listens on it now.

    Use it for a server the test is about to start, or as a port that refuses connections.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
