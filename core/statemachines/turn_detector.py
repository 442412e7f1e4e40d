"""Turn detector: server VAD segmentation from per-frame speech probabilities (B10), the
pauses `semantic_vad` puts under review by the end-of-turn model (B32), and the pause's
onset by the frames' energy (B43).

Spec: `spec.tables.turn_detector.TURN_DETECTOR`. Diagram: `docs/statemachines/turn_detector.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends (the probabilities come from the runtime's VAD).

Theory of operation: each 32 ms frame probability is a counter update. In `silence`, a run
of frames at or above `threshold` lasting `max(min_speech_duration_ms, 32)` starts speech;
`audio_start_ms` is the run's start minus `prefix_padding_ms`, never before the last
reset. In `speech`, a frame at or above the threshold resets the silence run; a frame below
`max(threshold - 0.15, 0.01)` extends it and may end the turn once the run reaches
`silence_duration_ms`; frames in between extend the run but cannot end it (hysteresis).

Under `semantic_vad` (B32) the same low frame ends not the turn but its speech, once the
run reaches the eagerness's `first_review_ms` (`SEMANTIC_PAUSE_MS`, 200 ms, but for
`high`): the pause goes under review (`pause`, one `SubmitTurnEnd` for the utterance so
far, its request id kept in `turn_end_id`). A frame at or above the threshold resumes
speech (the verdict still awaited is then stale and dropped); the verdict ends the turn
(`finish`) or holds it (`hold`). A pause first reviewed before `SEMANTIC_PAUSE_MS` and
held is reviewed once more when its silence reaches it (`review_again`: the model's own
length of pause, a second look for the eager detector). A held or reviewed pause ends at
its wait (`time_out`): the eagerness's maximum wait, or `silence_duration_ms` when no
verdict came. The wait is measured on the audio clock (the run of frames below the threshold) and
on the session clock (`deadline_ms`, `PAUSE_CLOCK_MARGIN_MS` later), whichever comes first:
audio may arrive faster than real time, or stop arriving; frames scored late must not end
a pause the speaker has already ended.

The onset by energy (B43): each frame may come with its level (dBFS). The utterance's
loudest level of a speech frame sets its floor, `FADE_DB` below; in `speech`, the first
frame below the floor fades it (`fade`), whatever its probability: Silero goes on calling
the end of a word speech for a few frames. Only a frame that is speech by both (at or
above the threshold, at or above the floor) resumes it (`resume`); `spoken` says whether
the last frame was one. The silence run, and with it every turn end and review, still
counts the probabilities alone: a fade only lets the pause's work begin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from core.statemachines._rulebook import build, fire
from spec.effects import SubmitTurnEnd
from spec.events import InputAudioBufferSpeechStarted, InputAudioBufferSpeechStopped
from spec.session_config import SEMANTIC_PAUSE_MS
from spec.tables import TURN_DETECTOR, DetectorState
from spec.tables.turn_detector import FRAME_MS
from spec.turn_detection import FADE_DB, FADE_FRAMES, PAUSE_CLOCK_MARGIN_MS

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from spec.session_config import TurnDetection

__all__ = ["TurnDetector", "TurnEnd"]

_RULES = build(TURN_DETECTOR)

Boundary = Literal["start", "stop", "fade", "pause", "review_again", "resume", "time_out"]

#: the triggers that end a turn: server VAD's silence, a reviewed pause's verdict or wait
TurnEnd = Literal["stop", "finish", "time_out"]

_PAUSED = (DetectorState.REVIEW, DetectorState.HELD)

FRAME_SAMPLES = FRAME_MS * 16


class TurnDetector:
    """Positions are 16 kHz samples on the session audio clock: frame k of the scores
    starts at `origin + 512 * k` (the origin moves when server VAD is switched on, since
    only audio appended while it is on is scored)."""

    __slots__ = (
        "deadline_ms",
        "frames_seen",
        "item_id",
        "last_reset",
        "origin",
        "outbox",
        "peak_db",
        "quiet_frames",
        "reviews",
        "run_frames",
        "run_start",
        "silence_frames",
        "silence_start",
        "spoken",
        "state",
        "turn_end_id",
        "wait_ms",
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
        #: semantic_vad: the verdict awaited for the pause under review
        self.turn_end_id: str | None = None
        #: semantic_vad: how long the current pause may last, and when that is on the
        #: session clock (None outside a pause)
        self.wait_ms = 0
        self.deadline_ms: int | None = None
        #: semantic_vad: the verdicts asked for the current pause
        self.reviews = 0
        #: the loudest level (dBFS) of a speech frame of the utterance (None: no levels)
        self.peak_db: float | None = None
        #: the frames below the floor in a row
        self.quiet_frames = 0
        #: the last frame was speech: at or above the threshold, and not below the floor
        self.spoken = False

    @property
    def speaking(self) -> bool:
        """Inside a turn: speech, or a pause of it under review or held."""
        return self.state is not DetectorState.SILENCE

    @property
    def paused(self) -> bool:
        return self.state in _PAUSED

    def overdue(self, now_ms: int) -> bool:
        """A pause that has reached its wait, on the session clock or the audio clock."""
        if not self.paused:
            return False
        by_clock = self.deadline_ms is not None and now_ms >= self.deadline_ms
        return by_clock or self.silence_frames * FRAME_MS >= self.wait_ms

    @property
    def fading(self) -> bool:
        return self.state is DetectorState.FADING

    def _quiet(self, probability: float, level: float | None, threshold: float) -> bool:
        """Whether the frame is below its utterance's floor (its level raises the
        utterance's peak first when it is speech)."""
        if level is None:
            return False
        if probability >= threshold:
            self.peak_db = level if self.peak_db is None else max(self.peak_db, level)
        return self.peak_db is not None and level < self.peak_db - FADE_DB

    def feed(
        self, probability: float, config: TurnDetection, level: float | None = None
    ) -> Boundary | None:
        """Account one frame (with its level in dBFS, if known); returns the boundary it
        crosses, if any (not yet fired)."""
        at = self.origin + FRAME_SAMPLES * self.frames_seen
        self.frames_seen += 1
        speech = probability >= config.threshold
        if self.state is DetectorState.SILENCE:
            if not speech or self.run_frames == 0:
                self.peak_db = None  # a new run of speech measures its own
            self.spoken = speech and not self._quiet(probability, level, config.threshold)
            if speech:
                if self.run_frames == 0:
                    self.run_start = at
                self.run_frames += 1
                if self.run_frames * FRAME_MS >= max(config.min_speech_duration_ms, FRAME_MS):
                    return "start"
            else:
                self.run_frames = 0
            return None
        low = max(config.threshold - 0.15, 0.01)
        quiet = self._quiet(probability, level, config.threshold)
        self.quiet_frames = self.quiet_frames + 1 if quiet else 0
        self.spoken = speech and not quiet
        # quiet frames of speech fade it; a fade never ends the turn (VAD-3)
        faded = self.quiet_frames >= FADE_FRAMES and self.state is DetectorState.SPEECH
        fade: Boundary | None = "fade" if faded else None
        if speech:
            self.silence_frames = 0
            if self.paused:
                return "resume"
            return "resume" if self.fading and self.spoken else fade
        if self.silence_frames == 0:
            self.silence_start = at
        self.silence_frames += 1
        silence_ms = self.silence_frames * FRAME_MS
        policy = config.end_of_turn
        if self.paused:
            if silence_ms >= self.wait_ms:
                return "time_out"
            again = (
                self.state is DetectorState.HELD
                and policy is not None
                and self.reviews == 1
                and policy.first_review_ms < SEMANTIC_PAUSE_MS <= silence_ms
                and probability < low
            )
            return "review_again" if again else None
        if probability >= low:
            return fade
        if policy is not None:
            return "pause" if silence_ms >= policy.first_review_ms else fade
        return "stop" if silence_ms >= config.silence_duration_ms else fade

    def start_ms(self, config: TurnDetection) -> int:
        """Where the speech began, with its prefix padding, never before the last reset."""
        return max(self.run_start - config.prefix_padding_ms * 16, self.last_reset) // 16

    def end_sample(self) -> int:
        """The end of the last frame scored."""
        return self.origin + FRAME_SAMPLES * self.frames_seen

    # --- verbs ----------------------------------------------------------------------

    def fade(self) -> None:
        """The speech's energy fell below its floor: the pause's work may begin."""
        fire(_RULES, self, "fade")

    def start(self, *, item_id: str, audio_start_ms: int) -> None:
        fire(_RULES, self, "start", item_id=item_id, audio_start_ms=audio_start_ms)
        self.item_id = item_id
        self.run_frames = 0
        self.silence_frames = 0

    def stop(self, trigger: TurnEnd = "stop") -> str:
        """End the turn (server VAD's silence, or a reviewed pause's verdict or wait);
        returns the item id the utterance becomes."""
        item_id = self.item_id or ""
        fire(_RULES, self, trigger, item_id=item_id, audio_end_ms=self.end_sample() // 16)
        self._end_pause()
        self.item_id = None
        self.run_frames = 0
        self.silence_frames = 0
        self.peak_db = None
        self.quiet_frames = 0
        return item_id

    def pause(
        self,
        *,
        request_id: str,
        pcm16: bytes,
        now_ms: int,
        max_wait_ms: int,
        partial_request_id: str | None = None,
    ) -> None:
        """Put the pause under review: ask for a verdict on `pcm16` (the utterance so far),
        with the text of the live partial `partial_request_id` if one was asked for it.
        Its wait is counted from the pause's first silent frame."""
        fire(
            _RULES,
            self,
            "pause",
            request_id=request_id,
            pcm16=pcm16,
            partial_request_id=partial_request_id,
        )
        self.turn_end_id = request_id
        self.reviews = 1
        self._wait(max_wait_ms, now_ms)

    def review_again(
        self, *, request_id: str, pcm16: bytes, partial_request_id: str | None = None
    ) -> None:
        """Review a held pause once more (its wait runs on from the pause's start)."""
        fire(
            _RULES,
            self,
            "review_again",
            request_id=request_id,
            pcm16=pcm16,
            partial_request_id=partial_request_id,
        )
        self.turn_end_id = request_id
        self.reviews += 1

    def hold(self, *, wait_ms: int, now_ms: int) -> None:
        """The verdict: not finished (or none): the pause may last `wait_ms`."""
        fire(_RULES, self, "hold")
        self.turn_end_id = None
        self._wait(wait_ms, now_ms)

    def resume(self) -> None:
        """Speech again after a fade, or inside a reviewed or held pause; the verdict
        awaited, if any, is no longer wanted."""
        fire(_RULES, self, "resume")
        self._end_pause()

    def reset(self, now_sample: int, *, restart: bool = False) -> None:
        """Back to silence; nothing before `now_sample` may start speech. `restart`: the
        scores start over at `now_sample` (server VAD was just switched on)."""
        fire(_RULES, self, "reset")
        self._end_pause()
        self.item_id = None
        self.run_frames = 0
        self.silence_frames = 0
        self.peak_db = None
        self.quiet_frames = 0
        self.spoken = False
        self.last_reset = now_sample
        if restart:
            self.origin = now_sample
            self.frames_seen = 0

    def _wait(self, wait_ms: int, now_ms: int) -> None:
        self.wait_ms = wait_ms
        # the session clock only stands in for audio that stops arriving (its margin)
        rest = max(0, wait_ms - self.silence_frames * FRAME_MS)
        self.deadline_ms = now_ms + rest + PAUSE_CLOCK_MARGIN_MS

    def _end_pause(self) -> None:
        self.turn_end_id = None
        self.wait_ms = 0
        self.deadline_ms = None
        self.reviews = 0

    # --- effects --------------------------------------------------------------------

    def request_turn_end(self, event: EventData) -> None:
        self.outbox.effect(
            SubmitTurnEnd(
                request_id=event.kwargs["request_id"],
                item_id=self.item_id or "",
                pcm16=event.kwargs["pcm16"],
                partial_request_id=event.kwargs["partial_request_id"],
            )
        )

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
