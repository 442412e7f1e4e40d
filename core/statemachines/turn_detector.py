"""Turn detector: server VAD segmentation from per-frame speech probabilities (B10).

Spec: `spec.tables.turn_detector.TURN_DETECTOR`. Diagram: `docs/statemachines/turn_detector.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends (the probabilities come from the runtime's VAD).

Theory of operation: each 32 ms frame probability is a counter update. In `silence`, a run
of frames at or above `threshold` lasting `max(min_speech_duration_ms, 32)` starts speech;
`audio_start_ms` is the run's start minus `prefix_padding_ms`, never before the last
reset. In `speech`, a frame at or above the threshold resets the silence run; a frame below
`max(threshold - 0.15, 0.01)` extends it and may end the turn once the run reaches
`silence_duration_ms`; frames in between extend the run but cannot end it (hysteresis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from core.statemachines._rulebook import build, fire
from spec.events import InputAudioBufferSpeechStarted, InputAudioBufferSpeechStopped
from spec.tables import TURN_DETECTOR, DetectorState
from spec.tables.turn_detector import FRAME_MS

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from spec.session_config import TurnDetection

__all__ = ["TurnDetector"]

_RULES = build(TURN_DETECTOR)

Boundary = Literal["start", "stop"]

FRAME_SAMPLES = FRAME_MS * 16


class TurnDetector:
    """Positions are 16 kHz samples on the session audio clock: frame k of the scores
    starts at `origin + 512 * k` (the origin moves when server VAD is switched on, since
    only audio appended while it is on is scored)."""

    __slots__ = (
        "frames_seen",
        "item_id",
        "last_reset",
        "origin",
        "outbox",
        "run_frames",
        "run_start",
        "silence_frames",
        "silence_start",
        "state",
    )

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.state = DetectorState.SILENCE
        self.origin = 0
        self.frames_seen = 0  # frames scored since the origin
        self.run_frames = 0
        self.run_start = 0
        self.silence_frames = 0
        self.silence_start = 0
        self.last_reset = 0
        self.item_id: str | None = None

    @property
    def speaking(self) -> bool:
        return self.state is DetectorState.SPEECH

    def feed(self, probability: float, config: TurnDetection) -> Boundary | None:
        """Account one frame; returns the boundary it crosses, if any (not yet fired)."""
        at = self.origin + FRAME_SAMPLES * self.frames_seen
        self.frames_seen += 1
        if self.state is DetectorState.SILENCE:
            if probability >= config.threshold:
                if self.run_frames == 0:
                    self.run_start = at
                self.run_frames += 1
                if self.run_frames * FRAME_MS >= max(config.min_speech_duration_ms, FRAME_MS):
                    return "start"
            else:
                self.run_frames = 0
            return None
        low = max(config.threshold - 0.15, 0.01)
        if probability >= config.threshold:
            self.silence_frames = 0
            return None
        if self.silence_frames == 0:
            self.silence_start = at
        self.silence_frames += 1
        if probability < low and self.silence_frames * FRAME_MS >= config.silence_duration_ms:
            return "stop"
        return None

    def start_ms(self, config: TurnDetection) -> int:
        """Where the speech began, with its prefix padding, never before the last reset."""
        return max(self.run_start - config.prefix_padding_ms * 16, self.last_reset) // 16

    def end_sample(self) -> int:
        """The end of the last frame scored."""
        return self.origin + FRAME_SAMPLES * self.frames_seen

    # --- verbs ----------------------------------------------------------------------

    def start(self, *, item_id: str, audio_start_ms: int) -> None:
        fire(_RULES, self, "start", item_id=item_id, audio_start_ms=audio_start_ms)
        self.item_id = item_id
        self.run_frames = 0
        self.silence_frames = 0

    def stop(self) -> str:
        """End the turn; returns the item id the utterance becomes."""
        item_id = self.item_id or ""
        fire(_RULES, self, "stop", item_id=item_id, audio_end_ms=self.end_sample() // 16)
        self.item_id = None
        self.run_frames = 0
        self.silence_frames = 0
        return item_id

    def reset(self, now_sample: int, *, restart: bool = False) -> None:
        """Back to silence; nothing before `now_sample` may start speech. `restart`: the
        scores start over at `now_sample` (server VAD was just switched on)."""
        fire(_RULES, self, "reset")
        self.item_id = None
        self.run_frames = 0
        self.silence_frames = 0
        self.last_reset = now_sample
        if restart:
            self.origin = now_sample
            self.frames_seen = 0

    # --- effects --------------------------------------------------------------------

    def emit_speech_started(self, event: EventData) -> None:
        self.outbox.emit(
            InputAudioBufferSpeechStarted(
                audio_start_ms=event.kwargs["audio_start_ms"], item_id=event.kwargs["item_id"]
            )
        )

    def emit_speech_stopped(self, event: EventData) -> None:
        self.outbox.emit(
            InputAudioBufferSpeechStopped(
                audio_end_ms=event.kwargs["audio_end_ms"], item_id=event.kwargs["item_id"]
            )
        )
