"""Turn detection's settings (B9, B10, B32): the keys a `turn_detection` object may hold,
what each `semantic_vad` eagerness means, `TurnDetection` with its defaults, and the
check of one `turn_detection` object that `spec.session_config.validate_session` runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import msgspec

from spec.errors import ErrorCode, InvalidSessionConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "EAGERNESS",
    "EAGER_FIRST_REVIEW_MS",
    "FADE_DB",
    "FADE_FRAMES",
    "PAUSE_CLOCK_MARGIN_MS",
    "SEMANTIC_PAUSE_MS",
    "SEMANTIC_VAD_KEYS",
    "TURN_DETECTION_KEYS",
    "EndOfTurnPolicy",
    "TurnDetection",
    "validate_turn_detection",
]

#: the keys `turn_detection` may hold; anything else is refused, so a misspelled knob
#: never silently does nothing
TURN_DETECTION_KEYS = frozenset(
    {
        "type",
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "create_response",
        "interrupt_response",
        "min_speech_duration_ms",
    }
)
#: the keys a `semantic_vad` turn detection may hold (the OpenAI GA union): Silero still
#: finds speech with the server VAD defaults, so its knobs are not offered here
SEMANTIC_VAD_KEYS = frozenset({"type", "eagerness", "create_response", "interrupt_response"})


class EndOfTurnPolicy(msgspec.Struct, frozen=True):
    """What one `eagerness` means: the end-of-turn model's probability at or above which a
    pause ends the turn, the longest a pause may last before the turn ends anyway, and the
    silence after which the model is first asked (`first_review_ms`). A pause first
    reviewed before `SEMANTIC_PAUSE_MS` and held is reviewed once more at it (B32).
    `questions_finish`: a pause whose words close a question counts as finished whatever
    the model's probability (B44)."""

    threshold: float
    max_wait_ms: int
    first_review_ms: int = 200
    questions_finish: bool = False


#: the silence (Silero frames below threshold - 0.15) after which `semantic_vad` asks the
#: end-of-turn model whether the turn is over (Smart Turn is trained for a 200 ms stop)
SEMANTIC_PAUSE_MS = 200
#: `high` asks first after 64 ms of silence: on 48 clips in two voices Smart Turn's
#: verdicts there agreed with its 200 ms ones but for two or three a voice, and those get
#: their second review at 200 ms; the price is a comma pause of 150 ms or more that both
#: models call finished (docs/performance.md, "The pause's words sooner")
EAGER_FIRST_REVIEW_MS = 64

#: a frame of speech this many dB below the loudest frame of its utterance fades the speech
#: (B43): the pause's words are asked and a reply prepared there, not only once Silero,
#: which lags the end of speech by a few frames, scores the pause. Relative to the
#: utterance, so it follows the speaker and the microphone; wide, so that the quieter
#: sounds of speech (a trailing fricative, 15-25 dB down) stay above it. A dip inside a
#: word that reaches it only starts work that the speech after it discards; a fade never
#: ends a turn
FADE_DB = 30.0
#: the quiet frames in a row that fade speech: one, the first frame whose energy drops
FADE_FRAMES = 1

#: a pause's wait ends on the session clock this much later than on the audio clock: the
#: session clock stands in for audio that stopped arriving, not for frames the VAD has yet
#: to score. Without it the speech after a 160 ms comma ("for me, please", "ask not"),
#: whose frame ends at 192 ms, raced a 200 ms wait on the session clock and lost whenever
#: it was scored 8 ms later than the frames before the verdict (the append, the VAD's
#: tick, a loop busy with the ASR and the end-of-turn model at that very pause)
PAUSE_CLOCK_MARGIN_MS = 100

#: `eagerness` -> policy. The waits are the ones OpenAI documents (8 / 4 / 2 s); the
#: thresholds move around Smart Turn's own 0.5: an eager detector takes a weaker "finished"
#: as enough, a patient one wants a stronger one. `auto` is `medium`.
#: Only `high` lets the words finish a pause (B44): OpenAI's semantic_vad judges "based on
#: the words the user has uttered", and Smart Turn scores some complete questions far below
#: even high's threshold (a pitch-shifted "Is this more orange or more red?" 0.03 at 64 ms
#: and 0.02 at 200 ms), which then wait the full 2 s while Whisper's words of the pause
#: already close the question. The patient eagernesses keep the model's say: a question
#: mark is the words' one cue, and a speaker who asks and goes on ("Is it red? Or is it
#: more orange?") is theirs to wait for.
EAGERNESS: dict[str, EndOfTurnPolicy] = {
    "low": EndOfTurnPolicy(threshold=0.7, max_wait_ms=8_000, first_review_ms=SEMANTIC_PAUSE_MS),
    "medium": EndOfTurnPolicy(threshold=0.5, max_wait_ms=4_000, first_review_ms=SEMANTIC_PAUSE_MS),
    "high": EndOfTurnPolicy(
        threshold=0.3,
        max_wait_ms=2_000,
        first_review_ms=EAGER_FIRST_REVIEW_MS,
        questions_finish=True,
    ),
    "auto": EndOfTurnPolicy(threshold=0.5, max_wait_ms=4_000, first_review_ms=SEMANTIC_PAUSE_MS),
}

_MS_KEYS = ("prefix_padding_ms", "silence_duration_ms", "min_speech_duration_ms")
_BOOL_KEYS = ("create_response", "interrupt_response")


class TurnDetection(msgspec.Struct, frozen=True, kw_only=True):
    """Turn detection settings after validation, defaults filled in (B9). `semantic_vad`
    (B32) keeps the server VAD fields at their defaults: Silero finds speech and pauses with
    them, and `silence_duration_ms` ends a pause no end-of-turn verdict was given for."""

    type: str = "server_vad"
    #: `semantic_vad` only: low | medium | high | auto (as given; `auto` acts as medium)
    eagerness: str | None = None
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    min_speech_duration_ms: int = 96
    create_response: bool = True
    interrupt_response: bool = True

    @property
    def end_of_turn(self) -> EndOfTurnPolicy | None:
        """The end-of-turn policy of `semantic_vad`; None for `server_vad`."""
        if self.type != "semantic_vad":
            return None
        return EAGERNESS[self.eagerness or "auto"]

    def public(self) -> dict[str, Any]:
        if self.type == "semantic_vad":
            return {
                "type": self.type,
                "eagerness": self.eagerness or "auto",
                "create_response": self.create_response,
                "interrupt_response": self.interrupt_response,
            }
        fields = msgspec.structs.asdict(self)
        del fields["eagerness"]
        return fields


def validate_turn_detection(raw: Mapping[str, Any] | None, param: str) -> TurnDetection | None:
    """`turn_detection` (at JSON path `param`) as settings with defaults filled in; None
    turns it off. Raises `InvalidSessionConfig` with the path of the first bad value."""

    def bad(message: str, key: str | None = None) -> InvalidSessionConfig:
        where = f"{param}.{key}" if key else param
        return InvalidSessionConfig(message, code=ErrorCode.UNSUPPORTED_TURN_DETECTION, param=where)

    if raw is None:
        return None
    kind = raw.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise bad(
            f"turn_detection type `{kind}` is not supported; "
            "use `server_vad`, `semantic_vad` or null",
            "type",
        )
    allowed = TURN_DETECTION_KEYS if kind == "server_vad" else SEMANTIC_VAD_KEYS
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise bad(f"unknown {kind} turn_detection key `{unknown[0]}`", unknown[0])
    if kind == "semantic_vad":
        return _semantic_vad(raw, bad)
    values: dict[str, Any] = {}
    if "threshold" in raw:
        t = raw["threshold"]
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise bad("`threshold` must be a finite number", "threshold")
        if not 0.15 < t <= 1:
            raise bad(f"`threshold` must be in (0.15, 1], got {t}", "threshold")
        values["threshold"] = float(t)
    for key in _MS_KEYS:
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise bad(f"`{key}` must be a finite number of milliseconds", key)
            if v < 0:
                raise bad(f"`{key}` must be >= 0, got {v}", key)
            values[key] = int(v)
    for key in _BOOL_KEYS:
        if key in raw:
            if not isinstance(raw[key], bool):
                raise bad(f"`{key}` must be a boolean", key)
            values[key] = raw[key]
    return TurnDetection(**values)


def _semantic_vad(
    raw: Mapping[str, Any], bad: Callable[[str, str], InvalidSessionConfig]
) -> TurnDetection:
    eagerness = raw.get("eagerness", "auto")
    if not isinstance(eagerness, str) or eagerness not in EAGERNESS:
        raise bad("`eagerness` must be one of low, medium, high, auto", "eagerness")
    values: dict[str, Any] = {"type": "semantic_vad", "eagerness": eagerness}
    for key in _BOOL_KEYS:
        if key in raw:
            if not isinstance(raw[key], bool):
                raise bad(f"`{key}` must be a boolean", key)
            values[key] = raw[key]
    return TurnDetection(**values)
