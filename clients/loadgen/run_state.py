"""`BenchRun`: what the sessions of one run share: the options, the payloads encoded once,
the schedule, the steady window, and every tally the report is made of."""

from __future__ import annotations

import array
import asyncio
import math
from typing import TYPE_CHECKING

from clients.loadgen.payloads import FRAME_JPEG_BASE64, noise_chunks, noise_payloads
from clients.loadgen.report import ProbeReport, SessionCounts
from clients.loadgen.schedule import Schedule, now

if TYPE_CHECKING:
    from clients.loadgen.options import BenchOptions
    from clients.loadgen.payloads import Speech

__all__ = ["BenchRun", "bump"]


def bump(table: dict[str, int], key: str) -> None:
    """Count one more `key` in `table`."""
    table[key] = table.get(key, 0) + 1


class BenchRun:
    """One run: its sessions count into it, the runner reads the report out of it."""

    def __init__(self, options: BenchOptions, speech: Speech | None) -> None:
        self.options = options
        self.speech = speech
        self.schedule = Schedule(options, now())
        self.noise = noise_payloads(options.append_ms)
        #: the same noise as raw pcm16, for a call's microphone track
        self.noise_pcm = noise_chunks(options.append_ms)
        self.frame_suffix = (',"video_frames":["' + FRAME_JPEG_BASE64 + '"]}').encode()
        self.counts = SessionCounts(offered=options.sessions)
        self.probe = ProbeReport(
            sessions=options.probe_count,
            speech_source=speech.source if speech else None,
            speech_seconds=speech.seconds if speech else None,
            end_of_speech_reference=(
                None
                if speech is None
                else "wav_envelope"
                if speech.voiced_last is not None
                else "speech_stopped"
            ),
        )
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending = options.sessions
        self.all_resolved = asyncio.Event()
        self.live = 0
        self.appends = 0
        self.appends_at_start = 0
        self.frames = 0
        self.errors: dict[str, int] = {}
        self.heartbeat_unsupported = 0
        self.unexpected_speech_started = 0
        self.in_window = False
        self.window_start = math.inf
        self.stop_at = math.inf
        self.rtts: list[float] = []
        self.recent_rtts: list[float] | None = None  # for the progress line, when shown
        self.send_lag: array.array[float] = array.array("f")
        self.loop_lag: array.array[float] = array.array("f")
        self.recent_lag = 0.0
        self.speech_started_delay: list[float] = []
        self.reply_latency: list[float] = []

    @property
    def t0(self) -> float:
        """When the run started (on `schedule.now()`)."""
        return self.schedule.t0

    def resolved(self) -> None:
        """A session connected, was refused or failed: the window opens after the last."""
        self.pending -= 1
        if self.pending <= 0:
            self.all_resolved.set()

    def connect_failed(self, reason: str) -> None:
        self.counts.connect_failed += 1
        bump(self.counts.connect_failed_by_reason, reason)

    def dropped(self, close_code: int | None) -> None:
        """A set-up session ended; only a drop before the window closed counts."""
        if now() >= self.stop_at:
            return
        self.live -= 1
        self.counts.dropped += 1
        bump(self.counts.dropped_by_close_code, str(close_code))

    def error(self, code: str) -> None:
        bump(self.errors, code)

    def heartbeat_rtt(self, sent: float, at: float) -> None:
        rtt = (at - sent) * 1000
        if self.recent_rtts is not None:
            self.recent_rtts.append(rtt)
        if self.window_start <= sent < self.stop_at:
            self.rtts.append(rtt)
