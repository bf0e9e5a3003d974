"""Network helpers for tests: no imports from the packages under test."""

from __future__ import annotations

import asyncio
import socket
import threading


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago; nothing listens on it now.

    Use it for a server the test is about to start, or as a port that refuses connections.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class ConnectProxy:
    """An HTTP proxy on 127.0.0.1 that tunnels `CONNECT` requests, as a company's egress
    proxy does for HTTPS; it records each tunnel's target and Proxy-Authorization header.

        with ConnectProxy() as proxy:
            ...  # HTTPS_PROXY=proxy.url
            assert proxy.tunnels == [("127.0.0.1:8443", None)]
    """

    def __init__(self) -> None:
        self.tunnels: list[tuple[str, str | None]] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(5)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target = head[0].split(" ")[:2]
        headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
        auth = next((v for k, v in headers.items() if k.lower() == "proxy-authorization"), None)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            writer.close()
            await writer.wait_closed()
            return
        self.tunnels.append((target, auth))
        host, port = target.rsplit(":", 1)
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()
