"""A connection's rate limits and its share of the event loop (D38), over real websockets
on 127.0.0.1: frames over the budget are refused undecoded with `rate_limit_exceeded`,
naming the event ids sent; a connection that goes on is closed 1008 "rate limit"; its
neighbours on the same server are untouched; a normal duplex client never meets the
default limits; and the channel yields to the loop before every frame, so one
connection's queued frames never run back to back."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest
import websockets

from clients.duplex_client import DuplexClient
from core.connection_budget import ConnectionBudget
from spec.events import Error
from spec.limits import Limits
from tests.transport.conftest import LiveServer, start_server
from tests.wire_mutations import JPEG
from transport.codec import refused_event_id
from transport.settings import ServerSettings
from transport.websocket import RATE_LIMIT_CLOSE, WebSocketChannel

ROOT = Path(__file__).resolve().parents[2]
#: a hang guard only (a loaded 2-core machine), never a speed bound
HANG_GUARD_S = 30.0
#: a budget a test exhausts at once: 40 events, refilled at one every 10 s
BURST = 40
STRICT = Limits(
    max_events_per_s=0.1, event_burst=BURST, max_rate_refusals=10, rate_refusal_window_s=600.0
)


def _server(limits: Limits) -> tuple[LiveServer, Callable[[], None]]:
    return start_server(replace(ServerSettings(backend="scripted"), limits=limits))


@pytest.fixture
def strict_server() -> Iterator[LiveServer]:
    live, stop = _server(STRICT)
    yield live
    stop()


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def _tone(ms: int, rate_hz: int = 16_000) -> bytes:
    samples = np.arange(ms * rate_hz // 1000)
    return (np.sin(samples / 5.0) * 8000).astype("<i2").tobytes()


def _heartbeat(event_id: str) -> str:
    return json.dumps({"type": "session.heartbeat", "event_id": event_id})


async def _until_closed(ws: Any) -> list[dict[str, Any]]:
    """Every event until the server closes the connection."""
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(HANG_GUARD_S):
        try:
            while True:
                events.append(json.loads(await ws.recv()))
        except websockets.ConnectionClosed:
            return events


def _rate_errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e["error"]
        for e in events
        if e["type"] == "error" and e["error"]["code"] == "rate_limit_exceeded"
    ]


def test_b25_frames_over_the_budget_are_refused_with_their_ids_then_closed_1008(
    strict_server: LiveServer,
) -> None:
    async def test() -> None:
        async with websockets.connect(strict_server.ws_url) as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            within = [f"within_{n}" for n in range(BURST)]
            over = [f"over_{n}" for n in range(STRICT.max_rate_refusals + 5)]
            for event_id in within:
                await ws.send(_heartbeat(event_id))
            for n, event_id in enumerate(over):  # malformed ones are refused alike, undecoded
                malformed = f'{{"event_id": "{event_id}", "type": 5'  # not JSON
                await ws.send(malformed if n % 2 else _heartbeat(event_id))
            events = await _until_closed(ws)
        assert (ws.close_code, ws.close_reason) == (1008, RATE_LIMIT_CLOSE)
        acks = [e for e in events if e["type"] == "session.heartbeat_ack"]
        refused = _rate_errors(events)
        assert len(acks) >= BURST  # one more if a token refilled while sending
        assert len(refused) == STRICT.max_rate_refusals
        assert all(e["type"] == "rate_limit_error" for e in refused)
        assert "more than 0.1 events a second (burst 40)" in refused[0]["message"]
        ids = [e["event_id"] for e in refused]
        start = over.index(ids[0])
        assert ids == over[start : start + len(ids)], ids  # the ids it sent, in order
        assert start <= 1
        assert [e for e in events if e["type"] == "error"] == [
            e for e in events if e["type"] == "error" and e["error"] in refused
        ]
        metrics = strict_server.app.state.host.metrics
        assert metrics.value("joyduplex_rate_limit_closes_total") == 1

    _run(test)


def test_b25_a_frame_over_the_byte_budget_is_refused_and_smaller_frames_still_pass() -> None:
    live, stop = _server(Limits(max_bytes_per_s=1.0, byte_burst=10_000, max_rate_refusals=0))
    try:

        async def test() -> None:
            audio = base64.b64encode(bytes(4_500)).decode()  # 6,000 bytes of base64
            async with websockets.connect(live.ws_url) as ws:
                assert json.loads(await ws.recv())["type"] == "session.created"
                for event_id in ("big_1", "big_2"):
                    event = {"type": "input_audio_buffer.append", "audio": audio}
                    await ws.send(json.dumps({"event_id": event_id, **event}))
                await ws.send(_heartbeat("small"))
                async with asyncio.timeout(HANG_GUARD_S):
                    events = []
                    while not events or events[-1]["type"] != "session.heartbeat_ack":
                        events.append(json.loads(await ws.recv()))
            [refused] = _rate_errors(events)
            assert refused["event_id"] == "big_2"
            assert "bytes a second (burst 10000; this frame: 6" in refused["message"]

        _run(test)
    finally:
        stop()


def test_b25_a_neighbouring_session_keeps_working_while_one_is_refused_and_closed(
    strict_server: LiveServer,
) -> None:
    async def flood() -> tuple[int | None, int]:
        async with websockets.connect(strict_server.ws_url) as ws:
            await ws.recv()
            for n in range(BURST + STRICT.max_rate_refusals):
                await ws.send(_heartbeat(f"flood_{n}"))
            events = await _until_closed(ws)
        return ws.close_code, len(_rate_errors(events))

    async def test() -> None:
        async with DuplexClient.connect(strict_server.ws_url) as neighbour:
            await neighbour.update_session(turn_detection=None)
            code, refused = await flood()
            assert (code, refused) == (1008, STRICT.max_rate_refusals)
            await neighbour.stream_audio(_tone(300), chunk_ms=100)
            await neighbour.commit(create_response=True)
            result = await neighbour.collect_response(timeout=HANG_GUARD_S)
            errors = [e for e in neighbour.history if isinstance(e, Error)]
        assert (result.status, result.errors, errors) == ("completed", [], [])
        assert result.audio

    _run(test)


def test_b25_a_normal_duplex_client_at_its_real_rate_never_meets_the_default_limits() -> None:
    """A second of 20 ms appends at 24 kHz with two 300 KB camera frames riding the first,
    every server event acked (the duplex dialect) and a playback ack per audio delta, then
    a spoken turn answered: no error at all."""
    live, stop = _server(Limits())
    frame = JPEG + bytes(300_000 - len(JPEG))
    try:

        async def test() -> None:
            async with websockets.connect(live.ws_url + "?duplex=1", max_size=None) as ws:
                events: list[dict[str, Any]] = []
                played: dict[str, int] = {}

                async def read() -> None:
                    async for message in ws:
                        event = json.loads(message)
                        events.append(event)
                        seq = event["server_event_seq"]
                        await ws.send(
                            json.dumps({"type": "session.event_ack", "server_event_seq": seq})
                        )
                        if event["type"] == "response.output_audio.delta":
                            response = event["response_id"]
                            played[response] = played.get(response, 0) + 100  # 100 ms deltas
                            ack = {"type": "playback.ack", "response_id": response}
                            await ws.send(json.dumps({**ack, "played_ms": played[response]}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(read)
                    update = {
                        "turn_detection": None,
                        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24_000}}},
                    }
                    await ws.send(json.dumps({"type": "session.update", "session": update}))
                    tone = base64.b64encode(_tone(20, 24_000)).decode()
                    start = anyio.current_time()
                    for n in range(50):
                        await anyio.sleep_until(start + n * 0.02)
                        append: dict[str, Any] = {
                            "type": "input_audio_buffer.append",
                            "audio": tone,
                        }
                        if n == 0:  # two frames riding one append: the most there can be
                            append["video_frames"] = [base64.b64encode(frame).decode()] * 2
                        await ws.send(json.dumps(append))
                    await ws.send(
                        json.dumps({"type": "input_audio_buffer.commit", "create_response": True})
                    )
                    with anyio.fail_after(HANG_GUARD_S):
                        while not any(e["type"] == "response.done" for e in events):
                            await anyio.sleep(0.05)
                    await ws.send(json.dumps({"type": "session.heartbeat"}))
                    with anyio.fail_after(HANG_GUARD_S):
                        while events[-1]["type"] != "session.heartbeat_ack":
                            await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
            errors = [e["error"] for e in events if e["type"] == "error"]
            assert errors == []
            [done] = [e for e in events if e["type"] == "response.done"]
            assert done["response"]["status"] == "completed"
            assert sum(played.values()) > 0  # its audio was played and acked

        _run(test)
    finally:
        stop()


# --- the channel, without a server ---------------------------------------------------


class _FloodingSocket:
    """A websocket whose next frame is always there already, as when uvicorn queued a
    socket read's many frames: its `receive` never suspends."""

    client = None

    def __init__(self) -> None:
        self.frames = 0

    async def receive(self) -> dict[str, Any]:
        self.frames += 1
        return {"type": "websocket.receive", "text": _heartbeat(f"evt_{self.frames}")}


def test_b25_the_channel_yields_to_the_loop_before_every_frame() -> None:
    """Another task runs between any two frames of a connection whose frames are all
    queued already (uvicorn hands them over without suspending)."""

    async def test() -> None:
        socket = _FloodingSocket()
        budget = ConnectionBudget.from_limits(Limits(max_events_per_s=0), 0.0)
        channel = WebSocketChannel(socket, 1024, budget)  # type: ignore[arg-type]
        frames_seen: list[int] = []

        async def neighbour() -> None:
            while True:
                frames_seen.append(socket.frames)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(neighbour)
            for _ in range(100):
                assert await channel.receive() is not None
            tg.cancel_scope.cancel()
        assert set(range(100)) <= set(frames_seen)  # it ran after each frame

    _run(test)


@pytest.mark.parametrize(
    ("frame", "event_id"),
    [
        ('{"event_id":"first","type":"x"}', "first"),
        (b'{"type":"x", "event_id" : "bytes_1"}', "bytes_1"),
        ('{"audio":"' + "A" * 100_000 + '","event_id":"last"}', "last"),
        ('{"audio":"' + "A" * 100_000 + '","event_id":"middle","x":"' + "A" * 100_000 + '"}', None),
        ('{"event_id":"with \\"escape\\""}', None),
        ('{"type":"x","text":"\\"event_id\\":\\"inside\\""}', None),
        ('{"event_id": 5}', None),
        ("not json", None),
    ],
)
def test_b25_a_refused_frame_names_its_event_id_from_a_bounded_search(
    frame: str | bytes, event_id: str | None
) -> None:
    assert refused_event_id(frame) == event_id


# --- the flood measurement, its facts only ---------------------------------------------


@pytest.mark.slow  # about 20 s: `make test` runs it, `make check` does not
def test_b25_a_flood_beside_clean_sessions_is_refused_and_closed_and_they_see_no_error(
    tmp_path: Path,
) -> None:
    """tools/flood_fairness.py, smaller: 50,000 hostile events over 6 connections beside 4
    clean sessions, with budgets a flood at any speed this machine reaches exceeds but a
    clean session (51 events a second) does not. Only facts are asserted, never a
    latency: the clean sessions see no error and close normally; the flood was refused
    with `rate_limit_exceeded`, closed 1008 and reconnected until it was sent."""
    out = tmp_path / "report.json"
    command = [
        sys.executable,
        str(ROOT / "tools/flood_fairness.py"),
        "--events=50000",
        "--clean-sessions=4",
        "--turns=1",
        "--limit=max_events_per_s=100",
        "--limit=event_burst=200",
        "--limit=max_rate_refusals=50",
        f"--out={out}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    flood = report["attacked"]["flood"]
    print(
        f"\nflood: {flood['events_sent']} events at {flood['events_per_s']}/s over "
        f"{flood['connections']} connections, closes {flood['closes_by_code']}; clean p50 "
        f"{report['unattacked']['latency_ms']['p50']:.0f} ms unattacked, "
        f"{report['attacked']['latency_ms']['p50'] or 0:.0f} ms attacked"
    )
    assert report["clean_errors"] == 0, (report["unattacked"], report["attacked"])
    assert report["clean_close_codes"] == {"1000": 4}
    assert report["server_crash_lines"] == []
    assert flood["events_sent"] == 50_000
    assert flood["errors_by_code"].get("rate_limit_exceeded", 0) >= 50
    assert flood["closes_by_code"].get("1008", 0) >= 1
    assert flood["connections"] > 6  # closed ones were replaced
