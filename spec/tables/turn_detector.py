"""Turn detector: server VAD segmentation from per-frame speech probabilities (B10),
`semantic_vad`'s pauses under review by the end-of-turn model (B32) and the pause's words
(B44), and the pause's onset by the frames' energy (B43)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["FRAME_MS", "TURN_DETECTOR", "DetectorState"]

#: one Silero frame: 512 samples at 16 kHz
FRAME_MS = 32


class DetectorState(enum.Enum):
    SILENCE = "silence"
    SPEECH = "speech"
    #: speech whose energy fell below the utterance's floor: the pause's work starts (its
    #: words, a reply prepared), though the speech model may still call the frames speech
    FADING = "fading"
    #: semantic_vad: a pause, the end-of-turn verdict on the utterance so far awaited
    REVIEW = "review"
    #: semantic_vad: a pause the verdict called unfinished (or gave no verdict for): the
    #: speaker may go on until the pause reaches its wait
    HELD = "held"


S = DetectorState

TURN_DETECTOR = Table(
    name="turn_detector",
    doc=(
        "Segments speech from 32 ms frame probabilities. Speech starts after "
        "min_speech_duration_ms of frames at or above the threshold; it ends only on frames "
        "below threshold - 0.15 once the silence run reaches silence_duration_ms. Under "
        "semantic_vad a 200 ms pause is reviewed instead (64 ms at eagerness high, reviewed "
        "again at 200 ms when held: review_again): the end-of-turn model's verdict "
        "ends the turn (finish) or holds it (hold) until speech resumes or the pause reaches "
        "the eagerness's maximum wait (time_out; silence_duration_ms when there was no "
        "verdict), on the audio clock or the session clock, whichever comes first. Words "
        "of the pause that trail off hold a finishing verdict; under eagerness high, words "
        "that close a question finish a holding one. Frames "
        "are counter updates; only boundaries are transitions. A speech frame whose level "
        "falls FADE_DB below the utterance's loudest fades the speech (fade): the pause's "
        "words are asked and a reply may be prepared at once, before the speech model's "
        "lag; a loud frame of speech resumes it (resume), which discards that work. A fade "
        "never ends a turn: only the probabilities do."
    ),
    states=DetectorState,
    initial=S.SILENCE,
    terminal=frozenset(),
    transitions=(
        T("start", S.SILENCE, S.SPEECH, effect="emit_speech_started", behaviours=("B10", "B11")),
        T(
            "stop",
            (S.SPEECH, S.FADING),
            S.SILENCE,
            effect="emit_speech_stopped",
            behaviours=("B10",),
        ),
        T("fade", S.SPEECH, S.FADING, behaviours=("B43",)),
        T(
            "pause",
            (S.SPEECH, S.FADING),
            S.REVIEW,
            effect="request_turn_end",
            behaviours=("B32",),
        ),
        T(
            "finish",
            S.REVIEW,
            S.SILENCE,
            effect="emit_speech_stopped",
            behaviours=("B32", "B44"),
        ),
        T("hold", S.REVIEW, S.HELD, behaviours=("B32", "B44")),
        T("review_again", S.HELD, S.REVIEW, effect="request_turn_end", behaviours=("B32",)),
        T("resume", (S.FADING, S.REVIEW, S.HELD), S.SPEECH, behaviours=("B32", "B43")),
        T(
            "time_out",
            (S.REVIEW, S.HELD),
            S.SILENCE,
            effect="emit_speech_stopped",
            behaviours=("B32", "B44"),
        ),
        T(
            "reset",
            (S.SILENCE, S.SPEECH, S.FADING, S.REVIEW, S.HELD),
            S.SILENCE,
            behaviours=("B10",),
        ),
    ),
    invariants={
        "VAD-1": "speech_started and speech_stopped alternate, starting with started",
        "VAD-2": (
            "semantic_vad awaits at most one end-of-turn verdict, and applies only the "
            "verdict of the pause under review"
        ),
        "VAD-3": "a fade ends no turn: speech_stopped comes only from the probabilities",
    },
)
