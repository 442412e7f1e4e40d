"""The oracle's records: the numbers the prose fixes and the plain dataclasses the
reference session keeps (items, segments, requests, responses, the input buffer, live
transcripts and VAD state), with the copies server events are built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spec.effects import (
    ASR,
    TTS,
    VLM,
    Effect,
    HistoryTurn,
    Stage,
    SubmitAsr,
)
from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import (
    ContentPart,
    ConversationItem,
    ServerEvent,
)
from spec.reference.media import _ms

if TYPE_CHECKING:
    from spec.reference.calls import CallFields

__all__ = [
    "ASR_TAIL_MS",
    "PREROLL_MS",
    "SPEECH_PROBABILITY",
    "SPEECH_RMS",
    "VAD_FRAME_MS",
    "Output",
]


#: idle pre-roll window (section 2.1)
PREROLL_MS = 500
#: manual speech verdicts (section 2.1)
SPEECH_PROBABILITY = 0.5
SPEECH_RMS = 0.003
#: one VAD frame: 512 samples at 16 kHz (section 5)
VAD_FRAME_MS = 32
#: the VLM system prompt when the session has no instructions (section 3)

Output = ServerEvent | Effect

#: a VAD-ended utterance reaches the ASR up to this long after its final silence began
ASR_TAIL_MS = 200

# --- the model's records ---------------------------------------------------------------


@dataclass
class _Item:
    """A live conversation item (one version of a public id)."""

    id: str
    version: int
    role: str
    status: str
    content: list[ContentPart]
    seq: int
    #: for an assistant item made by a response
    response_id: str | None = None
    #: index of the audio part waiting for its transcript (speech profile), if any
    awaiting_index: int | None = None
    #: a user turn (a commit with content or a created user item; a quiet commit is not)
    tick: bool = False
    #: a response over this turn ended by listening (its last live segment)
    silent: bool = False
    #: when the turn was taken, in seconds since the session started (ticks only)
    time_s: float | None = None
    #: a function call or its output (3.8): its fields instead of content
    call: CallFields | None = None


@dataclass
class _Segment:
    """Input consumed by a response: a commit or a created user item."""

    item_id: str
    version: int
    seq: int
    #: holds audio that goes through ASR (in the `speech` profile)
    speech: bool
    audio: bytes
    #: the content index of that audio part
    content_index: int
    frames: list[bytes]
    #: the item's texts in content order; None marks where the ASR transcript goes
    texts: list[str | None]
    #: pending input bytes still held: audio until its SubmitAsr, frames until SubmitVlm
    audio_held: int
    frames_held: int
    transcript: str | None = None

    @property
    def held(self) -> int:
        return self.audio_held + self.frames_held


@dataclass(frozen=True)
class _PromptParts:
    """What a response's prompt holds (3.2, 4.1)."""

    history: tuple[HistoryTurn, ...]
    transcript: str | None
    frames: tuple[bytes, ...]
    time_s: float | None
    times: tuple[float | None, ...]
    shown: tuple[tuple[bytes, ...], ...]


@dataclass
class _Request:
    request_id: str
    stage: Stage
    response_id: str
    epoch: int
    segment: _Segment | None = None


@dataclass
class _Response:
    id: str
    item_id: str
    epoch: int
    segments: list[_Segment]
    audio_out: bool = True
    status: str = "in_progress"
    open: dict[str, _Request] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: {ASR: 0, VLM: 0, TTS: 0})
    asr_pending: int = 0
    vlm_submitted: bool = False
    #: streamed VLM text not yet sent to TTS, and whether any delta came
    vlm_text: str = ""
    saw_delta: bool = False
    #: its `tool_choice` asks for a call (section 3.8): its text waits for the decision
    must_call: bool = False
    decision: str | None = None
    tts_submitted: int = 0
    audio_started: bool = False
    #: (text, ms) of every audio chunk, in order
    chunks: list[tuple[str, float]] = field(default_factory=list)
    generated_ms: float = 0.0
    played_ms: float = 0.0
    #: the client reported a played position (an ack arrived)
    acked: bool = False
    #: the TTS request of the last audio chunk (transcript spacing between requests)
    last_tts: str | None = None
    first_audio_ms: int = 0
    cleared: bool = False
    expired: bool = False
    truncated_ms: float | None = None
    #: the reply of a text-only response
    text_reply: str | None = None

    @property
    def transcript(self) -> str:
        return "".join(text for text, _ in self.chunks)


@dataclass
class _Buffer:
    state: str = "idle"
    #: (start on the session audio clock in 16 kHz samples, converted pcm16) per append
    audio: list[tuple[int, bytes]] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    appended: bool = False
    has_speech: bool = False
    speech_item_id: str | None = None

    @property
    def nbytes(self) -> int:
        return sum(len(pcm) for _, pcm in self.audio) + sum(map(len, self.frames))

    @property
    def audio_ms(self) -> float:
        return sum(_ms(pcm) for _, pcm in self.audio)

    def pcm_until(self, cut_sample: int | None) -> bytes:
        """The buffered audio before `cut_sample` on the session clock (all when None)."""
        out = b""
        for start, pcm in self.audio:
            if cut_sample is None:
                out += pcm
            elif start < cut_sample:
                out += pcm[: 2 * (cut_sample - start)]
        return out


@dataclass
class _Live:
    """Live transcripts (section 5.2); the runtime sets `enabled` when its ASR offers them."""

    enabled: bool = False
    #: the utterance being spoken (its speech_started item id), None between utterances
    item_id: str | None = None
    #: the partial request out, the utterance it was asked for, whether at a pause
    in_flight: tuple[str, str, bool] | None = None
    sent_words: int = 0
    #: the audio clock (samples) of the last partial asked, or of speech start
    asked_at: int = 0
    count: int = 0
    #: the latest partial asked: (request id, its audio, its language), and its answer
    #: once it came (it outlives its utterance: a commit of the same audio takes it)
    last: tuple[str, bytes, str | None] | None = None
    last_answered: bool = False
    last_text: str | None = None
    #: whether it was a pause's partial, no speech was scored after it, and the audio of
    #: the turn the detector ended in its pause (D41)
    last_pause: bool = False
    last_quiet: bool = True
    last_turn_audio: bytes | None = None
    #: commits' ASR requests waiting for the partial that heard their audio (its id)
    waiting_asr: list[tuple[str, SubmitAsr]] = field(default_factory=list)


@dataclass
class _Vad:
    """The server VAD detector; positions are 16 kHz samples on the session clock."""

    state: str = "silence"
    origin: int = 0
    frames_seen: int = 0
    high_run: int = 0
    high_start: int = 0
    silence_run: int = 0
    silence_start: int = 0
    reset_at: int = 0
    # semantic VAD (section 5.1): the verdict awaited, the pause's wait and its deadline
    awaiting: str | None = None
    wait_ms: int = 0
    deadline: int | None = None
    #: the pause under review: the partial asked for it, and when it was reviewed
    review_partial: str | None = None
    review_at: int = 0
    #: a verdict that waits for the pause's words: (request id, probability, until)
    held: tuple[str, float, int] | None = None
    #: the verdicts asked for the current pause (a held one is asked again once, B32)
    reviews: int = 0
    #: the partial asked in the current silence run of the utterance (section 5.2, D41)
    pause_partial: str | None = None
    #: the fade (section 5.4): the utterance's loudest speech frame (dBFS) and the frames
    #: below its floor in a row
    peak_db: float | None = None
    quiet_run: int = 0


def _reject(
    code: ErrorCode, message: str, param: str | None, event_id: str | None
) -> RemoteProtocolError:
    return RemoteProtocolError(message, code=code, param=param, event_id=event_id)


def msgspec_copy(part: ContentPart) -> ContentPart:
    """A fresh copy of a content part (server events must not share mutable parts)."""
    return ContentPart(
        type=part.type,
        text=part.text,
        transcript=part.transcript,
        audio=part.audio,
        image_url=part.image_url,
    )


def msgspec_copy_item(item: ConversationItem) -> ConversationItem:
    return ConversationItem(
        id=item.id,
        role=item.role,
        status=item.status,
        content=[msgspec_copy(p) for p in item.content],
    )
