"""The call's media arithmetic (transport/call_media.py): the microphone's 48 -> 16 kHz
decimation and the per-packet audio level, each against what it replaced."""

from __future__ import annotations

from typing import Any

import aiortc.rtp
import av
import numpy as np
import pytest

from transport.call_media import MicrophoneDecimator, audio_level_dbov
from transport.call_peer import AIORTC_AUDIO_LEVEL


def _frame(samples: np.ndarray, layout: str = "mono") -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout=layout)
    frame.sample_rate = 48_000
    return frame


def _tone(hz: float, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(48_000 * seconds)) / 48_000
    return np.round(amplitude * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def test_the_numpy_audio_level_is_aiortcs_for_every_loudness() -> None:
    rng = np.random.default_rng(5)
    for scale in (0, 1, 30, 1_000, 12_000, 32_767):
        samples = np.clip(rng.normal(0, scale, 960), -32768, 32767).astype(np.int16)
        frame = _frame(samples)
        assert audio_level_dbov(frame) == AIORTC_AUDIO_LEVEL(frame), scale
    assert AIORTC_AUDIO_LEVEL is not audio_level_dbov
    assert aiortc.rtp.compute_audio_level_dbov is audio_level_dbov


def test_decimation_keeps_speech_band_and_drops_what_would_alias() -> None:
    def rms_after(hz: float) -> float:
        decimate = MicrophoneDecimator()
        pcm = b"".join(decimate(_frame(c)) for c in np.split(_tone(hz, 0.6), 30))
        out = np.frombuffer(pcm, dtype="<i2").astype(np.float64)[1_600:]  # settled
        return float(np.sqrt(np.mean(out**2)))

    full = 0.5 * 32767 / np.sqrt(2)
    assert rms_after(1_000) == pytest.approx(full, rel=0.03)
    assert rms_after(5_000) == pytest.approx(full, rel=0.06)
    assert rms_after(12_000) < 0.01 * full  # would fold onto 4 kHz at 16 kHz


def test_decimation_is_the_same_in_any_packet_sizes_and_from_stereo() -> None:
    signal = _tone(700, 0.3) // 2 + _tone(2_300, 0.3, 0.2) // 2
    whole = MicrophoneDecimator()(_frame(signal))
    decimate = MicrophoneDecimator()
    pieces = np.split(signal, [481, 960, 2_401, 7_000, 9_601])
    parts = b"".join(decimate(_frame(p)) for p in pieces)
    assert parts == whole and len(whole) == 2 * signal.size // 3
    stereo = np.repeat(signal, 2)  # interleaved, both channels the same
    assert MicrophoneDecimator()(_frame(stereo, "stereo")) == whole


def test_a_calls_audio_receiver_hands_packets_on_without_prefetch() -> None:
    import asyncio

    from aiortc import RTCPeerConnection

    from transport.call_jitter import release_audio_at_once

    def buffers(peer: RTCPeerConnection) -> list[Any]:
        return [t.receiver._RTCRtpReceiver__jitter_buffer for t in peer.getTransceivers()]

    async def before_and_after() -> tuple[list[Any], list[Any]]:
        peer = RTCPeerConnection()
        peer.addTransceiver("audio")
        peer.addTransceiver("video")
        try:
            before = buffers(peer)
            release_audio_at_once(peer)
            return before, buffers(peer)
        finally:
            await peer.close()

    (audio_before, video_before), (audio, video) = asyncio.run(before_and_after())
    assert audio_before._prefetch == 4  # aiortc's own: 80 ms of packets held back
    assert audio._prefetch == 0 and audio.capacity == audio_before.capacity
    assert video is video_before  # video keeps its own buffer
