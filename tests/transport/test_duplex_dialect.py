"""The duplex dialect where upstream selects it (D27) and `autostart=0` (D37), over real
websockets on 127.0.0.1; and vLLM-Omni's own `DuplexClient`, run unchanged, resuming
after a connection dropped in the middle of a reply."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import websockets

from spec.limits import Limits
from tests.transport.conftest import LiveServer, start_server
from transport.settings import ServerSettings

REPLY = "Here is a reply long enough to be cut in the middle by a dropped connection."
#: a hang guard only (a loaded 2-core machine), never a speed bound
HANG_GUARD_S = 30.0
#: where `make install-test` unpacks vLLM-Omni's client package (locks/upstream-client.txt)
UPSTREAM_CLIENT_ROOT = Path(sys.prefix) / "share" / "joyduplex" / "upstream"


def _server(**settings: Any) -> tuple[LiveServer, Callable[[], None]]:
    limits = settings.pop("limits", Limits(resume_grace_s=60.0))
    base = ServerSettings(backend="scripted", limits=limits)
    return start_server(replace(base, **settings))


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live, stop = _server()
    yield live
    stop()


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


async def _next_json(ws: Any) -> dict[str, Any]:
    async with asyncio.timeout(HANG_GUARD_S):
        data = json.loads(await ws.recv())
    assert isinstance(data, dict)
    return data


def test_b27_duplex_query_makes_a_realtime_session_resumable(server: LiveServer) -> None:
    async def test() -> None:
        async with websockets.connect(server.ws_url + "?duplex=1") as ws:
            created = await _next_json(ws)
        assert created["type"] == "session.created"
        assert created["resume_token"] and created["server_event_seq"] == 1
        async with websockets.connect(server.ws_url) as ws:  # a GA client: no change
            created = await _next_json(ws)
        assert created["type"] == "session.created" and "resume_token" not in created

    _run(test)


def test_b27_a_duplex_deployment_makes_every_session_resumable() -> None:
    live, stop = _server(duplex=True)
    try:

        async def test() -> None:
            async with websockets.connect(live.ws_url) as ws:
                created = await _next_json(ws)
            assert created["type"] == "session.created" and created["resume_token"]

        _run(test)
    finally:
        stop()


def test_d37_with_autostart_0_the_first_event_creates_the_session(server: LiveServer) -> None:
    async def test() -> None:
        url = server.ws_url + "?duplex=1&autostart=0&model=joyai"
        async with websockets.connect(url) as ws:
            update = {"type": "session.update", "event_id": "c1", "session": {"instructions": "Hi"}}
            await ws.send(json.dumps(update))
            created, updated = await _next_json(ws), await _next_json(ws)
        assert created["type"] == "session.created" and created["resume_token"]
        assert updated["type"] == "session.updated"
        assert updated["session"]["instructions"] == "Hi"

    _run(test)


def test_d37_a_malformed_first_event_is_refused_inside_the_new_session(
    server: LiveServer,
) -> None:
    async def test() -> None:
        async with websockets.connect(server.ws_url + "?autostart=0") as ws:
            await ws.send("{not json")
            created, error = await _next_json(ws), await _next_json(ws)
        assert created["type"] == "session.created"
        assert (error["type"], error["error"]["code"]) == ("error", "invalid_json")

    _run(test)


def test_b27_a_resume_on_the_autostart_0_url_resumes_the_session(server: LiveServer) -> None:
    async def test() -> None:
        url = server.ws_url + "?duplex=1&autostart=0"
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"type": "session.update", "session": {}}))
            created = await _next_json(ws)
            await _next_json(ws)  # session.updated
            ws.transport.abort()  # no close frame: the network failed
        resume = {
            "type": "session.resume",
            "event_id": "r1",
            "session_id": created["session"]["id"],
            "resume_token": created["resume_token"],
            "last_received_server_event_seq": 2,
        }
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps(resume))
            resumed = await _next_json(ws)
        assert resumed["type"] == "session.resumed"
        assert resumed["session_id"] == created["session"]["id"]

    _run(test)


def test_d37_a_connection_without_a_session_that_sends_nothing_is_closed() -> None:
    live, stop = _server(limits=Limits(first_event_timeout_s=0.2))
    try:

        async def test() -> None:
            async with websockets.connect(live.ws_url + "?autostart=0") as ws:
                with pytest.raises(websockets.ConnectionClosed) as info:
                    await _next_json(ws)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1008
            assert info.value.rcvd.reason == "no first event"

        _run(test)
    finally:
        stop()


# --- vLLM-Omni's DuplexClient, unchanged ------------------------------------------------


def _upstream_duplex() -> ModuleType:
    """`vllm_omni.clients.duplex` from the pinned wheel (only its client package)."""
    if not (UPSTREAM_CLIENT_ROOT / "vllm_omni" / "clients" / "duplex.py").exists():
        pytest.skip(f"{UPSTREAM_CLIENT_ROOT} is missing: `make install-test` unpacks it")
    if str(UPSTREAM_CLIENT_ROOT) not in sys.path:
        sys.path.insert(0, str(UPSTREAM_CLIENT_ROOT))
    return importlib.import_module("vllm_omni.clients.duplex")


@dataclass
class _Recorded:
    """Every frame the upstream client received, in order, and its live sockets."""

    frames: list[dict[str, Any]] = field(default_factory=list)
    sockets: list[Any] = field(default_factory=list)

    async def connect(self, url: str) -> Any:
        ws = await websockets.connect(url, max_size=32 * 1024 * 1024)
        self.sockets.append(ws)
        recorded = self

        class Transport:  # the client's `WebSocketTransport` surface, recording
            async def send(self, data: str) -> None:
                await ws.send(data)

            async def recv(self) -> str | bytes:
                data = await ws.recv()
                recorded.frames.append(json.loads(data))
                return data

            async def close(self) -> None:
                await ws.close()

        return Transport()


def assert_resumed_whole(recorded: _Recorded, audio: bytes, control: bytes) -> None:
    """The client reconnected and resumed, with the whole reply and every event once."""
    assert len(recorded.sockets) >= 2  # it did reconnect
    assert any(f["type"] == "session.resumed" for f in recorded.frames)
    assert audio == control  # the whole reply, nothing lost
    seqs = [f["server_event_seq"] for f in recorded.frames if "server_event_seq" in f]
    assert seqs == list(range(1, len(seqs) + 1))  # nothing twice, nothing skipped


async def _upstream_turn(
    upstream: ModuleType, url: str, recorded: _Recorded, *, drop: bool
) -> bytes:
    """One spoken turn through upstream's client; its reply's audio as received. With
    `drop`, the socket fails (no close frame) once the first audio chunk arrived."""
    policy = upstream.ReconnectPolicy(max_attempts=50, backoff_s=(0.05, 0.2))
    client = upstream.DuplexClient(
        url, model="joyai", reconnect=policy, heartbeat_interval_s=None, connect=recorded.connect
    )
    async with asyncio.timeout(HANG_GUARD_S), client:
        await client.stream_pcm(_tone(300))
        await client.commit()
        async for response in client.responses():
            chunks = []
            async for chunk in response.audio():
                chunks.append(chunk)
                if drop and len(recorded.sockets) == 1:
                    recorded.sockets[0].transport.abort()
            return b"".join(chunks)
    raise AssertionError("no response")


def test_b27_vllm_omni_duplex_client_unchanged_resumes_a_reply_cut_by_a_dropped_socket(
    server: LiveServer,
) -> None:
    upstream = _upstream_duplex()
    server.script.reply(REPLY)
    server.script.reply(REPLY)

    async def test() -> None:
        control = await _upstream_turn(upstream, server.ws_url, _Recorded(), drop=False)
        assert control
        server.script.latency["tts"] = 0.05  # slow the reply so the drop lands inside it
        recorded = _Recorded()
        audio = await _upstream_turn(upstream, server.ws_url, recorded, drop=True)
        assert_resumed_whole(recorded, audio, control)

    _run(test)
