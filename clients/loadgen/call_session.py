"""`CallSessionDriver`: one offered session as a WebRTC call (`--transport webrtc`).

It does what `SessionDriver` does, over a call instead of a websocket:

- places the call: an aiortc peer with a microphone track and the `oai-events` data
  channel, its offer POSTed as `application/sdp` to the calls URL (the websocket URL's
  path + `/calls`, over http(s)); a 201 answer is set and the data channel awaited.
  A 503 answer (the server at capacity) counts as refused, under `http_503` and its wire
  code; any other refusal (401, 403, 400) as a failed connect, by status and code;
- then, on the data channel, waits for `session.created`, sends the same
  `session.update` and times `session.heartbeat`s, exactly as on the websocket;
- the microphone track sends one 20 ms frame of 24 kHz pcm16 each time aiortc asks for
  one (real time, paced by aiortc's sender), Opus-encoded: quiet noise, or a probe's
  speech clip. Each frame counts as one append in the report;
- reply audio arrives on the answer's track (never as deltas on the channel): every
  session decodes it, as a browser would; a probe times its first frame louder than
  `SILENT_PEAK` after the end of speech as the first reply audio.

The bench's own CPU is higher than on the websocket (every session encodes and decodes
Opus in this process): the report's `bench` section says when it was the bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
from typing import TYPE_CHECKING, Any

import av
import httpx
import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from clients.loadgen.options import RATE_HZ, WEBRTC_FRAME_MS
from clients.loadgen.run_state import bump
from clients.loadgen.schedule import HEARTBEAT_INTERVAL_S, Schedule, now
from clients.loadgen.server_events import refusal_reason
from clients.loadgen.session import CLOSE_TIMEOUT_S, SETUP_TIMEOUT_S, SessionDriver
from spec.version import __version__
from transport.call_jitter import release_audio_at_once

if TYPE_CHECKING:
    from clients.loadgen.run_state import BenchRun

__all__ = ["CallSessionDriver"]

#: a reply frame louder than this (int16 peak) is audible
SILENT_PEAK = 64
#: the status a server at capacity answers an offer with (resource_exhausted)
AT_CAPACITY = 503


class CallSessionDriver(SessionDriver):
    """Session `index` of the run `bench`, as a call; `http`: the run's shared client."""

    def __init__(self, bench: BenchRun, index: int, probe: bool, http: httpx.AsyncClient) -> None:
        super().__init__(bench, index, probe)
        self.http = http
        self.peer: Any = None
        self.channel: Any = None
        self.closed = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if await self._set_up():
                await self._stream()
        finally:
            if not self.ready:
                self.bench.resolved()
            if self.peer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.peer.close(), CLOSE_TIMEOUT_S)

    async def _set_up(self) -> bool:
        bench = self.bench
        await asyncio.sleep(bench.schedule.connect_at(self.index) - now())
        self.peer = peer = RTCPeerConnection()
        peer.addTrack(_Microphone(self))
        self.channel = channel = peer.createDataChannel("oai-events")
        opened = asyncio.Event()
        channel.on("open", opened.set)
        channel.on("message", self._on_channel_message)
        channel.on("close", self._on_close)
        peer.on("track", self._on_track)
        headers = {
            "Content-Type": "application/sdp",
            "User-Agent": f"joyduplex-bench/{__version__}",
        }
        if bench.options.api_key:
            headers["Authorization"] = f"Bearer {bench.options.api_key}"
        try:
            await peer.setLocalDescription(await peer.createOffer())
            response = await self.http.post(
                bench.options.calls_url, content=peer.localDescription.sdp, headers=headers
            )
        except (OSError, TimeoutError, httpx.HTTPError) as exc:
            bench.connect_failed(type(exc).__name__)
            return False
        if response.status_code != 201:
            reason = refusal_reason(response.status_code, response.content)
            if response.status_code == AT_CAPACITY:
                code = reason.removeprefix(f"http_{AT_CAPACITY}_") or None
                self._refused_offer(f"http_{AT_CAPACITY}", code)
                if code is not None:
                    bench.error(code)  # as the websocket's refusal `error` event counts
            else:
                bench.connect_failed(reason)
            return False
        await peer.setRemoteDescription(RTCSessionDescription(sdp=response.text, type="answer"))
        release_audio_at_once(peer)  # time arrival, not a playout
        try:
            await asyncio.wait_for(opened.wait(), SETUP_TIMEOUT_S)
        except TimeoutError:
            bench.connect_failed("ice_timeout")  # no data channel: ICE or DTLS never finished
            return False
        bench.counts.connected += 1
        first = await self._wait(self.first)
        if first in ("closed", "timeout"):
            self._refused_offer(f"channel_{first}", self.first_error)
            return False
        if not await self._send(self.session_update()):
            self._refused_offer("channel_closed", self.first_error)
            return False
        return await self._configured(
            lambda: self._refused_offer("channel_closed", self.first_error)
        )

    def _refused_offer(self, how: str, code: str | None) -> None:
        """Refused before the session was set up: `how` stands where the websocket's
        close code does (`http_503`, `channel_closed`), `code` is the wire's error code."""
        counts = self.bench.counts
        counts.refused += 1
        bump(counts.refused_by_close_code, how)
        if code is not None:
            bump(counts.refused_by_error_code, code)

    async def _send(self, data: str | bytes) -> bool:
        channel = self.channel
        if channel is None or channel.readyState != "open":
            return False
        channel.send(data if isinstance(data, str) else data.decode())
        return True

    # --- sending: heartbeats here, audio when the track asks -----------------------------

    async def _stream(self) -> None:
        bench = self.bench
        next_heartbeat = Schedule.first_heartbeat_at(self.index, now())
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), max(0.0, next_heartbeat - now()))
            at = now()
            if at >= bench.stop_at:
                return
            if self.closed.is_set():
                break
            next_heartbeat += HEARTBEAT_INTERVAL_S
            if not await self._heartbeat(at):
                break
        bench.dropped(None)

    def next_frame(self, index: int, due: float, at: float) -> bytes:
        """The microphone's frame `index` (due at `due`, asked for at `at`): 24 kHz pcm16."""
        bench = self.bench
        noise = bench.noise_pcm
        if self.speaker is None and (not self.ready or at >= bench.stop_at):
            return noise[index % len(noise)]
        speaker = self.speaker
        if speaker is None:
            return self._counted(noise[index % len(noise)], due, at)
        # every frame is timed: the server's audio clock counts from the track's first
        payload = speaker.payload(index, noise, at, speaker.speech.pcm_chunks)
        speaker.sent(at)
        if not self.ready or at >= bench.stop_at:
            return payload
        return self._counted(payload, due, at)

    def _counted(self, payload: bytes, due: float, at: float) -> bytes:
        bench = self.bench
        if bench.in_window:
            bench.send_lag.append((at - due) * 1000)
        bench.appends += 1
        return payload

    # --- receiving -----------------------------------------------------------------------

    def _on_channel_message(self, message: str | bytes) -> None:
        if isinstance(message, str):
            self._on_message(message, now())

    def _on_close(self) -> None:
        self.closed.set()
        for future in (self.first, self.updated):
            if not future.done():
                future.set_result("closed")

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self.bench.tasks.add(asyncio.create_task(self._hear(track)))

    async def _hear(self, track: Any) -> None:
        """Decode the reply track for as long as the call lasts (a browser plays it)."""
        with contextlib.suppress(MediaStreamError, asyncio.CancelledError):
            while not self.closed.is_set():
                frame = await track.recv()
                speaker = self.speaker
                if speaker is not None and int(np.abs(frame.to_ndarray()).max()) > SILENT_PEAK:
                    speaker.reply_audio(now())


class _Microphone(MediaStreamTrack):
    """The call's outgoing audio track: a 20 ms frame each time aiortc's sender asks,
    due at absolute times from the first, so it never drifts."""

    kind = "audio"

    def __init__(self, driver: CallSessionDriver) -> None:
        super().__init__()
        self.driver = driver
        self.index = 0
        self.start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.start is None:
            self.start = now()
        due = self.start + self.index * WEBRTC_FRAME_MS / 1000
        await asyncio.sleep(due - now())
        pcm = self.driver.next_frame(self.index, due, now())
        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = RATE_HZ
        frame.pts = self.index * samples.shape[1]
        frame.time_base = fractions.Fraction(1, RATE_HZ)
        self.index += 1
        return frame
