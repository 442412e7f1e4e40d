"""Transport cost on loopback, each figure beside a same-run baseline.

- round trip of a small event (`session.heartbeat` -> `session.heartbeat_ack`) through the
  real server, beside a bare echo websocket endpoint in the same app;
- sustained appends per second for 1, 10 and 100 concurrent sessions (scripted backend).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from spec.limits import Limits
from tests.transport.conftest import LiveServer, start_server
from transport.settings import ServerSettings

_APPEND = json.dumps(
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(640)).decode()}
)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live, stop = start_server(ServerSettings(limits=Limits(max_sessions=128)), enable_echo=True)
    yield live
    stop()


class _Connection:
    """A websocket kept open across benchmark rounds on its own event loop."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.ws: Any = self.loop.run_until_complete(websockets.connect(url))

    def roundtrip(self, frame: str) -> str:
        async def once() -> str:
            await self.ws.send(frame)
            return str(await self.ws.recv())

        return self.loop.run_until_complete(once())

    def close(self) -> None:
        self.loop.run_until_complete(self.ws.close())
        self.loop.close()


@pytest.mark.benchmark(group="transport-roundtrip")
def test_bench_roundtrip_heartbeat_through_the_server(benchmark, server: LiveServer) -> None:  # type: ignore[no-untyped-def]
    conn = _Connection(server.ws_url)
    try:
        conn.loop.run_until_complete(conn.ws.recv())  # session.created
        reply = benchmark(conn.roundtrip, '{"type":"session.heartbeat"}')
        assert json.loads(reply)["type"] == "session.heartbeat_ack"
    finally:
        conn.close()


@pytest.mark.benchmark(group="transport-roundtrip")
def test_bench_roundtrip_echo_baseline(benchmark, server: LiveServer) -> None:  # type: ignore[no-untyped-def]
    conn = _Connection(server.url.replace("http://", "ws://") + "/v1/echo")
    try:
        assert benchmark(conn.roundtrip, '{"type":"session.heartbeat"}')
    finally:
        conn.close()


async def _stream(url: str, appends: int) -> None:
    async with websockets.connect(url) as ws:
        await ws.recv()
        for _ in range(appends):
            await ws.send(_APPEND)
        await ws.send('{"type":"session.heartbeat"}')
        while json.loads(await ws.recv())["type"] != "session.heartbeat_ack":
            pass


@pytest.mark.parametrize("sessions", [1, 10, 100])
@pytest.mark.benchmark(group="transport-appends")
def test_bench_sustained_appends(benchmark, server: LiveServer, sessions: int) -> None:  # type: ignore[no-untyped-def]
    appends = 2000 // sessions

    def run() -> None:
        async def all_sessions() -> None:
            await asyncio.gather(*(_stream(server.ws_url, appends) for _ in range(sessions)))

        asyncio.run(all_sessions())

    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info["appends_per_round"] = appends * sessions
