"""Turn detector: server VAD segmentation from per-frame speech probabilities (B10)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["FRAME_MS", "TURN_DETECTOR", "DetectorState"]

#: one Silero frame: 512 samples at 16 kHz
FRAME_MS = 32


class DetectorState(enum.Enum):
    SILENCE = "silence"
    SPEECH = "speech"


S = DetectorState

TURN_DETECTOR = Table(
    name="turn_detector",
    doc=(
        "Segments speech from 32 ms frame probabilities. Speech starts after "
        "min_speech_duration_ms of frames at or above the threshold; it ends only on frames "
        "below threshold - 0.15 once the silence run reaches silence_duration_ms. Frames are "
        "counter updates; only start and stop are transitions."
    ),
    states=DetectorState,
    initial=S.SILENCE,
    terminal=frozenset(),
    transitions=(
        T("start", S.SILENCE, S.SPEECH, effect="emit_speech_started", behaviours=("B10", "B11")),
        T("stop", S.SPEECH, S.SILENCE, effect="emit_speech_stopped", behaviours=("B10",)),
        T("reset", (S.SILENCE, S.SPEECH), S.SILENCE, behaviours=("B10",)),
    ),
    invariants={"VAD-1": "speech_started and speech_stopped alternate, starting with started"},
)
