"""The Python call client obeys the client protocol's reply gate (`client_reply_gate`, B21):
with `mode`, a cut reply's audio still arriving on the call's track is heard as silence
until a reply that was not cut starts, as the web page's gain node does. A scripted track
stands in for the peer's (no network): the gate's decision is the protocol's, this checks
that the call client carries it out."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from aiortc.mediastreams import MediaStreamError

from clients.webrtc_call import CallClient
from core.client_protocol import ClientProtocol

LOUD = 8000


class _Socket:
    """The data channel: what the client sends is kept."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, text: str) -> None:
        self.sent.append(text)

    async def close(self) -> None:
        return None


class _Frame:
    """What `CallClient._listen` reads of an aiortc audio frame: mono pcm16."""

    class _Layout:
        channels = ("mono",)

    layout = _Layout()

    def __init__(self, samples: int) -> None:
        self._pcm = np.full((1, samples), LOUD, dtype=np.int16)

    def to_ndarray(self) -> np.ndarray:
        return self._pcm


class _ScriptedTrack:
    """Hands out frames as the test queues them; `None` ends the track."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[_Frame | None] = asyncio.Queue()

    async def recv(self) -> _Frame:
        frame = await self.frames.get()
        if frame is None:
            raise MediaStreamError
        return frame


async def _server(call: CallClient, now: float, type_: str, **fields: Any) -> None:
    assert call.lifecycle is not None and call._host is not None
    await call._host.run(call.lifecycle.server_event({"type": type_, **fields}, now))


async def _hear(call: CallClient, track: _ScriptedTrack, samples: int) -> None:
    """One frame through the listener, waited for by the bytes it adds."""
    before = len(call.heard)
    await track.frames.put(_Frame(samples))
    while len(call.heard) < before + samples * 2:
        await asyncio.sleep(0)


def test_b21_a_call_client_hears_a_cut_reply_as_silence_until_the_next_starts() -> None:
    async def run() -> tuple[list[int], int]:
        protocol = ClientProtocol("vad", media="tracks")
        call = CallClient(_Socket(), None, None, protocol)  # type: ignore[arg-type]
        track = _ScriptedTrack()
        listener = asyncio.ensure_future(call._listen(track))
        await call._host.run(protocol.connected(0))  # type: ignore[union-attr]
        await _server(call, 1, "session.updated", session={})
        await _server(call, 10, "response.created", response={"id": "resp_1"})
        await _server(call, 11, "output_audio_buffer.started", response_id="resp_1")
        await _hear(call, track, 960)  # the reply, heard
        await _server(call, 20, "input_audio_buffer.speech_started", item_id="item_3")
        await _hear(call, track, 960)  # the cut reply's packet in flight: silence
        await _server(call, 21, "output_audio_buffer.started", response_id="resp_1")
        await _hear(call, track, 960)  # its late start keeps it muted
        await _server(call, 30, "response.created", response={"id": "resp_2"})
        await _server(call, 31, "output_audio_buffer.started", response_id="resp_2")
        await _hear(call, track, 960)  # the next reply, heard
        await track.frames.put(None)
        await listener
        pcm = np.frombuffer(bytes(call.heard), dtype="<i2").reshape(4, 960)
        return [int(np.abs(frame).max()) for frame in pcm], call.muted_samples

    peaks, muted = asyncio.run(run())
    assert peaks == [LOUD, 0, 0, LOUD]
    assert muted == 2 * 960


def test_b21_a_call_client_without_mode_hears_every_packet() -> None:
    async def run() -> list[int]:
        call = CallClient(_Socket(), None, None)  # type: ignore[arg-type]
        track = _ScriptedTrack()
        listener = asyncio.ensure_future(call._listen(track))
        await _hear(call, track, 960)
        await track.frames.put(None)
        await listener
        return [int(np.abs(np.frombuffer(bytes(call.heard), dtype="<i2")).max())]

    assert asyncio.run(run()) == [LOUD]
