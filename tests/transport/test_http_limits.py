"""The HTTP layer is bounded (docs/architecture.md section 6): a request head over
`max_header_bytes` is refused with 400, and a connection that sends no complete request
head within `header_timeout_s` is closed, so half-open requests cannot hold sockets."""

from __future__ import annotations

import contextlib
import socket
import time

import httpx

from spec.limits import Limits
from tests.transport.conftest import start_server
from transport.settings import ServerSettings


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_a_request_head_over_max_header_bytes_is_refused() -> None:
    """Reproduction: 128 MB of headers were accepted."""
    live, stop = start_server(ServerSettings(limits=Limits(max_header_bytes=4096)))
    try:
        sock = _connect(live.url)
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Junk: aaaaaaaa\r\n" * 20_000
        with contextlib.suppress(OSError):  # refused and closed while we were still sending
            sock.sendall(head)  # 360 kB of headers, never finished
        try:
            reply = sock.recv(1024)
        except ConnectionResetError:
            reply = b""
        sock.close()
        assert reply.startswith(b"HTTP/1.1 400") or reply == b""
        assert httpx.get(live.url + "/healthz", timeout=10).status_code == 200
    finally:
        stop()


def test_a_connection_without_a_request_head_is_closed_after_header_timeout_s() -> None:
    """Reproduction: 200 half-open requests held their sockets for 40 s and more."""
    live, stop = start_server(ServerSettings(limits=Limits(header_timeout_s=0.5)))
    try:
        sock = _connect(live.url)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 8  # the deadline, not a client timeout
        sock.close()
        # a prompt request on a fresh connection is unaffected, and so is a websocket
        assert httpx.get(live.url + "/healthz", timeout=10).status_code == 200
    finally:
        stop()


def test_a_websocket_outlives_the_header_timeout() -> None:
    import asyncio

    import websockets

    live, stop = start_server(ServerSettings(limits=Limits(header_timeout_s=0.3)))
    try:

        async def run() -> str:
            async with websockets.connect(live.ws_url) as ws:
                await ws.recv()  # session.created
                await asyncio.sleep(0.8)
                await ws.send('{"type":"session.heartbeat"}')
                return str(await ws.recv())

        assert "session.heartbeat_ack" in asyncio.run(asyncio.wait_for(run(), 20))
    finally:
        stop()
