"""A Python WebRTC client of `POST /v1/realtime/calls` (aiortc): tests, the bench, the CLI.

    async with open_call("http://127.0.0.1:8000", token=...) as call:
        await call.update_session(turn_detection=None)
        await call.speak(pcm16_16k)          # through the microphone track, in real time
        await call.commit(create_response=True)
        result = await call.collect_response(timeout=30)
        call.heard                           # the reply as it came off the audio track

`CallClient` is a `DuplexClient` whose socket is the `oai-events` data channel, so every
typed sender, `wait_for`, `collect_response` and the event history work as on the
websocket. The differences are WebRTC's: the microphone is an outgoing Opus track
(`speak` queues 16 kHz pcm16 on it; silence in between), an optional camera track
(`show` sets the picture it sends), and reply audio arrives on the incoming track, never
as `response.output_audio.delta` (`heard` keeps it, 48 kHz mono pcm16; `heard_at` the
arrival time of its first non-silent packet).

With `mode` ("ptt" or "vad") the call runs the shared client machines on tracks
(`ClientProtocol(mode, media="tracks")`, as the web page does): they send the mode's
`session.update` and decide the reply gate, so after a barge-in (or `stop_reply`) the
cut reply's packets still in flight are heard as silence in `heard` (counted in
`muted_samples`) until a reply that was not cut starts, as the page's gain node does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fractions
import json
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from clients.duplex_client import DuplexClient
from clients.errors import ConnectionLost, HandshakeRefused
from core.client_protocol import ClientProtocol
from transport.call_jitter import release_audio_at_once

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

__all__ = ["CALL_RATE_HZ", "CallClient", "open_call"]

#: the rate of the call's audio as `heard` keeps it
CALL_RATE_HZ = 48_000
_RATE = CALL_RATE_HZ
_FRAME = _RATE // 50
#: a packet quieter than this (int16 peak) counts as silence in `heard_at`
_SILENT_PEAK = 64


class MicrophoneTrack(MediaStreamTrack):
    """An outgoing audio track: queued 16 kHz pcm16 in real time, silence otherwise."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._start: float | None = None
        self._pts = 0
        self.drained = asyncio.Event()
        self.drained.set()

    def queue(self, pcm16_16k: bytes) -> None:
        samples = np.frombuffer(pcm16_16k[: len(pcm16_16k) // 2 * 2], dtype="<i2")
        if samples.size:
            self._queue.append(np.repeat(samples, 3))  # 16 -> 48 kHz (a test voice)
            self.drained.clear()

    async def recv(self) -> Any:
        import av

        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += _FRAME
            wait = self._start + self._pts / _RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        out = np.zeros(_FRAME, dtype=np.int16)
        filled = 0
        while filled < _FRAME and self._queue:
            chunk = self._queue[0]
            n = min(chunk.size, _FRAME - filled)
            out[filled : filled + n] = chunk[:n]
            filled += n
            if n == chunk.size:
                self._queue.popleft()
            else:
                self._queue[0] = chunk[n:]
        if not self._queue:
            self.drained.set()
        frame = av.AudioFrame.from_ndarray(out.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = _RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, _RATE)
        return frame


class CameraTrack(MediaStreamTrack):
    """An outgoing video track: one picture (an RGB array), 10 frames a second."""

    kind = "video"

    def __init__(self, picture: np.ndarray) -> None:
        super().__init__()
        self.picture = picture
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> Any:
        import av

        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += 9000
            wait = self._start + self._pts / 90_000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        frame = av.VideoFrame.from_ndarray(self.picture, format="rgb24")
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, 90_000)
        return frame


class _DataChannelSocket:
    """The `oai-events` data channel as the socket `DuplexClient` reads and writes."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self._messages: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.close_code: int | None = None
        self.close_reason = ""
        channel.on("message", self._messages.put_nowait)
        channel.on("close", self._closed)
        self.transport = self

    def _closed(self) -> None:
        if self.close_code is None:
            self.close_code, self.close_reason = 1000, "the data channel closed"
        self._messages.put_nowait(None)

    def __aiter__(self) -> _DataChannelSocket:
        return self

    async def __anext__(self) -> str | bytes:
        message = await self._messages.get()
        if message is None:
            self._messages.put_nowait(None)
            raise StopAsyncIteration
        return message

    async def send(self, text: str) -> None:
        if self._channel.readyState != "open":
            raise ConnectionLost("the call's data channel is closed")
        self._channel.send(text)

    async def close(self) -> None:
        self._channel.close()
        self._closed()

    def abort(self) -> None:
        self._closed()


class CallClient(DuplexClient):
    """A session over a WebRTC call; see the module docstring."""

    def __init__(
        self,
        socket: _DataChannelSocket,
        peer: Any,
        mic: MicrophoneTrack,
        lifecycle: ClientProtocol | None = None,
    ) -> None:
        super().__init__(socket, lifecycle)  # type: ignore[arg-type]
        self.peer = peer
        self.microphone = mic
        self.camera: CameraTrack | None = None
        self.call_id: str | None = None
        self.heard = bytearray()
        self.heard_at: float | None = None
        #: (arrival, peak) of each received reply packet, for timing
        self.packets: list[tuple[float, int]] = []
        #: samples of reply audio the reply gate muted (heard as silence)
        self.muted_samples = 0

    async def speak(self, pcm16_16k: bytes, *, wait: bool = True) -> None:
        """Send `pcm16_16k` through the microphone track in real time; with `wait`,
        return once it has all gone out."""
        self.microphone.queue(pcm16_16k)
        if wait:
            await self.microphone.drained.wait()

    def show(self, picture: np.ndarray) -> None:
        """What the camera track sends from now on (needs `camera=` at `open_call`)."""
        if self.camera is None:
            raise RuntimeError("open the call with a camera picture to show one")
        self.camera.picture = picture

    async def _listen(self, track: Any) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                pcm = frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0]
                pcm = pcm.astype(np.int16)
                if self._host is not None and self._host.reply_muted:
                    self.muted_samples += pcm.size
                    pcm = np.zeros_like(pcm)  # a cut reply's audio in flight
                now = time.monotonic()
                peak = int(np.abs(pcm).max()) if pcm.size else 0
                self.packets.append((now, peak))
                if peak > _SILENT_PEAK and self.heard_at is None:
                    self.heard_at = now
                self.heard += pcm.tobytes()

    def audible_since(self, offset: int) -> bytes:
        """What `heard` holds after byte `offset`, from its first audible packet on."""
        tail = np.frombuffer(bytes(self.heard[offset:]), dtype="<i2")
        loud = np.flatnonzero(np.abs(tail.astype(np.int32)) > _SILENT_PEAK)
        return tail[loud[0] :].tobytes() if loud.size else b""

    def heard_since(self, since: float) -> list[tuple[float, int]]:
        return [(t, p) for t, p in self.packets if t >= since]


@asynccontextmanager
async def open_call(
    base_url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    session: dict[str, Any] | None = None,
    camera: np.ndarray | None = None,
    timeout: float = 20.0,
    query: str = "",
    mode: str | None = None,
) -> AsyncIterator[CallClient]:
    """A call to the server at `base_url` (`http://host:port`); hung up on exit. `query`
    goes on the offer's URL: `resumable=1` makes the session resumable, `resume=1&
    session_id=<id>` places a call that resumes one (send `session.resume` first, B42).
    `mode` ("ptt" or "vad") runs the shared client machines on the call (module docstring).

    Raises:
        HandshakeRefused: the server answered the offer with an HTTP refusal.
        ConnectionLost: no answer, or the data channel did not open within `timeout`.
    """
    peer = RTCPeerConnection()
    mic = MicrophoneTrack()
    peer.addTrack(mic)
    camera_track = CameraTrack(camera) if camera is not None else None
    if camera_track is not None:
        peer.addTrack(camera_track)
    channel = peer.createDataChannel("oai-events")
    opened = asyncio.Event()
    channel.on("open", opened.set)
    socket = _DataChannelSocket(channel)
    lifecycle = ClientProtocol(mode, media="tracks") if mode is not None else None
    client = CallClient(socket, peer, mic, lifecycle)
    client.camera = camera_track
    listeners: list[asyncio.Task[None]] = []

    @peer.on("track")
    def _track(track: Any) -> None:
        if track.kind == "audio":
            listeners.append(asyncio.ensure_future(client._listen(track)))

    try:
        await peer.setLocalDescription(await peer.createOffer())
        url = base_url.rstrip("/") + "/v1/realtime/calls" + (f"?{query}" if query else "")
        extra = dict(headers or {})
        if token is not None:
            extra["Authorization"] = f"Bearer {token}"
        async with httpx.AsyncClient(timeout=timeout) as http:
            if session is None:
                response = await http.post(
                    url,
                    content=peer.localDescription.sdp,
                    headers={**extra, "Content-Type": "application/sdp"},
                )
            else:
                response = await http.post(
                    url,
                    files={
                        "sdp": (None, peer.localDescription.sdp, "application/sdp"),
                        "session": (None, json.dumps(session), "application/json"),
                    },
                    headers=extra,
                )
        if response.status_code != 201:
            raise HandshakeRefused(url, response.status_code, response.content)
        client.call_id = response.headers.get("location", "").rsplit("/", 1)[-1] or None
        await peer.setRemoteDescription(RTCSessionDescription(sdp=response.text, type="answer"))
        release_audio_at_once(peer)  # `heard_at` is the arrival, not a playout
        with anyio.move_on_after(timeout):
            await opened.wait()
        if not opened.is_set():
            raise ConnectionLost(f"the call's data channel did not open within {timeout:g} s")
        async with client:
            try:
                if client._host is not None:
                    await client._host.connected()
                yield client
            finally:
                mic.stop()
                if camera_track is not None:
                    camera_track.stop()
    except httpx.HTTPError as exc:
        raise ConnectionLost(f"cannot place a call at {base_url}: {exc}") from exc
    finally:
        for task in listeners:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await peer.close()
