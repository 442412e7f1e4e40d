"""Headless Chromium with a fake microphone and camera, for the browser tests (tests/web)
and tools/browser_latency.py: the files Chromium loops as its devices (mono WAV audio,
YUV4MPEG2 video of one flat colour), its launch flags (WebRTC calls to a server on
127.0.0.1 included), and where Debian installs it (`make system-deps`).
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["CHROMIUM", "WEBRTC_FLAGS", "FakeMedia", "chromium_flags", "write_wav", "write_y4m"]

#: Debian's Chromium, which `make system-deps` installs
CHROMIUM = "/usr/bin/chromium"

#: WebRTC calls to a server on 127.0.0.1: Chromium gathers no loopback candidates unless
#: allowed, and hides host addresses behind mDNS names (which the server cannot resolve)
WEBRTC_FLAGS = (
    "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
)


@dataclass
class FakeMedia:
    """The fake devices' files: the microphone's WAV (its speech lasts `speech_s` of the
    `loop_s` Chromium loops) and the camera's Y4M."""

    wav: Path
    y4m: Path
    speech_s: float
    loop_s: float


def write_y4m(path: Path, rgb: tuple[int, int, int], width: int = 320, height: int = 240) -> None:
    """A few frames of one flat colour, as YUV4MPEG2 4:2:0 (BT.601 studio range)."""
    r, g, b = rgb
    y = 16 + (65.738 * r + 129.057 * g + 25.064 * b) / 256
    cb = 128 + (-37.945 * r - 74.494 * g + 112.439 * b) / 256
    cr = 128 + (112.439 * r - 94.154 * g - 18.285 * b) / 256
    planes = (
        np.full((height, width), round(y), np.uint8).tobytes()
        + np.full((height // 2, width // 2), round(cb), np.uint8).tobytes()
        + np.full((height // 2, width // 2), round(cr), np.uint8).tobytes()
    )
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F30:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(10):
            out.write(b"FRAME\n" + planes)


def write_wav(path: Path, samples: np.ndarray, rate_hz: int) -> None:
    """Float samples in [-1, 1] as a mono 16-bit WAV (clipped)."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(pcm.tobytes())


def chromium_flags(media: FakeMedia) -> list[str]:
    """Headless Chromium's arguments: `media` as its microphone and camera, permission
    granted, autoplay allowed, nothing fetched in the background."""
    return [
        *WEBRTC_FLAGS,
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={media.wav}",
        f"--use-file-for-fake-video-capture={media.y4m}",
        "--autoplay-policy=no-user-gesture-required",
    ]
