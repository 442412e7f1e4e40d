"""The media of a WebRTC call: the microphone track in, the reply track out, the camera.

Everything here executes; what to say about playback is decided by the call's
`OutputAudioBuffer` (`core/statemachines/output_audio_buffer.py`).

- `ReplyTrack` paces reply audio onto the outgoing track in real time, 20 ms a frame,
  in talkspurts: a reply's frames, two silent ones after its last (`HANGOVER_FRAMES`:
  they carry the encoder's 6.5 ms lookahead out), then no packets at all until the next
  reply. So what it has sent is what the person heard, give or take the jitter buffer:
  the played cursor the call reports to the session, and that a barge-in truncates to,
  is the audio actually sent. Why no silence between replies: Chromium's jitter buffer
  (NetEq) sizes itself from the packets' arrival jitter, and a Python server's timer
  paces silence with jitter of its own, which kept the buffer, and so every reply's
  start, above its floor. A reply's first audio goes out at once (it never waits for a
  tick), and the pacing restarts from it.
  The RTP timestamps are one schedule from the call's first packet: within a talkspurt
  20 ms a packet, and a talkspurt's first packet is stamped with the time since then,
  so the receiver counts the gap as time passing, not as a late packet. The track
  encodes its own Opus packets for this (`OpusPackets`, aiortc's settings, mono): aiortc's
  sender stamps the frames it encodes contiguously, and its encoder's lookahead stamps
  the first packet after a gap with the old timeline; a packet it is handed keeps its
  own. aiortc sets the RTP marker bit on every audio packet (the last payload of each
  frame), so a reply's first packet carries it, though not as a distinct talkspurt start.
  20 ms is the Opus frame aiortc's encoder makes too; the browser's jitter buffer sizes
  itself from it.
- `microphone_appends` turns the incoming Opus track (decoded by aiortc, 48 kHz) into
  16 kHz pcm16 appends, one per 20 ms packet, as a websocket client sends them.
- `camera_appends` samples the incoming video track at the web client's camera cadence
  and turns each sample into a JPEG frame of the same size bound, so a camera on a call
  enters the very frame path `video_frames` feeds.

aiortc and PyAV are imported here only: the module is loaded when the first call comes.
"""

from __future__ import annotations

import asyncio
import collections
import fractions
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from spec.tables.client_constants import CAMERA_INTERVAL_MS, CAMERA_MAX_SIDE_PX

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from core.statemachines.output_audio_buffer import OutputAudioBuffer

__all__ = [
    "HANGOVER_FRAMES",
    "TRACK_RATE_HZ",
    "MicrophoneDecimator",
    "OpusPackets",
    "ReplyTrack",
    "audio_level_dbov",
    "camera_appends",
    "jpeg_of",
    "microphone_appends",
    "reply_pcm",
]

log = logging.getLogger("joyduplex.transport")

#: the rate of both tracks (Opus runs at 48 kHz)
TRACK_RATE_HZ = 48_000
#: samples of one 20 ms frame at the track rate
_FRAME_SAMPLES = TRACK_RATE_HZ // 50
_TIME_BASE = fractions.Fraction(1, TRACK_RATE_HZ)
#: the rate of the appends the microphone track makes (the session's own)
MICROPHONE_RATE_HZ = 16_000


def _resampler(rate_hz: int) -> av.AudioResampler:
    return av.AudioResampler(format="s16", layout="mono", rate=rate_hz)


def _resample(resampler: av.AudioResampler, frame: av.AudioFrame | None) -> bytes:
    return b"".join(bytes(out.planes[0])[: out.samples * 2] for out in resampler.resample(frame))


def _decode(audio: bytes, fmt: str) -> np.ndarray:
    """The session's output audio as int16 samples (pcm16 or pcm_f32le)."""
    if fmt == "pcm_f32le":
        floats = np.frombuffer(audio[: len(audio) // 4 * 4], dtype="<f4")
        samples: np.ndarray = (np.clip(floats, -1.0, 1.0) * 32767).astype(np.int16)
        return samples
    pcm: np.ndarray = np.frombuffer(audio[: len(audio) // 2 * 2], dtype="<i2")
    return pcm


def reply_pcm(audio: bytes, fmt: str, rate_hz: int) -> np.ndarray:
    """One reply chunk in the session's output format, as int16 at the track rate.

    G.711 outputs are carried as their 16-bit expansion by the caller; a call's session
    keeps pcm16 unless a client changes it over the data channel.
    """
    samples = _decode(audio, fmt)
    if rate_hz == TRACK_RATE_HZ or samples.size == 0:
        return samples.copy()
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate_hz
    resampler = _resampler(TRACK_RATE_HZ)
    # one resampler per chunk, flushed: a cleared reply leaves no samples behind in it
    pcm = _resample(resampler, frame) + _resample(resampler, None)
    return np.frombuffer(pcm, dtype=np.int16).copy()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


#: silent frames a talkspurt ends with before the track goes quiet: the first carries the
#: encoder's lookahead out (the last 6.5 ms of the reply), the rest let the browser's
#: concealment fade from silence, not from speech
HANGOVER_FRAMES = 2
#: aiortc's own Opus settings (`aiortc.codecs.opus.OpusEncoder`), in mono
_OPUS_BIT_RATE = 96_000


class OpusPackets:
    """20 ms frames of the track to Opus packets stamped with the track's RTP timeline.

    The track encodes, not aiortc's sender: the sender's encoder stamps each packet from
    the frames it was fed, contiguous, and its lookahead puts the first packet after a gap
    at the old timeline (a 1 s silence would reach the browser as 1 s of late arrival).
    A packet the track hands the sender keeps the timestamp it carries."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "w")
        codec.bit_rate = _OPUS_BIT_RATE
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = TRACK_RATE_HZ
        codec.time_base = _TIME_BASE
        codec.options = {"application": "voip"}
        self._codec = codec
        self._fed = 0  # the encoder's own clock: contiguous, whatever the gaps

    def encode(self, samples: np.ndarray, timestamp: int) -> av.Packet[Any]:
        """One packet of 20 ms `samples`, stamped `timestamp` (samples at 48 kHz)."""
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = TRACK_RATE_HZ
        frame.pts = self._fed
        frame.time_base = _TIME_BASE
        self._fed += samples.size
        # libopus makes one packet of each whole 20 ms frame, at once
        (packet,) = self._codec.encode(frame)
        packet.pts = packet.dts = timestamp
        packet.time_base = _TIME_BASE
        return packet


class ReplyTrack(MediaStreamTrack):
    """The outgoing audio track: queued reply audio paced out in real time, in
    talkspurts (nothing between replies)."""

    kind = "audio"

    def __init__(
        self,
        buffer: OutputAudioBuffer,
        on_paced: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._buffer = buffer
        #: called after each frame: the call sends what the buffer emitted
        self._on_paced = on_paced
        self._clock = clock
        self._queue: collections.deque[tuple[str, np.ndarray]] = collections.deque()
        #: the time of RTP timestamp 0: every frame's time is start + timestamp / rate
        self._start: float | None = None
        self._timestamp = 0
        #: silent frames to send before the track goes quiet (the call opens with some)
        self._hangover = HANGOVER_FRAMES
        self._opus = OpusPackets()
        #: the wait of a recv with no audio queued: queued audio (or stop) ends it early
        self._silence_wait: asyncio.Future[None] | None = None

    @property
    def queued_samples(self) -> int:
        return sum(chunk.size for _, chunk in self._queue)

    def enqueue(self, response_id: str, samples: np.ndarray) -> None:
        if samples.size:
            self._queue.append((response_id, samples))
            self._wake()

    def drop(self, response_id: str | None) -> None:
        """Drop the queued audio of `response_id` (None: all of it)."""
        self._queue = collections.deque(
            (rid, chunk)
            for rid, chunk in self._queue
            if response_id is not None and rid != response_id
        )

    def settle(self) -> None:
        """A response is done: with nothing queued its audio has all gone out, so the
        buffer hears that the queue is dry now (a quiet track has no next frame to say it
        on). Call it after sending the `response.done`: the stop follows it."""
        if not self._queue:
            self._buffer.ran_dry()
            self._on_paced()

    def stop(self) -> None:
        super().stop()
        self._wake()

    def _wake(self) -> None:
        if self._silence_wait is not None:
            _resolve(self._silence_wait)

    def _take(self) -> np.ndarray:
        """The next frame's samples, each response's share reported to the buffer."""
        out = np.zeros(_FRAME_SAMPLES, dtype=np.int16)
        filled = 0
        while filled < _FRAME_SAMPLES and self._queue:
            response_id, chunk = self._queue[0]
            n = min(chunk.size, _FRAME_SAMPLES - filled)
            out[filled : filled + n] = chunk[:n]
            filled += n
            if n == chunk.size:
                self._queue.popleft()
            else:
                self._queue[0] = (response_id, chunk[n:])
            self._buffer.paced(response_id, n * 1000 / TRACK_RATE_HZ)
        if not self._queue:
            self._buffer.ran_dry()
        self._hangover = HANGOVER_FRAMES if filled else self._hangover - 1
        return out

    async def _silence(self, wait: float | None) -> None:
        """Wait `wait` s (None: until audio comes) while no audio is queued; audio that
        arrives meanwhile ends the wait."""
        # a future and a timer, not wait_for: no task per silent frame of every call
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[None] = loop.create_future()
        timer = None if wait is None else loop.call_later(wait, _resolve, waiting)
        self._silence_wait = waiting
        try:
            await waiting
        finally:
            if timer is not None:
                timer.cancel()
            self._silence_wait = None

    async def _pace(self) -> None:
        """Wait for the next frame's time on the schedule. A frame of audio after silence
        goes out at once; after a gap its timestamp is the time since the schedule began,
        so the receiver sees the gap as time passing, not as a late packet."""
        assert self._start is not None
        if not self._queue and self._hangover <= 0:  # the talkspurt is over: go quiet
            await self._silence(None)
            if self.readyState != "live":
                return
            elapsed = round((self._clock() - self._start) * TRACK_RATE_HZ)
            self._timestamp = max(self._timestamp + _FRAME_SAMPLES, elapsed)
            self._start = self._clock() - self._timestamp / TRACK_RATE_HZ
            return
        self._timestamp += _FRAME_SAMPLES
        wait = self._start + self._timestamp / TRACK_RATE_HZ - self._clock()
        if wait <= 0:
            return
        if self._queue:
            await asyncio.sleep(wait)
            return
        await self._silence(wait)
        if self._queue:  # the frame goes out early: later frames are paced from it
            self._start = self._clock() - self._timestamp / TRACK_RATE_HZ

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = self._clock()
        else:
            await self._pace()
            if self.readyState != "live":
                raise MediaStreamError
        samples = self._take()
        self._on_paced()
        timestamp = self._timestamp
        # encoded off the event loop, as aiortc's sender encodes the frames it is given
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._opus.encode, samples, timestamp)


class MicrophoneDecimator:
    """48 kHz pcm16 frames (mono or interleaved stereo, as aiortc decodes Opus) to 16 kHz
    mono pcm16: a 63-tap windowed-sinc low-pass at 7.2 kHz, evaluated only at every third
    sample, with the filter's history and phase kept across frames.

    Why not PyAV's resampler: it runs in the event loop's thread for every 20 ms packet of
    every call, and its filter graph cost about 140 us a packet there (a tenth of the loop
    at a dozen calls); this costs a few microseconds and keeps speech below 7 kHz intact."""

    TAPS = 63
    FACTOR = TRACK_RATE_HZ // MICROPHONE_RATE_HZ

    def __init__(self) -> None:
        n = np.arange(self.TAPS) - (self.TAPS - 1) / 2
        cutoff = 7_200 / TRACK_RATE_HZ
        taps = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hamming(self.TAPS)
        self._taps = (taps / taps.sum()).astype(np.float32)
        self._history = np.zeros(self.TAPS - 1, dtype=np.float32)
        self._phase = 0  # input samples to skip before the next output

    def __call__(self, frame: av.AudioFrame) -> bytes:
        samples = frame.to_ndarray().reshape(-1, len(frame.layout.channels))
        mono = samples.mean(axis=1, dtype=np.float32)
        signal = np.concatenate([self._history, mono])
        self._history = signal[-(self.TAPS - 1) :]
        windows = np.lib.stride_tricks.sliding_window_view(signal, self.TAPS)
        picked = windows[self._phase :: self.FACTOR]
        self._phase = (self._phase - mono.size) % self.FACTOR
        out = np.clip(np.rint(picked @ self._taps), -32768, 32767).astype("<i2")
        pcm: bytes = out.tobytes()
        return pcm


async def microphone_appends(track: MediaStreamTrack) -> AsyncIterator[bytes]:
    """16 kHz mono pcm16, one chunk per packet of the incoming audio track, until it
    ends."""
    decimate = MicrophoneDecimator()
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        pcm = decimate(frame)  # type: ignore[arg-type]
        if pcm:
            yield pcm


def audio_level_dbov(frame: av.AudioFrame) -> int:
    """RFC 6465's audio level of an s16 frame, the number aiortc's own computes for every
    packet it sends, from numpy instead of a Python loop over each sample (which cost
    the event loop about 7% at a dozen calls)."""
    samples = np.frombuffer(bytes(frame.planes[0]), dtype=np.int16).astype(np.int64)
    energy = float(np.dot(samples, samples))  # exact: below 2**53 for any packet
    rms = math.sqrt(energy / (frame.samples * 32767 * 32767))
    if rms <= 0:
        return -127
    return round(min(max(20 * math.log10(rms), -127), 0))


def jpeg_of(frame: av.VideoFrame, max_side_px: int = CAMERA_MAX_SIDE_PX) -> bytes:
    """One video frame as a JPEG whose longest side is at most `max_side_px`."""
    scale = min(1.0, max_side_px / max(frame.width, frame.height))
    # even sizes: the JPEG encoder's 4:2:0 chroma needs them
    width = max(2, int(frame.width * scale) // 2 * 2)
    height = max(2, int(frame.height * scale) // 2 * 2)
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height = width, height
    codec.pix_fmt = "yuvj420p"
    codec.time_base = fractions.Fraction(1, 1)
    codec.options = {"qmin": "2", "qmax": "6"}
    image = frame.reformat(width=width, height=height, format="yuvj420p")
    image.pts = 0
    packets = codec.encode(image) + codec.encode(None)
    return b"".join(bytes(p) for p in packets)


async def camera_appends(
    track: MediaStreamTrack, interval_ms: int = CAMERA_INTERVAL_MS
) -> AsyncIterator[bytes]:
    """A JPEG of the incoming video track every `interval_ms` (the newest frame then),
    until the track ends. Frames in between are decoded and dropped."""
    next_at = 0.0
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        now = time.monotonic()
        if now < next_at:
            continue
        next_at = now + interval_ms / 1000
        try:
            jpeg = await asyncio.to_thread(jpeg_of, frame)  # type: ignore[arg-type]
        except (av.FFmpegError, ValueError) as exc:  # a frame it cannot encode: the next one
            log.warning("dropped a camera frame of a call that could not be encoded: %s", exc)
            continue
        yield jpeg
