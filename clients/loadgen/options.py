"""What one run of the load generator offers (`BenchOptions`) and the session setup
every session sends (`RATE_HZ`, `TURN_DETECTION`)."""

from __future__ import annotations

import math
import urllib.parse
from dataclasses import dataclass
from typing import Any

from clients.cli import DEFAULT_URL

__all__ = ["RATE_HZ", "TURN_DETECTION", "WEBRTC_FRAME_MS", "BenchOptions", "BenchUsageError"]

RATE_HZ = 24_000
#: what a call's microphone track carries per frame (one Opus packet)
WEBRTC_FRAME_MS = 20
#: the turn detection `--vad` sends (the decision-point arithmetic uses these values)
TURN_DETECTION: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "min_speech_duration_ms": 96,
    "create_response": True,
    "interrupt_response": True,
}


class BenchUsageError(ValueError):
    """Options or an input file this tool cannot use (the message says why)."""


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """What to offer. `speech`: a WAV path, "piper" (the bundled Piper voice, needs the
    cpu and piper extras) or None (noise only); `probes`: sessions speaking it (None: 1 with speech,
    0 without); `frames_ms`: a camera frame every that many ms (None: none)."""

    url: str = DEFAULT_URL
    sessions: int = 10
    ramp_s: float = 0.0
    append_ms: int = 100
    duration_s: float = 30.0
    speech: str | None = None
    probes: int | None = None
    frames_ms: int | None = None
    vad: bool = True
    api_key: str | None = None
    metrics_url: str | None = None  # None: the websocket URL's host, /metrics
    server_pid: int | None = None
    command_line: str | None = None  # what the report names as the command
    #: "websocket", or "webrtc": each session is a call (POST /v1/realtime/calls)
    transport: str = "websocket"
    #: with webrtc: first the same sessions over the websocket, reported beside the calls
    baseline: bool = True

    def checked(self) -> BenchOptions:
        """These options, validated.

        Raises:
            BenchUsageError: a value out of range, naming it.
        """
        scheme = urllib.parse.urlsplit(self.url).scheme
        if scheme not in ("ws", "wss"):
            raise BenchUsageError(f"the URL must start with ws:// or wss://, got `{self.url}`")
        if self.sessions < 1:
            raise BenchUsageError("--sessions must be at least 1")
        if not 10 <= self.append_ms <= 1000:
            raise BenchUsageError("--append-ms must be 10..1000")
        if self.ramp_s < 0 or not math.isfinite(self.ramp_s):
            raise BenchUsageError("--ramp must be >= 0 seconds")
        if self.duration_s <= 0 or not math.isfinite(self.duration_s):
            raise BenchUsageError("--duration must be > 0 seconds")
        if self.transport not in ("websocket", "webrtc"):
            raise BenchUsageError("--transport must be websocket or webrtc")
        if self.transport == "webrtc" and self.frames_ms is not None:
            raise BenchUsageError("--frames is not supported with --transport webrtc")
        if self.transport == "webrtc" and self.append_ms != WEBRTC_FRAME_MS:
            raise BenchUsageError(
                f"--append-ms must be {WEBRTC_FRAME_MS} with --transport webrtc "
                "(one Opus packet per microphone frame)"
            )
        if self.frames_ms is not None and self.frames_ms < 20:
            raise BenchUsageError("--frames must be at least 20 ms")
        if self.probes is not None:
            if self.probes < 0 or self.probes > self.sessions:
                raise BenchUsageError("--probes must be 0..--sessions")
            if self.probes > 0 and self.speech is None:
                raise BenchUsageError("--probes needs --speech (a WAV file or `piper`)")
        return self

    @property
    def calls_url(self) -> str:
        """Where a call's offer goes: the websocket URL's host, its path + `/calls`."""
        parts = urllib.parse.urlsplit(self.url)
        scheme = "https" if parts.scheme == "wss" else "http"
        path = (parts.path.rstrip("/") or "/v1/realtime") + "/calls"
        return urllib.parse.urlunsplit((scheme, parts.netloc, path, "", ""))

    @property
    def probe_count(self) -> int:
        if self.probes is not None:
            return self.probes
        return 1 if self.speech is not None else 0
