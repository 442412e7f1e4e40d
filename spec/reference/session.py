"""The test oracle: a deliberately naive, executable model of docs/session-semantics.md.

`ReferenceSession` has the interface of `core.session.SessionProtocol` (section 1 of the
semantics) and is written straight from the prose, with plain lists, dicts and ifs: no
state-machine library, no code shared with `core`. The stateful tests drive both with the
same inputs and compare what they emit (event types and ids, error codes, response status,
effects with their request ids and item refs).

Where the prose leaves a choice open, the most literal reading is taken; each such choice
is marked `AMBIGUITY (docs/session-semantics.md, decision Dn)` below, pointing at its entry
in section 11 of the document (the question, the decision and why), which core follows too.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from spec.effects import (
    ASR,
    DELEGATION,
    LIVE_CADENCE_MS,
    TTS,
    TURN_END_WINDOW_MS,
    VLM,
    Abort,
    CloseSession,
    Effect,
    EvictReplica,
    HistoryTurn,
    ItemRef,
    PromptInput,
    ResponseEnded,
    ScoreVad,
    Stage,
    SubmitAsr,
    SubmitDelegation,
    SubmitPartialAsr,
    SubmitTts,
    SubmitTurnEnd,
    SubmitVlm,
)
from spec.errors import ERROR_TYPE, ErrorCode, ProtocolError, RemoteProtocolError
from spec.events import (
    AudioFormat,
    ClientEvent,
    ContentPart,
    ConversationItem,
    ConversationItemAdded,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemDeleted,
    ConversationItemDone,
    ConversationItemRetrieve,
    ConversationItemRetrieved,
    ConversationItemTruncate,
    ConversationItemTruncated,
    Error,
    ErrorDetail,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCleared,
    InputAudioBufferCommit,
    InputAudioBufferCommitted,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionCompleted,
    InputAudioTranscriptionDelta,
    InputAudioTranscriptionFailed,
    OutputAudioBufferClear,
    OutputAudioBufferCleared,
    PlaybackAck,
    PlaybackAcknowledged,
    RateLimitsUpdated,
    Response,
    ResponseCancel,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseCreate,
    ResponseCreated,
    ResponseDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    ResponseStatusDetails,
    ServerEvent,
    SessionCapabilities,
    SessionClose,
    SessionClosed,
    SessionCreated,
    SessionEventAck,
    SessionHeartbeat,
    SessionHeartbeatAck,
    SessionResume,
    SessionUpdate,
    SessionUpdated,
)
from spec.limits import Limits
from spec.reference.calls import ReferenceCalls
from spec.session_config import (
    DEFAULT_INSTRUCTIONS,
    INPUT_FORMATS,
    MAX_RATE_HZ,
    MIN_RATE_HZ,
    SEMANTIC_PAUSE_MS,
    SessionConfig,
    validate_session,
)
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    DelegationAnswer,
    StageFailure,
    StageResult,
    TtsAudio,
    TtsDone,
    TurnEndVerdict,
    VadScores,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
)
from spec.tables.response import FIRST_CLAUSE_MIN_CHARS
from spec.trailing_transcript import trails_off

if TYPE_CHECKING:
    from spec.reference.calls import CallFields

__all__ = [
    "ASR_TAIL_MS",
    "PREROLL_MS",
    "SPEECH_PROBABILITY",
    "SPEECH_RMS",
    "VAD_FRAME_MS",
    "Output",
    "ReferenceSession",
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

_SAMPLE_BYTES = {"pcm16": 2, "pcm_f32le": 4, "g711_ulaw": 1, "g711_alaw": 1}
_G711 = ("g711_ulaw", "g711_alaw")
_JPEG = b"\xff\xd8"
_PNG = b"\x89PNG"
#: closing quotes and brackets that may follow a sentence end (section 3)
_CLOSERS = "\"')]}\u201d\u2019\u00bb"
#: a VAD-ended utterance reaches the ASR up to this long after its final silence began
ASR_TAIL_MS = 200


# --- audio helpers (naive, sample by sample) -------------------------------------------


def _ulaw(byte: int) -> float:
    u = ~byte & 0xFF
    magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)
    value = magnitude - 0x84
    return (-value if u & 0x80 else value) / 32768.0


def _alaw(byte: int) -> float:
    a = byte ^ 0x55
    exponent = (a >> 4) & 0x07
    mantissa = a & 0x0F
    magnitude = (
        (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
    )
    return (magnitude if a & 0x80 else -magnitude) / 32768.0


def _decode(audio: bytes, fmt: str) -> list[float]:
    """Samples on the float scale [-1, 1]."""
    if fmt == "pcm16":
        return [s / 32768.0 for s in struct.unpack(f"<{len(audio) // 2}h", audio)]
    if fmt == "pcm_f32le":
        out: list[float] = []
        for (s,) in struct.iter_unpack("<f", audio):
            out.append(0.0 if math.isnan(s) else max(-1.0, min(1.0, s)))
        return out
    if fmt == "g711_ulaw":
        return [_ulaw(b) for b in audio]
    return [_alaw(b) for b in audio]


def _to_pcm16_16k(audio: bytes, fmt: str, rate: int) -> tuple[bytes, float]:
    """Convert to 16 kHz mono pcm16: `floor(samples * 16000 / rate)` samples, linear
    interpolation (section 2.1); also return the RMS of the converted audio on the float
    scale."""
    samples = _decode(audio, fmt)
    if fmt == "pcm16" and rate == 16_000:
        rms = math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0
        return audio, rms
    if rate != 16_000:
        n_out = len(samples) * 16_000 // rate  # may be 0
        resampled: list[float] = []
        for i in range(n_out):
            pos = i * rate / 16_000
            lo = min(int(pos), len(samples) - 1)
            hi = min(lo + 1, len(samples) - 1)
            frac = pos - int(pos)
            resampled.append(samples[lo] * (1.0 - frac) + samples[hi] * frac)
        samples = resampled
    ints = [max(-32768, min(32767, round(s * 32767))) for s in samples]
    pcm = struct.pack(f"<{len(ints)}h", *ints)
    rms = math.sqrt(sum((i / 32768.0) ** 2 for i in ints) / len(ints)) if ints else 0.0
    return pcm, rms


def _ms(pcm16: bytes) -> float:
    """Duration of 16 kHz pcm16 audio (`audio_ms` = samples / 16)."""
    return (len(pcm16) // 2) / 16.0


def _is_image(frame: bytes) -> bool:
    return frame.startswith(_JPEG) or frame.startswith(_PNG)


def _data_url_image(url: str | None) -> bytes | None:
    """Decode a `data:` URL holding a JPEG or PNG; None when it is not one."""
    if not url or not url.startswith("data:") or "," not in url:
        return None
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        return None
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if raw and _is_image(raw) else None


def _sentences(text: str, *, first: bool = False) -> tuple[list[str], str]:
    """Split off every completed sentence: `.`, `!` or `?`, optionally followed by closing
    quotes or brackets, then whitespace (section 3). `first`: nothing of the reply was
    spoken yet, so its first piece also ends at a clause end (`,` `;` `:` with closers, or
    a dash between spaces, then whitespace) once it holds `FIRST_CLAUSE_MIN_CHARS`."""
    done: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        j = -1
        if text[i] in ".!?" or (first and not done and text[i] in ",;:"):
            j = i + 1
            while j < len(text) and text[j] in _CLOSERS:
                j += 1
            spaced = j < len(text) and text[j].isspace()
            short = text[i] in ",;:" and len(text[start:j].strip()) < FIRST_CLAUSE_MIN_CHARS
            if not spaced or short:
                j = -1
        elif (
            first
            and not done
            and text[i] in "-\u2013\u2014"
            and 0 < i < len(text) - 1
            and text[i - 1].isspace()
            and text[i + 1].isspace()
            and len(text[start : i + 1].strip()) >= FIRST_CLAUSE_MIN_CHARS
        ):
            j = i + 1
        if j >= 0:
            piece = text[start:j].strip()
            if piece:
                done.append(piece)
            start = j
            i = j
            continue
        i += 1
    return done, text[start:]


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


def _reject(
    code: ErrorCode, message: str, param: str | None, event_id: str | None
) -> RemoteProtocolError:
    return RemoteProtocolError(message, code=code, param=param, event_id=event_id)


# --- the session ---------------------------------------------------------------------


class ReferenceSession:
    """docs/session-semantics.md as naive executable Python (see the module docstring)."""

    def __init__(
        self,
        session_id: str = "s1",
        config: SessionConfig | None = None,
        limits: Limits | None = None,
        profile: str = "speech",
        now_ms: int = 0,
        input_languages: tuple[str, ...] | None = None,
        delegation: bool = False,
        live_transcripts: bool = False,
        punctuated_transcripts: bool = False,
        turn_end_budget_ms: int = 2000,
    ) -> None:
        self.session_id = session_id
        #: section 1: the languages the ASR knows; None (or none listed): it detects any
        self.input_languages = list(input_languages) if input_languages else None
        #: section 3.6: a background model answers delegated questions
        self.delegation = delegation
        #: section 5.1: the ASR ends sentences with a mark; a verdict's time budget
        self.punctuated = punctuated_transcripts
        self.turn_end_budget_ms = turn_end_budget_ms
        #: transcripts the session decided on (section 5.2), applied after the event
        self._later: list[AsrTranscript] = []
        self.delegations: dict[str, str] = {}  # open request id -> the note's response id
        self.waiting_answers: list[str] = []
        self.config = config if config is not None else SessionConfig()
        self.limits = limits if limits is not None else Limits()
        self.profile = profile
        self.now_ms = now_ms
        self.started_ms = now_ms
        #: the time of the event being applied (a turn taken now is stamped with it)
        self.event_ms = now_ms
        #: frames of earlier turns kept for history, one (item id, version, frame) each,
        #: oldest first (section 4.1)
        self.kept_frames: list[tuple[str, int, bytes]] = []
        self.epoch = 0
        self.closed = False
        self._outbox: list[Output] = []
        self._event_n = 0
        self._item_n = 0
        self._resp_n = 0
        self._seq = 0
        self._turn_n = 0
        self.last_client_ms = now_ms
        self.clock_samples = 0  # session audio clock, 16 kHz samples
        self.buffer = _Buffer()
        self.vad = _Vad()
        self.live = _Live(enabled=live_transcripts)
        self.items: dict[str, _Item] = {}  # live items, history order
        self.versions: dict[str, int] = {}  # last version of every id ever used
        self.retained: list[_Segment] = []
        self.deferred: list[_Segment] = []
        self.unanswered: list[_Segment] = []
        self.responses: dict[str, _Response] = {}  # creation order
        self.active: _Response | None = None
        # AMBIGUITY (docs/session-semantics.md, decision D31): the session was asked something
        # once a VLM request carried a transcript, and stays so.
        self.asked = False
        self.calls = ReferenceCalls(self, _Item, _Segment)  # section 3.8
        self._emit(
            SessionCreated(
                session=self.config.public(self.session_id, profile=self.profile, epoch=0),
                capabilities=SessionCapabilities(input_languages=self.input_languages),
            )
        )

    # --- interface (section 1) ---------------------------------------------------------

    def receive(self, event: ClientEvent, now_ms: int) -> None:
        """Apply one client event; raises `RemoteProtocolError` (nothing changed) when it
        is refused. Ignored once the session is closed."""
        if self.closed:
            return
        before, self.event_ms = self.event_ms, now_ms
        try:
            self._dispatch(event)
        except BaseException:
            self.event_ms = before  # a rejected event changes nothing
            raise
        self.now_ms = now_ms
        self._apply_later()
        # only accepted events get here (section 7: rejected ones change nothing)
        self.last_client_ms = now_ms
        self._truncate_history()

    def backend_event(self, result: StageResult, now_ms: int) -> None:
        """Apply a stage result; stale ones are dropped silently."""
        if self.closed:
            return
        self.now_ms = self.event_ms = now_ms
        self._on_backend_event(result)
        self._apply_later()
        self._truncate_history()

    def _apply_later(self) -> None:
        """Section 5.2: a commit's transcript taken from a live partial is applied once the
        event that led to it is done, as the ASR's answer would be."""
        while self._later and not self.closed:
            self._on_backend_event(self._later.pop(0))

    def _truncate_history(self) -> None:
        """Section 10: after every event, while more than `max_items` items are live or
        their texts exceed `max_history_bytes`, the oldest completed one is deleted, as a
        client's delete would (D9)."""
        while (
            len(self.items) > self.limits.max_items
            or self._history_bytes() > self.limits.max_history_bytes
        ):
            oldest = next((i for i in self.items.values() if i.status == "completed"), None)
            if oldest is None:
                return
            self._delete_item(oldest)  # as if the client deleted it (D9)
        # remembered responses: the oldest neither active nor possibly playing are forgotten
        while len(self.responses) > self.limits.max_responses:
            old = next(
                (
                    r
                    for r in self.responses.values()
                    if r is not self.active and not self._may_play(r)
                ),
                None,
            )
            if old is None:
                return
            del self.responses[old.id]

    def _history_bytes(self) -> int:
        """Section 10: UTF-8 bytes of the texts and transcripts of the completed items."""
        return sum(
            len(
                (
                    self.calls.text(i)
                    if i.call is not None
                    else " ".join(t for p in i.content for t in (p.text, p.transcript) if t)
                ).encode()
            )
            for i in self.items.values()
            if i.status == "completed"
        )

    def _on_backend_event(self, result: StageResult) -> None:
        if isinstance(result, VadScores):
            self._on_vad_scores(result)
            return
        if isinstance(result, DelegationAnswer | StageFailure) and (
            result.request_id in self.delegations
        ):
            self._on_delegation_result(result)
            return
        if isinstance(result, DelegationAnswer):
            return  # fenced (3.6)
        if isinstance(result, TurnEndVerdict):
            self._on_turn_end_verdict(result)
            return
        if isinstance(result, AsrPartial):
            self._on_partial(result)
            return
        resp = self.active
        if resp is None or result.request_id not in resp.open:
            return  # fenced (B11)
        req = resp.open[result.request_id]
        if req.epoch != self.epoch:
            return
        if isinstance(result, StageFailure):
            self._on_failure(resp, req, result)
        elif isinstance(result, AsrTranscript) and req.stage == ASR:
            self._on_transcript(resp, req, result)
        elif isinstance(result, VlmDelta) and req.stage == VLM:
            self._on_vlm_delta(resp, result)
        elif isinstance(result, VlmCallDelta) and req.stage == VLM:
            self.calls.on_delta(resp, result)
        elif isinstance(result, VlmDecisionResult) and req.stage == VLM:
            self._on_vlm_decision(resp, req, result)
        elif isinstance(result, TtsAudio) and req.stage == TTS:
            self._on_tts_audio(resp, result)
        elif isinstance(result, TtsDone) and req.stage == TTS:
            del resp.open[req.request_id]
            self._maybe_complete(resp)

    def handle_timeout(self, now_ms: int) -> None:
        """Fire every deadline <= now_ms."""
        if self.closed:
            return
        self.now_ms = now_ms
        for r in self.responses.values():
            deadline = self._playback_deadline(r)
            if deadline is not None and now_ms >= deadline:
                r.expired = True
        held = self.vad.held
        if held is not None and held[0] == self.vad.awaiting and now_ms >= held[2]:
            # section 5.1: the words did not come within the verdict's budget
            self.vad.held = None
            self._apply_verdict(TurnEndVerdict(held[0], held[1]))
        if self.config.turn_detection is not None and self._pause_overdue():
            self._turn_ended()
        self._apply_later()
        idle = self._idle_deadline()
        if idle is not None and now_ms >= idle:
            self._close("idle_timeout")

    def next_deadline(self) -> int | None:
        if self.closed:
            return None
        deadlines: list[int] = []
        idle = self._idle_deadline()
        if idle is not None:
            deadlines.append(math.ceil(idle))
        for r in self.responses.values():
            pb = self._playback_deadline(r)
            if pb is not None:
                deadlines.append(math.ceil(pb))
        if self.vad.deadline is not None:
            deadlines.append(self.vad.deadline)
        held = self.vad.held
        if held is not None and held[0] == self.vad.awaiting:
            deadlines.append(held[2])
        return min(deadlines) if deadlines else None

    def next_outputs(self) -> list[Output]:
        out, self._outbox = self._outbox, []
        return out

    def error_event(self, exc: ProtocolError) -> Error:
        """The wire error for a rejection; allocates an event id (not queued)."""
        return Error(event_id=self._next_event_id(), error=self._detail(exc.code, exc.message, exc))

    # --- introspection for tests -------------------------------------------------------

    def pending_bytes(self) -> int:
        """Bytes held before their stage request (buffer, queued commits and user items,
        segments of the active response not yet submitted)."""
        total = self.buffer.nbytes
        total += sum(s.held for s in self.retained + self.deferred + self.unanswered)
        if self.active is not None:
            total += sum(s.held for s in self.active.segments)
        return total

    def playing_responses(self) -> list[_Response]:
        """Every response whose audio may still be playing, oldest first (section 6)."""
        return [r for r in self.responses.values() if self._may_play(r)]

    def playing(self) -> bool:
        """Whether the audio of some finished response may still be playing."""
        return bool(self.playing_responses())

    def _may_play(self, r: _Response) -> bool:
        """Section 6: after its response.done, a response's audio may still be playing
        until it is acked fully, cleared, or its deadline passed."""
        return (
            r.status != "in_progress"
            and r.audio_started
            and not r.cleared
            and not r.expired
            and r.played_ms < r.generated_ms
        )

    def invariant_violations(self) -> list[str]:
        """Internal invariants (I1, I5, I6, I8); an empty list when all hold."""
        bad: list[str] = []
        if self.closed:
            return bad  # nothing is held or emitted any more (I9)
        live = [r for r in self.responses.values() if r.status == "in_progress"]
        if len(live) > 1 or (live and self.active is not live[0]):
            bad.append("I1: more than one active response")
        if self.pending_bytes() > self.limits.max_pending_input_bytes:
            bad.append(f"I5: pending bytes {self.pending_bytes()}")
        if self.buffer.state == "idle":
            if len(self.buffer.frames) > 1:
                bad.append("I6: idle buffer holds more than one frame")
            audio = self.buffer.audio
            if audio and self.buffer.audio_ms - _ms(audio[-1][1]) > PREROLL_MS:
                bad.append("I6: idle buffer holds more than the pre-roll")
        for r in self.responses.values():
            if r.played_ms > r.generated_ms:
                bad.append(f"I8: {r.id} played {r.played_ms} > generated {r.generated_ms}")
        if self.deferred and self.active is None:
            bad.append("deferred commits without an active response")
        if len(self.retained) + len(self.deferred) > self.limits.max_pending_commits:
            bad.append("B13: more commits queued than max_pending_commits")
        return bad

    def snapshot(self) -> tuple[object, ...]:
        """A canonical, id-free summary of the state (for exploration and dedup)."""
        b = self.buffer
        buf = (b.state, round(b.audio_ms), len(b.frames), b.appended, b.has_speech)
        v = self.vad
        vad = (v.state, v.high_run, v.silence_run, v.awaiting is not None, v.wait_ms)

        def segs(xs: list[_Segment]) -> tuple[tuple[bool, int, int], ...]:
            return tuple((s.speech, len(s.frames), s.held) for s in xs)

        act: tuple[object, ...] = ()
        if self.active is not None:
            r = self.active
            act = (
                tuple(sorted(q.stage for q in r.open.values())),
                r.vlm_submitted,
                r.decision,
                r.saw_delta,
                r.tts_submitted,
                r.audio_started,
                round(r.generated_ms),
                round(r.played_ms),
                segs(r.segments),
            )
        items = tuple((i.role, i.status, i.awaiting_index is not None) for i in self.items.values())
        playing = tuple(
            (round(r.generated_ms), round(r.played_ms)) for r in self.playing_responses()
        )
        return (
            self.closed,
            buf,
            vad if self.config.turn_detection is not None else None,
            segs(self.retained),
            segs(self.deferred),
            segs(self.unanswered),
            act,
            playing,
            items,
            self.pending_bytes(),
            (len(self.delegations), len(self.waiting_answers)),
        )

    # --- plumbing ----------------------------------------------------------------------

    def _next_event_id(self) -> str:
        self._event_n += 1
        return f"event_{self._event_n}"

    def _new_item_id(self) -> str:
        self._item_n += 1
        return f"item_{self._item_n}"

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _emit(self, event: ServerEvent) -> None:
        event.event_id = self._next_event_id()
        if hasattr(event, "epoch"):
            event.epoch = self.epoch
        self._outbox.append(event)

    def _effect(self, effect: Effect) -> None:
        self._outbox.append(effect)

    def _detail(self, code: ErrorCode, message: str, exc: ProtocolError | None) -> ErrorDetail:
        return ErrorDetail(
            type=ERROR_TYPE[code].value,
            code=code.value,
            message=message,
            param=exc.param if exc is not None else None,
            event_id=exc.event_id if exc is not None else None,
        )

    def _server_error(self, code: ErrorCode, message: str) -> None:
        """An `error` event that answers no client event (no event id)."""
        self._emit(
            Error(error=ErrorDetail(type=ERROR_TYPE[code].value, code=code.value, message=message))
        )

    def _idle_deadline(self) -> float | None:
        """Section 7: the session's value can only lower the operator's (limits); a session
        value of 0 or none means the operator's; no timeout only when the operator has none."""
        operator = self.limits.idle_timeout_s
        s = self.config.idle_timeout_s
        if s is None or s == 0:
            seconds = operator
        elif operator == 0:
            seconds = s
        else:
            seconds = min(s, operator)
        if seconds == 0:
            return None
        return self.last_client_ms + seconds * 1000.0

    def _playback_deadline(self, r: _Response) -> float | None:
        if not self._may_play(r):
            return None
        return r.first_audio_ms + r.generated_ms + 1000.0

    def _wire_item(self, item: _Item) -> ConversationItem:
        if item.call is not None:
            return self.calls.wire(item)
        return ConversationItem(
            id=item.id,
            role=item.role,
            status=item.status,
            content=[msgspec_copy(p) for p in item.content],
        )

    def _tick(self, item: _Item) -> None:
        # a user turn is stamped with the time of the event that took it, from the
        # session's start (decision D30, noted where history is built)
        item.tick = True
        item.time_s = (self.event_ms - self.started_ms) / 1000

    def _keep_frames(self, segments: list[_Segment]) -> None:
        """Section 4.1: the frames a VLM request showed, newest kept within the limits."""
        for s in segments:
            if self._live(s.item_id, s.version) is not None:
                self.kept_frames.extend((s.item_id, s.version, f) for f in s.frames)
        while len(self.kept_frames) > self.limits.max_context_images or (
            sum(len(f) for _, _, f in self.kept_frames) > self.limits.max_context_image_bytes
        ):
            del self.kept_frames[0]

    def _frames_of(self, item: _Item) -> tuple[bytes, ...]:
        return tuple(f for i, v, f in self.kept_frames if (i, v) == (item.id, item.version))

    def _live(self, item_id: str, version: int) -> _Item | None:
        item = self.items.get(item_id)
        return item if item is not None and item.version == version else None

    def _add_item(self, item: _Item) -> str | None:
        """Append to history; returns the previous item's id."""
        prev = next(reversed(self.items), None) if self.items else None
        self.items[item.id] = item
        return prev

    def _new_version(self, item_id: str) -> int:
        self.versions[item_id] = self.versions.get(item_id, 0) + 1
        return self.versions[item_id]

    # --- dispatch ----------------------------------------------------------------------

    def _dispatch(self, event: ClientEvent) -> None:
        eid = event.event_id
        if isinstance(event, SessionUpdate):
            self._on_session_update(event)
        elif isinstance(event, InputAudioBufferAppend):
            self._on_append(event)
        elif isinstance(event, InputAudioBufferCommit):
            self._on_commit(event)
        elif isinstance(event, InputAudioBufferClear):
            self._on_clear()
        elif isinstance(event, ConversationItemCreate):
            self._on_item_create(event)
        elif isinstance(event, ConversationItemDelete):
            self._on_item_delete(event)
        elif isinstance(event, ConversationItemRetrieve):
            item = self.items.get(event.item_id)
            if item is None:
                raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", eid)
            self._emit(ConversationItemRetrieved(item=self._wire_item(item)))
        elif isinstance(event, ConversationItemTruncate):
            self._on_truncate(event)
        elif isinstance(event, ResponseCreate):
            self._on_response_create(event)
        elif isinstance(event, ResponseCancel):
            self._on_cancel(event.response_id, eid, clear=False)
        elif isinstance(event, OutputAudioBufferClear):
            self._on_cancel(event.response_id, eid, clear=True)
        elif isinstance(event, PlaybackAck):
            self._on_ack(event)
        elif isinstance(event, SessionHeartbeat):
            self._emit(SessionHeartbeatAck())
        elif isinstance(event, SessionClose):
            self._close(event.reason)
        elif isinstance(event, SessionResume):
            # AMBIGUITY (docs/session-semantics.md, decision D27): resume belongs to the
            # connection (the runtime's journal and attachment); the session is unchanged
            pass
        elif isinstance(event, SessionEventAck):
            # AMBIGUITY (docs/session-semantics.md, decision D28): an ack trims the
            # runtime's journal only; it refreshes the idle deadline like any event
            pass
        else:
            raise _reject(ErrorCode.UNKNOWN_EVENT, "unknown event", "type", eid)

    # --- session (section 7) -----------------------------------------------------------

    def _on_session_update(self, event: SessionUpdate) -> None:
        try:
            # AMBIGUITY (docs/session-semantics.md, decision D36): a pinned language the ASR
            # does not know is refused by its primary subtag, and only when the update
            # names it (the validator of section 7 decides both)
            config = validate_session(event.session, self.config, languages=self.input_languages)
        except RemoteProtocolError as exc:
            exc.event_id = event.event_id
            raise
        old = self.config.turn_detection
        self.config = config
        if config.turn_detection != old:
            # any change of turn_detection resets the detector to silence (no event); the
            # input buffer (and a pending speech item id) stays. Switching VAD on starts
            # its 32 ms frames at the current audio clock (ScoreVad covers only audio
            # appended while VAD is on).
            self._reset_vad(restart=old is None and config.turn_detection is not None)
        self._emit(
            SessionUpdated(
                session=config.public(self.session_id, profile=self.profile, epoch=self.epoch)
            )
        )

    def _reset_vad(self, *, restart: bool = False) -> None:
        """The detector back to silence; positions before now no longer start speech."""
        now = self.clock_samples
        self.live.item_id = None  # a partial still out is dropped
        origin, seen = self.vad.origin, self.vad.frames_seen
        self.vad = _Vad(
            reset_at=now, origin=now if restart else origin, frames_seen=0 if restart else seen
        )

    def _close(self, reason: str) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D1): "active work is aborted without
        # emitting response events": an Abort effect for every open request of the active response
        # (effects are not response events), before session.closed.
        if self.active is not None:
            for req in self.active.open.values():
                self._effect(
                    Abort(request_id=req.request_id, stage=req.stage, response_id=req.response_id)
                )
            self.active.open.clear()
        self._drop_delegations(None)
        self._emit(SessionClosed(reason=reason))
        self._effect(CloseSession(reason=reason))
        self.closed = True
        self.active = None

    # --- input (section 2.1 - 2.3) -----------------------------------------------------

    def _on_append(self, event: InputAudioBufferAppend) -> None:
        eid = event.event_id
        fmt = self.config.input_format.name
        rate = self.config.input_format.rate_hz
        raw_fmt: str | AudioFormat | None = (
            event.format if event.format is not None else event.input_audio_format
        )
        fmt_rate: int | None = None
        if raw_fmt is not None:
            name = raw_fmt if isinstance(raw_fmt, str) else raw_fmt.type
            canonical = INPUT_FORMATS.get(name.strip().lower())
            if canonical is None:
                raise _reject(
                    ErrorCode.UNSUPPORTED_AUDIO_FORMAT, f"unsupported format {name}", "format", eid
                )
            if not isinstance(raw_fmt, str):
                fmt_rate = raw_fmt.rate or raw_fmt.sample_rate_hz or raw_fmt.sample_rate
            if canonical != fmt:
                # AMBIGUITY (docs/session-semantics.md, decision D2): a format named without a rate
                # uses 8 kHz for G.711, else the session's input rate (as the session validator
                # does).
                rate = 8_000 if canonical in _G711 else rate
            fmt = canonical
        given_rate = event.sample_rate_hz or event.sample_rate or fmt_rate
        if given_rate is not None:
            if not MIN_RATE_HZ <= given_rate <= MAX_RATE_HZ:
                raise _reject(
                    ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
                    f"unsupported sample rate {given_rate}",
                    "sample_rate_hz",
                    eid,
                )
            rate = given_rate
        if len(event.audio) % _SAMPLE_BYTES[fmt]:
            raise _reject(
                ErrorCode.BAD_AUDIO, "audio is not a whole number of samples", "audio", eid
            )
        # section 2.1: at most max_append_audio_ms of audio once at 16 kHz
        if len(event.audio) // _SAMPLE_BYTES[fmt] * 16_000 // rate > (
            self.limits.max_append_audio_ms * 16
        ):
            raise _reject(ErrorCode.EVENT_TOO_LARGE, "too much audio", "audio", eid)
        frames = list(event.video_frames)
        if len(frames) > self.limits.max_video_frames_per_append:
            raise _reject(ErrorCode.INVALID_VIDEO_FRAMES, "too many frames", "video_frames", eid)
        for i, frame in enumerate(frames):
            if not frame or len(frame) > self.limits.max_video_frame_bytes or not _is_image(frame):
                raise _reject(
                    ErrorCode.INVALID_VIDEO_FRAMES, "bad frame", f"video_frames[{i}]", eid
                )
        if not event.audio and not frames:
            # AMBIGUITY (docs/session-semantics.md, decision D3): the param is `audio`.
            raise _reject(
                ErrorCode.INVALID_INPUT_MODALITY, "neither audio nor frames", "audio", eid
            )
        pcm, rms = _to_pcm16_16k(event.audio, fmt, rate) if event.audio else (b"", 0.0)
        speech = False
        if pcm and self.config.turn_detection is None:
            # AMBIGUITY (docs/session-semantics.md, decision D4): an append without (converted)
            # audio is never speech, even with `is_speech: true`.
            if event.is_speech is not None:
                speech = event.is_speech
            elif event.speech_probability is not None:
                speech = event.speech_probability >= SPEECH_PROBABILITY
            else:
                speech = rms >= SPEECH_RMS
        old = self.buffer
        start = self.clock_samples
        buf = _Buffer(
            state="capturing" if speech else old.state,
            audio=[*old.audio, (start, pcm)] if pcm else list(old.audio),
            frames=[*old.frames, *frames],
            appended=True,
            has_speech=old.has_speech or speech,
            speech_item_id=old.speech_item_id,
        )
        self._trim(buf)
        # AMBIGUITY (docs/session-semantics.md, decision D5): "would make pending bytes exceed" is
        # the pending total after this append, i.e. after the idle retention dropped what it drops
        # (an idle camera session never hits backpressure).
        if self.pending_bytes() - old.nbytes + buf.nbytes > self.limits.max_pending_input_bytes:
            raise _reject(ErrorCode.INPUT_BACKPRESSURE, "pending input is full", None, eid)

        # accepted
        self.clock_samples += len(pcm) // 2
        self.buffer = buf
        if self.config.turn_detection is not None and pcm:
            self._effect(ScoreVad(pcm16=pcm, start_ms=int(start / 16)))
        elif pcm:
            self._manual_live(speech)

    def _trim(self, buf: _Buffer) -> None:
        if buf.state == "idle":
            while len(buf.audio) > 1 and buf.audio_ms > PREROLL_MS:
                buf.audio.pop(0)
            del buf.frames[:-1]
        else:
            excess = len(buf.frames) - self.limits.max_context_images
            if excess > 0:
                del buf.frames[:excess]

    def _on_clear(self) -> None:
        self.buffer = _Buffer()
        self._reset_vad()
        self._emit(InputAudioBufferCleared())

    def _commit_refusal(self) -> tuple[ErrorCode, str] | None:
        """Section 2.3: why the input buffer cannot be committed now, if it cannot."""
        buf = self.buffer
        if not buf.appended and not buf.frames:
            return ErrorCode.INPUT_AUDIO_BUFFER_EMPTY, "nothing to commit"
        quiet = not buf.has_speech and not buf.frames
        # items created by the client do not count; quiet commits are never refused
        if not quiet and len(self.retained) + len(self.deferred) >= self.limits.max_pending_commits:
            return ErrorCode.INPUT_BACKPRESSURE, "too many pending commits"
        return None

    def _on_commit(self, event: InputAudioBufferCommit) -> None:
        refusal = self._commit_refusal()
        if refusal is not None:
            raise _reject(refusal[0], refusal[1], None, event.event_id)
        live = self.live
        if (
            self.config.turn_detection is None
            and live.item_id is not None
            and live.last is not None
            and live.last_pause
            and live.last_quiet
        ):
            # AMBIGUITY (docs/session-semantics.md, decision D44): a manual hold that went
            # quiet after its pause's partial takes its words: the commit's audio is that
            # partial's and appends judged quiet after it
            audio = self.buffer.pcm_until(None)
            if audio.startswith(live.last[1]) or live.last[1].startswith(audio):
                live.last_turn_audio = audio
        self.live.item_id = None
        if self.vad.state != "silence":
            # a manual commit during VAD speech (or a semantic VAD pause) commits that
            # utterance; the detector goes back to silence without an event
            self._reset_vad()
        # AMBIGUITY (docs/session-semantics.md, decision D6): the commit's own `is_speech` flag is
        # not used.
        self._commit(event.event_id, event.wants_response(self.config.auto_response))

    def _commit(
        self, client_event_id: str | None, wants_response: bool, cut_sample: int | None = None
    ) -> None:
        """Commit the input buffer (checks already passed). `cut_sample`: a VAD-ended
        utterance keeps its audio only up to there (section 5)."""
        buf = self.buffer
        self.buffer = _Buffer()
        if cut_sample is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D35): the audio after a VAD end
            # stays in the buffer as idle audio (its appends' boundaries kept), the start of
            # the next utterance; idle retention applies to it
            for start, pcm in buf.audio:
                rest = pcm[2 * max(0, cut_sample - start) :]
                if rest:
                    self.buffer.audio.append((max(start, cut_sample), rest))
                    self.buffer.appended = True
            self._trim(self.buffer)
        item_id = buf.speech_item_id or self._new_item_id()
        version = self._new_version(item_id)
        seq = self._next_seq()
        frames = list(buf.frames)
        if not buf.has_speech and not frames:
            # quiet commit (B6): its bytes are released
            item = _Item(
                item_id, version, "user", "completed", [ContentPart(type="input_audio")], seq
            )
            prev = self._add_item(item)
            self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
            self._emit(
                InputAudioBufferCommitted(
                    item_id=item_id, client_event_id=client_event_id, no_response=True
                )
            )
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
            self._emit(ResponseListen(reason="silence_or_noise"))
            return
        # audio without speech is never used: released at once (not held by the commit)
        audio = buf.pcm_until(cut_sample) if buf.has_speech else b""
        speech = bool(audio)
        content: list[ContentPart] = []
        if speech:
            content.append(ContentPart(type="input_audio", transcript=None))
        content.extend(ContentPart(type="input_image") for _ in frames)
        # a commit that needs no ASR (no speech, or the camera profile) is done at once
        asr = speech and self.profile == "speech"
        item = _Item(
            item_id,
            version,
            "user",
            "in_progress" if asr else "completed",
            content,
            seq,
            awaiting_index=0 if asr else None,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        self._emit(
            InputAudioBufferCommitted(
                item_id=item_id, previous_item_id=prev, client_event_id=client_event_id
            )
        )
        if not asr:
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
        self._tick(item)
        segment = _Segment(
            item_id=item_id,
            version=version,
            seq=seq,
            speech=speech,
            audio=audio,
            content_index=0,
            frames=frames,
            texts=[None] if speech else [],
            audio_held=len(audio),
            frames_held=sum(map(len, frames)),
        )
        if not wants_response:
            self.retained.append(segment)
        elif self.active is not None:
            self.deferred.append(segment)
        else:
            self._start_response([segment])

    # --- items (section 2.4) -----------------------------------------------------------

    def _on_item_create(self, event: ConversationItemCreate) -> None:
        eid = event.event_id
        wire = event.item
        if wire.type in ("function_call", "function_call_output"):
            self.calls.on_create(event)  # section 3.8
            return
        if wire.type != "message":
            raise _reject(ErrorCode.BAD_EVENT, "only message items are supported", "item.type", eid)
        if wire.role not in ("user", "assistant", "system"):
            raise _reject(ErrorCode.BAD_EVENT, "unknown role", "item.role", eid)
        if wire.id is not None and wire.id in self.items:
            raise _reject(ErrorCode.BAD_EVENT, "an item with this id exists", "item.id", eid)
        if len(wire.content) > self.limits.max_content_parts:
            raise _reject(ErrorCode.BAD_EVENT, "too many content parts", "item.content", eid)
        user = wire.role == "user"
        texts: list[str | None] = []
        frames: list[bytes] = []
        audio = b""
        audio_index: int | None = None
        content: list[ContentPart] = []
        for i, part in enumerate(wire.content):
            where = f"item.content[{i}]"
            if part.type in ("input_text", "text", "output_text"):
                if part.text is None:
                    # AMBIGUITY (docs/session-semantics.md, decision D7): "needs `text`" names no
                    # code; bad_event at the missing field
                    raise _reject(
                        ErrorCode.BAD_EVENT, "a text part needs text", f"{where}.text", eid
                    )
                texts.append(part.text)
                content.append(ContentPart(type=part.type, text=part.text))
            elif part.type in ("input_audio", "audio", "output_audio"):
                data = part.audio or b""
                if len(data) % 2:
                    raise _reject(
                        ErrorCode.BAD_AUDIO, "audio must be 16 kHz pcm16", f"{where}.audio", eid
                    )
                if part.transcript is not None:
                    texts.append(part.transcript)
                elif data:
                    # AMBIGUITY (docs/session-semantics.md, decision D8): "at most one audio part
                    # may lack a transcript" counts audio parts that carry audio; the param is the
                    # second such part's `transcript`.
                    if audio_index is not None:
                        raise _reject(
                            ErrorCode.BAD_EVENT,
                            "at most one audio part may lack a transcript",
                            f"{where}.transcript",
                            eid,
                        )
                    audio, audio_index = data, i
                    texts.append(None)
                content.append(ContentPart(type=part.type, transcript=part.transcript))
            elif part.type == "input_image" and user:
                image = _data_url_image(part.image_url)
                if image is None:
                    raise _reject(
                        ErrorCode.INVALID_IMAGE,
                        "image_url must be a JPEG or PNG data URL",
                        f"{where}.image_url",
                        eid,
                    )
                frames.append(image)
                content.append(ContentPart(type="input_image"))
            else:
                raise _reject(ErrorCode.BAD_EVENT, "unsupported content part", f"{where}.type", eid)
        held_audio = len(audio) if user else 0
        held_frames = sum(map(len, frames))
        if user and self.pending_bytes() + held_audio + held_frames > (
            self.limits.max_pending_input_bytes
        ):
            raise _reject(ErrorCode.INPUT_BACKPRESSURE, "pending input is full", None, eid)

        item_id = wire.id if wire.id is not None else self._new_item_id()
        version = self._new_version(item_id)
        seq = self._next_seq()
        # a user item with untranscribed audio awaits its ASR in the `speech` profile
        awaiting = user and audio_index is not None and self.profile == "speech"
        item = _Item(
            item_id,
            version,
            wire.role,
            "in_progress" if awaiting else "completed",
            content,
            seq,
            awaiting_index=audio_index if awaiting else None,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        if not awaiting:
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
        if user:
            self._tick(item)
            self.unanswered.append(
                _Segment(
                    item_id=item_id,
                    version=version,
                    seq=seq,
                    speech=audio_index is not None,
                    audio=audio,
                    content_index=audio_index or 0,
                    frames=frames,
                    texts=texts,
                    audio_held=held_audio,
                    frames_held=held_frames,
                )
            )

    def _on_item_delete(self, event: ConversationItemDelete) -> None:
        item = self.items.get(event.item_id)
        if item is None:
            raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", event.event_id)
        self._delete_item(item)

    def _delete_item(self, item: _Item) -> None:
        del self.items[item.id]
        self.calls.forget(item)
        self.kept_frames = [k for k in self.kept_frames if (k[0], k[1]) != (item.id, item.version)]

        def keep(s: _Segment) -> bool:
            return not (s.item_id == item.id and s.version == item.version)

        # AMBIGUITY (docs/session-semantics.md, decision D9): "the item leaves history and queues":
        # a deleted item's queued commit (retained/deferred) or unanswered item is dropped and its
        # bytes are released at once.
        self.retained = [s for s in self.retained if keep(s)]
        self.deferred = [s for s in self.deferred if keep(s)]
        self.unanswered = [s for s in self.unanswered if keep(s)]
        self._emit(ConversationItemDeleted(item_id=item.id))

    def _on_truncate(self, event: ConversationItemTruncate) -> None:
        eid = event.event_id
        item = self.items.get(event.item_id)
        if item is None:
            raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", eid)
        resp = self.responses.get(item.response_id) if item.response_id else None
        if (
            item.role != "assistant"
            or item.call is not None  # a function call has no audio (3.8)
            or item.status != "completed"
            or resp is None
            or not resp.audio_started
        ):
            raise _reject(
                ErrorCode.INVALID_TRUNCATE,
                "not a completed assistant audio item",
                "audio_end_ms",
                eid,
            )
        if event.audio_end_ms > resp.generated_ms:
            raise _reject(
                ErrorCode.INVALID_TRUNCATE, "beyond the generated audio", "audio_end_ms", eid
            )
        cap = float(event.audio_end_ms)
        resp.truncated_ms = cap if resp.truncated_ms is None else min(resp.truncated_ms, cap)
        item.content = [ContentPart(type="output_audio", transcript=self._assistant_text(resp))]
        self._emit(
            ConversationItemTruncated(
                item_id=item.id, content_index=event.content_index, audio_end_ms=event.audio_end_ms
            )
        )

    # --- responses (section 3) ---------------------------------------------------------

    def _on_response_create(self, event: ResponseCreate) -> None:
        eid = event.event_id
        if self.active is not None:
            raise _reject(ErrorCode.RESPONSE_ALREADY_ACTIVE, "a response is active", None, eid)
        queued = self.retained + self.deferred + self.unanswered
        if not queued:
            if not self.buffer.frames or self.buffer.state != "idle":
                raise _reject(
                    ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT, "nothing to answer", None, eid
                )
            # AMBIGUITY (docs/session-semantics.md, decision D10): "that frame becomes a camera
            # commit" is read as a commit of the whole idle input buffer (a capturing buffer with a
            # frame is refused: "a frame in the idle buffer"); its `committed` carries no client
            # event id (there is no commit event).
            self._commit(None, True)
            return
        # AMBIGUITY (docs/session-semantics.md, decision D11): `response.output_modalities` of the
        # event is not in the document; only the session's output_modalities are used.
        self._start_response([])

    def _start_response(self, extra: list[_Segment]) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D12): every response consumes ALL queued
        # input: retained and deferred commits and unanswered created items, oldest first.
        segments = sorted(
            self.retained + self.deferred + self.unanswered + extra, key=lambda s: s.seq
        )
        self.retained, self.deferred, self.unanswered = [], [], []
        self._resp_n += 1
        rid = f"resp_{self._resp_n}"
        resp = _Response(
            id=rid,
            item_id=self._new_item_id(),
            epoch=self.epoch,
            segments=segments,
            audio_out="audio" in self.config.output_modalities,
        )
        self.responses[rid] = resp
        self.active = resp
        self._emit(ResponseCreated(response=Response(id=rid, status="in_progress")))
        asr = [s for s in segments if s.speech] if self.profile == "speech" else []
        if not asr:
            self._submit_vlm(resp)
            return
        for seg in asr:
            req = self._open(resp, ASR, seg)
            resp.asr_pending += 1
            self._transcribe(
                SubmitAsr(
                    request_id=req.request_id,
                    response_id=rid,
                    epoch=self.epoch,
                    item=ItemRef(seg.item_id, seg.version, seg.content_index),
                    pcm16=seg.audio,
                    language=self.config.transcription_language,
                )
            )
            seg.audio_held = 0  # released at its SubmitAsr (B8)

    def _transcribe(self, submit: SubmitAsr) -> None:
        """Section 5.2: the commit of exactly the audio (and language) the latest partial
        heard, or the commit the detector made in that partial's pause (D41), takes that
        partial's text as its transcript: now if it answered, when it answers otherwise;
        a partial that failed leaves the commit its own ASR."""
        live = self.live
        if (
            live.last is None
            or live.last[2] != submit.language
            or submit.pcm16 not in (live.last[1], live.last_turn_audio)
        ):
            self._effect(submit)
        elif not live.last_answered:
            live.waiting_asr.append((live.last[0], submit))
        elif live.last_text is None:
            self._effect(submit)
        else:
            self._later.append(AsrTranscript(submit.request_id, live.last_text))

    def _open(self, resp: _Response, stage: Stage, segment: _Segment | None = None) -> _Request:
        resp.counters[stage] += 1
        req = _Request(
            f"{resp.id}:{stage}:{resp.counters[stage]}", stage, resp.id, self.epoch, segment
        )
        resp.open[req.request_id] = req
        return req

    def _submit_vlm(self, resp: _Response) -> None:
        resp.vlm_submitted = True
        req = self._open(resp, VLM)
        parts = self._prompt_parts(resp)
        for s in resp.segments:
            # frame bytes are released at the SubmitVlm; so is audio that no ASR took
            # (the camera profile)
            s.audio_held = s.frames_held = 0
        self._effect(
            SubmitVlm(
                request_id=req.request_id,
                response_id=resp.id,
                epoch=self.epoch,
                prompt=PromptInput(
                    system=self.config.instructions or DEFAULT_INSTRUCTIONS,
                    history=parts.history,
                    transcript=parts.transcript,
                    frames=parts.frames,
                    time_s=parts.time_s,
                    history_times_s=parts.times,
                    history_frames=parts.shown,
                    asked_before=self.asked,
                ),
                max_tokens=self.config.max_output_tokens,
                tools=self.calls.offered(),
                tool_choice=self.config.tool_choice,
            )
        )
        self._keep_frames(resp.segments)
        self.asked = self.asked or parts.transcript is not None

    def _prompt_parts(self, resp: _Response, *, ticks: bool = True) -> _PromptParts:
        """History, transcript and frames of a response's prompt, as of now (3.2); with
        `ticks`, history in tick form with times and kept frames (4.1)."""
        mine = {(s.item_id, s.version) for s in resp.segments}
        history: list[HistoryTurn] = []
        times: list[float | None] = []
        shown: list[tuple[bytes, ...]] = []
        for item in self.items.values():
            if (item.id, item.version) in mine or item.status != "completed":
                continue
            if item.call is not None:  # a function call or output (3.8): no tick
                text = self.calls.text(item)
                if text:
                    history.append(HistoryTurn(item.role, text))
                    times.append(None)
                    shown.append(())
                continue
            if item.response_id in self.responses:
                text = self._assistant_text(self.responses[item.response_id])
            else:  # user and system items, and the item of a forgotten response
                text = " ".join(t for p in item.content for t in (p.text, p.transcript) if t)
            # AMBIGUITY (docs/session-semantics.md, decision D30): history is in tick form:
            # every user turn enters it, camera-only ones with an empty text, and a turn
            # answered with silence is followed by an empty assistant turn.
            if text or item.tick:
                history.append(HistoryTurn(item.role, text))
                times.append(item.time_s)
                shown.append(self._frames_of(item) if item.tick else ())
            if item.silent:
                history.append(HistoryTurn("assistant", ""))
                times.append(None)
                shown.append(())
        # AMBIGUITY (docs/session-semantics.md, decision D13): a segment whose item was deleted
        # meanwhile contributes neither text nor frames; an item's texts keep their content order,
        # its ASR transcript in the place of its audio part.
        live = [s for s in resp.segments if self._live(s.item_id, s.version) is not None]
        texts = [
            t
            for s in live
            for t in (s.transcript if x is None else x for x in s.texts)
            if t is not None and t.strip()
        ]
        frames = tuple(f for s in live for f in s.frames)
        prompt = _PromptParts(
            history=tuple(history),
            transcript=" ".join(texts) or None,
            frames=frames,
            time_s=self.items[live[-1].item_id].time_s if live else None,
            times=tuple(times),
            shown=tuple(shown),
        )
        if not ticks:  # the delegation's context: the texts only (D32)
            words = [(t, i) for t, i in zip(history, times, strict=True) if t.text]
            return replace(prompt, history=tuple(t for t, _ in words), times=(), shown=())
        return prompt

    def _cut_text(self, resp: _Response, cut: float | None) -> str:
        """The transcript of a response's audio up to `cut` ms (all when None)."""
        if cut is None:
            return resp.transcript
        out: list[str] = []
        t = 0.0
        for text, ms in resp.chunks:
            if t + ms <= cut:
                out.append(text)
            elif t < cut and ms > 0:
                out.append(text[: int(len(text) * (cut - t) / ms)])
            t += ms
        return "".join(out)

    def _assistant_text(self, resp: _Response) -> str:
        """The history text of a response: its played prefix once its playback was
        cleared (B19, recomputed from later acks), cut at its truncation point."""
        if resp.text_reply is not None:
            return resp.text_reply
        cut: float | None = resp.played_ms if resp.cleared and resp.acked else None
        if resp.truncated_ms is not None:
            cut = resp.truncated_ms if cut is None else min(cut, resp.truncated_ms)
        return self._cut_text(resp, cut)

    def _on_transcript(self, resp: _Response, req: _Request, result: AsrTranscript) -> None:
        del resp.open[req.request_id]
        resp.asr_pending -= 1
        seg = req.segment
        assert seg is not None
        item = self._live(seg.item_id, seg.version)
        if item is not None and item.awaiting_index is not None:
            seg.transcript = result.text
            item.status = "completed"
            item.awaiting_index = None
            if result.text.strip():
                item.content[seg.content_index] = ContentPart(
                    type=item.content[seg.content_index].type, transcript=result.text
                )
                self._emit(
                    InputAudioTranscriptionCompleted(
                        item_id=item.id, content_index=seg.content_index, transcript=result.text
                    )
                )
            # a blank transcript emits only the item's done
            self._emit(ConversationItemDone(item=self._wire_item(item)))
        # AMBIGUITY (docs/session-semantics.md, decision D14): a dropped transcript (deleted
        # version) still counts as an answered ASR request for the VLM hand-off.
        if resp.asr_pending == 0 and not resp.vlm_submitted:
            self._submit_vlm(resp)

    def _submit_tts(self, resp: _Response, text: str) -> None:
        req = self._open(resp, TTS)
        resp.tts_submitted += 1
        self._effect(
            SubmitTts(
                request_id=req.request_id,
                response_id=resp.id,
                epoch=self.epoch,
                seq=resp.counters[TTS],
                text=text,
                sample_rate_hz=self.config.output_format.rate_hz,
                voice=self.config.voice,
            )
        )

    def _on_vlm_delta(self, resp: _Response, result: VlmDelta) -> None:
        resp.saw_delta = True
        if not resp.audio_out:
            resp.vlm_text += result.text
            return
        done, rest = _sentences(resp.vlm_text + result.text, first=resp.tts_submitted == 0)
        resp.vlm_text = rest
        for sentence in done:
            self._submit_tts(resp, sentence)

    def _on_vlm_decision(self, resp: _Response, req: _Request, result: VlmDecisionResult) -> None:
        del resp.open[req.request_id]
        # the decision carries the whole reply: with streamed deltas only their unspoken
        # remainder is left, else the decision text is the reply. `delegate` and unknown
        # actions act like `speak`.
        rest = (resp.vlm_text if resp.saw_delta else result.text).strip()
        resp.vlm_text = ""
        self.calls.finish_all(resp)  # section 3.8: the decision makes its calls
        if result.action == "listen":
            rest = ""
        question = result.question.strip()
        if result.action == "delegate" and question and self.calls.delegate(resp, question):
            pass  # section 3.8: the session offers the delegation's function: a call
        elif result.action == "delegate" and question and self.delegation:
            # section 3.6: the question goes to the background model, the note is spoken
            parts = self._prompt_parts(resp, ticks=False)
            history, transcript = parts.history, parts.transcript
            request_id = f"{resp.id}:{DELEGATION}:1"
            self.delegations[request_id] = resp.id
            self._effect(
                SubmitDelegation(
                    request_id=request_id,
                    response_id=resp.id,
                    epoch=self.epoch,
                    question=question,
                    history=history,
                    transcript=transcript,
                )
            )
        self._decide(resp, result.action, rest)

    def _decide(self, resp: _Response, action: str, rest: str) -> None:
        """The reply text is known (3.2): speak or show the rest of it, or listen."""
        called = self.calls.made(resp)  # a response that called is no silence (3.8)
        if not resp.audio_out:
            if not rest and called:
                resp.decision = action
                self._maybe_complete(resp)
                return
            if not rest:
                self._finish_listen(resp)
                return
            resp.decision = action
            self._emit_text_reply(resp, rest)
            return
        if rest:
            self._submit_tts(resp, rest)
        if resp.tts_submitted == 0 and not called:
            self._finish_listen(resp)
            return
        # AMBIGUITY (docs/session-semantics.md, decision D15): `listen` after TTS was sent completes
        # like `speak` once the TTS finishes (status completed, no reason, no response.listen).
        resp.decision = action
        self._maybe_complete(resp)

    # --- delegation (section 3.6) ------------------------------------------------------

    def _on_delegation_result(self, result: DelegationAnswer | StageFailure) -> None:
        del self.delegations[result.request_id]
        if isinstance(result, StageFailure):
            self._server_error(
                ErrorCode.DELEGATION_FAILED,
                f"the background model did not answer: {result.message}",
            )
            return
        if not result.text.strip():
            return
        # AMBIGUITY (docs/session-semantics.md, decision D32): the answer never overlaps a
        # response: it waits for the slot, behind user input deferred meanwhile; interrupts
        # drop it.
        if self.active is None:
            self._follow_up(result.text)
        else:
            self.waiting_answers.append(result.text)

    def _follow_up(self, text: str) -> None:
        """A response the server creates for a background answer: no segments, the
        answer spoken as streamed VLM text is (3.6)."""
        self._resp_n += 1
        rid = f"resp_{self._resp_n}"
        resp = _Response(
            id=rid,
            item_id=self._new_item_id(),
            epoch=self.epoch,
            segments=[],
            audio_out="audio" in self.config.output_modalities,
        )
        self.responses[rid] = resp
        self.active = resp
        self._emit(ResponseCreated(response=Response(id=rid, status="in_progress")))
        resp.vlm_submitted = True
        self._on_vlm_delta(resp, VlmDelta(request_id="", text=text))
        rest = resp.vlm_text.strip()
        resp.vlm_text = ""
        self._decide(resp, "speak", rest)

    def _drop_delegations(self, response_id: str | None) -> None:
        """An interrupt (3.6): Abort the open questions (of the named response's note
        only, when one is named); without a name, forget the waiting answers too."""
        for request_id, note in list(self.delegations.items()):
            if response_id is None or note == response_id:
                del self.delegations[request_id]
                self._effect(Abort(request_id=request_id, stage=DELEGATION, response_id=note))
        if response_id is None:
            self.waiting_answers = []

    def _finish_listen(self, resp: _Response) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D16): a listen decision ends with
        # rate_limits.updated like every response.done.
        resp.decision = "listen"
        live = [s for s in resp.segments if self._live(s.item_id, s.version) is not None]
        if live:
            silent = self._live(live[-1].item_id, live[-1].version)
            assert silent is not None
            silent.silent = True
        self._emit(ResponseListen(response_id=resp.id, reason="listen"))
        self._emit_done(resp, "completed", "listen")
        self._end(resp)

    def _emit_text_reply(self, resp: _Response, text: str) -> None:
        """A response without audio output: the reply as an `output_text` assistant item
        with one text delta, then the text done-chain (section 3)."""
        # AMBIGUITY (docs/session-semantics.md, decision D17): "the text done-chain" is read as the
        # audio one with text events: output_text.done, content_part.done, output_item.done,
        # item.done, response.done, rate_limits.updated.
        resp.text_reply = text
        item_id = resp.item_id
        part = ContentPart(type="output_text", text="")
        item = _Item(
            item_id,
            self._new_version(item_id),
            "assistant",
            "in_progress",
            [part],
            self._next_seq(),
            response_id=resp.id,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        self._emit(ResponseOutputItemAdded(response_id=resp.id, item=self._wire_item(item)))
        self._emit(
            ResponseContentPartAdded(response_id=resp.id, item_id=item_id, part=msgspec_copy(part))
        )
        self._emit(ResponseOutputTextDelta(response_id=resp.id, item_id=item_id, delta=text))
        self._emit(ResponseOutputTextDone(response_id=resp.id, item_id=item_id, text=text))
        done_part = ContentPart(type="output_text", text=text)
        self._emit(ResponseContentPartDone(response_id=resp.id, item_id=item_id, part=done_part))
        item.status = "completed"
        item.content = [msgspec_copy(done_part)]
        self._emit(ResponseOutputItemDone(response_id=resp.id, item=self._wire_item(item)))
        self._emit(ConversationItemDone(item=self._wire_item(item)))
        self._emit_response_done(resp, "completed", None, [item_id])
        self._end(resp)

    def _on_tts_audio(self, resp: _Response, result: TtsAudio) -> None:
        item_id = resp.item_id
        if not resp.audio_started:
            resp.audio_started = True
            resp.first_audio_ms = self.now_ms
            item = _Item(
                item_id,
                self._new_version(item_id),
                "assistant",
                "in_progress",
                [ContentPart(type="output_audio", transcript="")],
                self._next_seq(),
                response_id=resp.id,
            )
            prev = self._add_item(item)
            wire = self._wire_item(item)
            self._emit(ConversationItemAdded(item=wire, previous_item_id=prev))
            self._emit(ResponseOutputItemAdded(response_id=resp.id, item=self._wire_item(item)))
            self._emit(
                ResponseContentPartAdded(
                    response_id=resp.id,
                    item_id=item_id,
                    part=ContentPart(type="output_audio", transcript=""),
                )
            )
        ms = (len(result.pcm16) // 2) * 1000.0 / self.config.output_format.rate_hz
        text = result.text
        if result.request_id != resp.last_tts and text[:1].strip() and resp.transcript[-1:].strip():
            text = " " + text  # section 3: sentences of separate requests are spaced
        resp.last_tts = result.request_id
        resp.chunks.append((text, ms))
        resp.generated_ms += ms
        self._emit(
            ResponseOutputAudioDelta(response_id=resp.id, item_id=item_id, delta=result.pcm16)
        )
        self._emit(
            ResponseOutputAudioTranscriptDelta(response_id=resp.id, item_id=item_id, delta=text)
        )

    def _maybe_complete(self, resp: _Response) -> None:
        if resp.decision is None or any(q.stage in (VLM, TTS) for q in resp.open.values()):
            return
        self._emit_done(resp, "completed", None)
        self._end(resp)

    def _emit_done(self, resp: _Response, status: str, reason: str | None) -> None:
        """The done-chain of an audio response (section 3)."""
        self.calls.cut_open(resp)  # section 3.8: cut during its arguments
        resp.status = status
        item = self._live(resp.item_id, self.versions.get(resp.item_id, 0))
        if resp.audio_started:
            # a cancelled response's transcript is cut to the played prefix (B19)
            # AMBIGUITY (docs/session-semantics.md, decision D34): cut before the client
            # reported a played position, the transcript is everything sent
            cut = status == "cancelled" and resp.acked
            transcript = self._cut_text(resp, resp.played_ms) if cut else resp.transcript
            part = ContentPart(type="output_audio", transcript=transcript)
            rid, iid = resp.id, resp.item_id
            # AMBIGUITY (docs/session-semantics.md, decision D18): "the done-chain as for
            # completion" also for a cancelled or failed response: its assistant item is completed
            # (a cancelled one with the played prefix, which is what enters history, B19).
            self._emit(ResponseOutputAudioDone(response_id=rid, item_id=iid))
            self._emit(
                ResponseOutputAudioTranscriptDone(
                    response_id=rid, item_id=iid, transcript=transcript
                )
            )
            self._emit(ResponseContentPartDone(response_id=rid, item_id=iid, part=part))
            wire = ConversationItem(
                id=resp.item_id, role="assistant", status="completed", content=[part]
            )
            if item is not None and item.response_id == resp.id:
                item.status = "completed"
                item.content = [msgspec_copy(part)]
            self._emit(ResponseOutputItemDone(response_id=resp.id, item=wire))
            # an assistant item the client deleted meanwhile is gone from the
            # conversation: the response closes its output, the conversation has no item
            if item is not None and item.response_id == resp.id:
                self._emit(ConversationItemDone(item=msgspec_copy_item(wire)))
        self._emit_response_done(resp, status, reason, [resp.item_id] if resp.audio_started else [])

    def _emit_response_done(
        self, resp: _Response, status: str, reason: str | None, output: list[str]
    ) -> None:
        resp.status = status
        details = None
        if status != "completed" or reason is not None:
            details = ResponseStatusDetails(type=status, reason=reason)
        self._emit(
            ResponseDone(
                response=Response(
                    id=resp.id,
                    status=status,
                    status_details=details,
                    output=[ConversationItem(id=i, role="assistant") for i in output],
                )
            )
        )
        self._emit(RateLimitsUpdated())
        self._effect(ResponseEnded(resp.id))

    def _fail_waiting_segments(self, resp: _Response, code: ErrorCode, message: str) -> None:
        """Items of the response's segments still awaiting a transcript: transcription
        failed, then their done (before the done-chain, I2)."""
        for seg in resp.segments:
            item = self._live(seg.item_id, seg.version)
            if item is None or item.awaiting_index is None:
                continue
            item.awaiting_index = None
            item.status = "completed"  # the audio is kept; only its transcript is missing
            self._emit(
                InputAudioTranscriptionFailed(
                    item_id=item.id,
                    content_index=seg.content_index,
                    error=ErrorDetail(
                        type=ERROR_TYPE[code].value, code=code.value, message=message
                    ),
                )
            )
            self._emit(ConversationItemDone(item=self._wire_item(item)))

    def _end(self, resp: _Response) -> None:
        """The response is over: release its input, start the deferred commits."""
        resp.open.clear()
        for s in resp.segments:
            s.audio_held = s.frames_held = 0
        self.active = None
        # AMBIGUITY (docs/session-semantics.md, decision D19): only a deferred commit starts the
        # next response; it takes every queued commit and item with it.
        if self.deferred:
            self._start_response([])
        elif self.waiting_answers:
            self._follow_up(self.waiting_answers.pop(0))

    def _clear_playback(self, responses: list[_Response]) -> None:
        for r in responses:
            r.cleared = True
            self._emit(OutputAudioBufferCleared(response_id=r.id))

    def _cancel(self, resp: _Response, reason: str, *, force_cleared: bool) -> None:
        """Cancel the active response (section 3): Aborts, cleared events (oldest first),
        failed transcripts, then the done-chain."""
        self.epoch += 1
        for req in list(resp.open.values()):
            self._effect(Abort(request_id=req.request_id, stage=req.stage, response_id=resp.id))
        resp.open.clear()
        clear = self.playing_responses()
        if resp.audio_started or force_cleared:
            clear.append(resp)
        self._clear_playback(clear)
        self._fail_waiting_segments(resp, ErrorCode.COMMIT_ABORTED, f"response {reason}")
        self._emit_done(resp, "cancelled", reason)
        self._end(resp)

    def _cleared_only(self, responses: list[_Response]) -> None:
        if self.active is None:  # the epoch fences requests: an active response's go on
            self.epoch += 1
        self._clear_playback(responses)

    def _on_cancel(self, response_id: str | None, eid: str | None, *, clear: bool) -> None:
        delegating = bool(self.delegations or self.waiting_answers)
        if response_id is None or response_id in self.responses:  # else refused below
            self._drop_delegations(response_id)
        active = self.active
        if active is not None and response_id in (None, active.id):
            self._cancel(
                active,
                "output_audio_buffer_clear" if clear else "client_cancelled",
                force_cleared=clear,
            )
            return
        playing = [
            r for r in self.playing_responses() if response_id is None or r.id == response_id
        ]
        # a named response that is not the active one but may still be playing is
        # cleared alone; the active response goes on (B11)
        if playing and (active is None or response_id is not None):
            self._cleared_only(playing)
            return
        known = response_id is not None and response_id in self.responses
        if clear:
            # AMBIGUITY (docs/session-semantics.md, decision D20): "same response_id rules as
            # cancel": an unknown named id is `response_not_active`, a known one that is neither
            # active nor playing is a no-op; only without an id does "nothing to clear" emit
            # `cleared`.
            if response_id is not None and not known:
                raise _reject(ErrorCode.RESPONSE_NOT_ACTIVE, "no such response", "response_id", eid)
            if response_id is None:
                self._emit(OutputAudioBufferCleared())
            return
        if known:
            return  # a known finished response: no-op
        if delegating and response_id is None:
            return  # it dropped the delegations (3.6)
        raise _reject(
            ErrorCode.RESPONSE_NOT_ACTIVE,
            "no active response",
            "response_id" if response_id else None,
            eid,
        )

    def _on_failure(self, resp: _Response, req: _Request, failure: StageFailure) -> None:
        del resp.open[req.request_id]
        if failure.may_have_accepted:
            self._effect(Abort(request_id=req.request_id, stage=req.stage, response_id=resp.id))
        if failure.engine_dead:
            self._effect(EvictReplica(stage=req.stage))
        for other in list(resp.open.values()):
            self._effect(Abort(request_id=other.request_id, stage=other.stage, response_id=resp.id))
        resp.open.clear()
        code = ErrorCode(failure.code)
        self._server_error(code, failure.message)
        self._fail_waiting_segments(resp, code, failure.message)
        # the reason is the failure's code; the epoch does not change
        self._emit_done(resp, "failed", code.value)
        self._end(resp)

    # --- playback (section 6) ----------------------------------------------------------

    def _on_ack(self, event: PlaybackAck) -> None:
        eid = event.event_id
        resp: _Response | None = None
        if event.response_id is not None:
            resp = self.responses.get(event.response_id)
        elif event.item_id is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D21): "else" = when no
            # response_id is given
            resp = next((r for r in self.responses.values() if r.item_id == event.item_id), None)
        if resp is None or not resp.audio_started:
            raise _reject(ErrorCode.PLAYBACK_ITEM_NOT_FOUND, "unknown response", "response_id", eid)
        if event.item_id is not None and event.item_id != resp.item_id:
            # AMBIGUITY (docs/session-semantics.md, decision D22): the param is `item_id`
            raise _reject(
                ErrorCode.PLAYBACK_ITEM_MISMATCH, "not this response's item", "item_id", eid
            )
        resp.played_ms = min(max(resp.played_ms, float(event.played_ms)), resp.generated_ms)
        resp.acked = True
        self._emit(
            PlaybackAcknowledged(
                response_id=resp.id, item_id=resp.item_id, played_ms=resp.played_ms
            )
        )

    # --- server VAD (section 5) --------------------------------------------------------

    def _on_vad_scores(self, scores: VadScores) -> None:
        td = self.config.turn_detection
        if td is None:
            # AMBIGUITY (docs/session-semantics.md, decision D23): scores arriving while VAD
            # is off are dropped
            return
        vad = self.vad
        frame = VAD_FRAME_MS * 16  # samples
        low = max(td.threshold - 0.15, 0.01)
        min_speech = max(td.min_speech_duration_ms, VAD_FRAME_MS)
        for p in scores.probabilities:
            vad = self.vad  # a commit or barge-in below may replace the detector
            start = vad.origin + frame * vad.frames_seen
            vad.frames_seen += 1
            if p >= td.threshold:
                self.live.last_quiet = False  # D41: speech after the latest partial's audio
            if vad.state == "silence":
                if p >= td.threshold:
                    if vad.high_run == 0:
                        vad.high_start = start
                    vad.high_run += 1
                    if vad.high_run * VAD_FRAME_MS >= min_speech:
                        begin = max(vad.high_start - td.prefix_padding_ms * 16, vad.reset_at)
                        self._speech_started(begin / 16)
                        self.live.item_id = self.buffer.speech_item_id
                        self.live.sent_words = 0
                        self.live.asked_at = start + frame
                else:
                    vad.high_run = 0
            elif p >= td.threshold:
                vad.silence_run = 0
                vad.pause_partial = None  # D41: a later pause asks its own partial
                if vad.state in ("review", "held"):
                    # section 5.1: speech again; the verdict awaited is no longer wanted
                    vad.state, vad.awaiting, vad.wait_ms, vad.deadline = "speech", None, 0, None
                    vad.held, vad.reviews = None, 0
                else:
                    self._live_ask(start + frame, pause=False)
            else:
                if vad.silence_run == 0:
                    vad.silence_start = start
                vad.silence_run += 1
                silence_ms = vad.silence_run * VAD_FRAME_MS
                policy = td.end_of_turn
                if vad.state in ("review", "held"):
                    if silence_ms >= vad.wait_ms:
                        self._turn_ended()
                        continue
                    self._live_ask(start + frame, pause=True)
                    if (
                        vad.state == "held"
                        and policy is not None
                        and vad.reviews == 1
                        and policy.first_review_ms < SEMANTIC_PAUSE_MS <= silence_ms
                        and p < low
                    ):
                        # section 5.1: an eager first review held; the model's own pause
                        # length gets a second one
                        self._pause_reviewed(start + frame)
                elif p < low and policy is not None and silence_ms >= policy.first_review_ms:
                    # section 5.2: the pause's partial (asked at its first silent frame);
                    # the verdict carries its words (section 5.1)
                    self._live_ask(start + frame, pause=True)
                    self._pause_reviewed(start + frame)
                elif p < low and policy is None and silence_ms >= td.silence_duration_ms:
                    self._turn_ended()
                else:
                    self._live_ask(start + frame, pause=True)

    # --- semantic VAD (section 5.1) ----------------------------------------------------

    def _pause_reviewed(self, scored_end: int) -> None:
        """A pause: ask for a verdict on the utterance up to the last scored frame (and
        on the words of the pause's partial, if one was asked); a held pause's second
        review keeps the wait its first one set."""
        td = self.config.turn_detection
        assert td is not None and td.end_of_turn is not None
        vad = self.vad
        self._turn_n += 1
        request_id = f"turn_{self._turn_n}"
        again = vad.state == "held"
        vad.state = "review"
        vad.awaiting = request_id
        vad.reviews += 1
        partial_id = vad.pause_partial
        vad.review_partial, vad.review_at = partial_id, self.now_ms
        if not again:
            self._set_wait(td.end_of_turn.max_wait_ms)
        pcm = self.buffer.pcm_until(scored_end)[-TURN_END_WINDOW_MS * 32 :]
        self._effect(
            SubmitTurnEnd(
                request_id=request_id,
                item_id=self.buffer.speech_item_id or "",
                pcm16=pcm,
                partial_request_id=partial_id,
            )
        )

    def _set_wait(self, wait_ms: int) -> None:
        vad = self.vad
        vad.wait_ms = wait_ms
        vad.deadline = self.now_ms + max(0, wait_ms - vad.silence_run * VAD_FRAME_MS)

    def _pause_overdue(self) -> bool:
        vad = self.vad
        if vad.state not in ("review", "held"):
            return False
        if vad.deadline is not None and self.now_ms >= vad.deadline:
            return True
        return vad.silence_run * VAD_FRAME_MS >= vad.wait_ms

    def _on_turn_end_verdict(self, verdict: TurnEndVerdict) -> None:
        td = self.config.turn_detection
        if td is None or td.end_of_turn is None or verdict.request_id != self.vad.awaiting:
            return  # stale: speech resumed, the turn ended, or the detector was reset
        live, vad = self.live, self.vad
        partial = vad.review_partial
        if (
            verdict.transcript is None
            and verdict.probability is not None
            and partial is not None
            and live.last is not None
            and live.last[0] == partial
        ):
            # section 5.1: the words of the pause go with its verdict; it waits for them
            # within its budget, counted from the review
            until = vad.review_at + self.turn_end_budget_ms
            if not live.last_answered and self.now_ms < until:
                vad.held = (verdict.request_id, verdict.probability, until)
                return
            if live.last_answered:
                verdict = replace(verdict, transcript=live.last_text, punctuated=self.punctuated)
        self._apply_verdict(verdict)

    def _apply_verdict(self, verdict: TurnEndVerdict) -> None:
        td = self.config.turn_detection
        if td is None or td.end_of_turn is None or verdict.request_id != self.vad.awaiting:
            return
        finished = (
            verdict.probability is not None
            and verdict.probability >= td.end_of_turn.threshold
            # words that cannot close a sentence hold the pause whatever the model heard
            and not (
                verdict.transcript is not None
                and trails_off(verdict.transcript, punctuated=verdict.punctuated)
            )
        )
        if finished and self.vad.silence_run * VAD_FRAME_MS >= SEMANTIC_PAUSE_MS:
            self._turn_ended()
            return
        self.vad.state = "held"
        self.vad.awaiting = None
        if finished:
            # AMBIGUITY (docs/session-semantics.md, decision D43): an eager review's
            # "finished" holds the pause until it is as long as the model's own
            wait = SEMANTIC_PAUSE_MS
        elif verdict.probability is not None:
            wait = td.end_of_turn.max_wait_ms
        else:
            # AMBIGUITY (docs/session-semantics.md, decision D33): no verdict holds the
            # pause for server VAD's silence duration
            wait = td.silence_duration_ms
        self._set_wait(wait)
        if self._pause_overdue():
            self._turn_ended()

    def _turn_ended(self) -> None:
        """Speech stops at the end of the last scored frame (sections 5 and 5.1)."""
        td = self.config.turn_detection
        assert td is not None
        vad = self.vad
        end = vad.origin + VAD_FRAME_MS * 16 * vad.frames_seen
        cut = vad.silence_start + ASR_TAIL_MS * 16
        live = self.live
        if vad.pause_partial is not None and live.last is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D41): the commit holds the
            # pause's partial's audio but for the pause's silence: the partial's words
            audio, heard = self.buffer.pcm_until(cut), live.last[1]
            if (
                live.last_pause
                and live.last_quiet
                and (audio.startswith(heard) or heard.startswith(audio))
            ):
                live.last_turn_audio = audio
        self._speech_stopped(end / 16, td.create_response, cut)

    def _speech_started(self, audio_start_ms: float) -> None:
        td = self.config.turn_detection
        assert td is not None
        self.vad.state = "speech"
        self.vad.high_run = 0
        self.vad.silence_run = 0
        item_id = self._new_item_id()
        self.buffer.speech_item_id = item_id
        self.buffer.state = "capturing"
        self.buffer.has_speech = True
        self._emit(
            InputAudioBufferSpeechStarted(audio_start_ms=int(audio_start_ms), item_id=item_id)
        )
        if td.interrupt_response:
            self._drop_delegations(None)
            if self.active is not None:
                self._cancel(self.active, "turn_detected", force_cleared=False)
            elif self.playing():
                self._cleared_only(self.playing_responses())

    # --- live transcripts (section 5.2) ----------------------------------------------

    def _live_ask(self, at: int, *, pause: bool) -> str | None:
        """Speech goes on (VAD scored up to `at`): a partial at a pause or on the cadence,
        unless one is out; a pause's partial supersedes a cadence one still out (its answer
        is dropped). Returns the request id of the partial asked, if one was."""
        live = self.live
        if pause and self.vad.pause_partial is not None:
            return None  # D41: this pause has its partial
        if not live.enabled or live.item_id is None:
            return None
        if live.in_flight is not None and (not pause or live.in_flight[2]):
            return None  # only a pause supersedes, and only a cadence partial
        if not pause and at - live.asked_at < LIVE_CADENCE_MS * 16:
            return None
        live.count += 1
        request_id = f"live:{live.count}"
        live.in_flight = (request_id, live.item_id, pause)
        live.asked_at = at
        pcm16 = self.buffer.pcm_until(at)
        language = self.config.transcription_language
        live.last, live.last_answered, live.last_text = (request_id, pcm16, language), False, None
        live.last_pause, live.last_quiet, live.last_turn_audio = pause, True, None
        if pause:
            self.vad.pause_partial = request_id
        self._effect(
            SubmitPartialAsr(
                request_id=request_id, item_id=live.item_id, pcm16=pcm16, language=language
            )
        )
        return request_id

    def _manual_live(self, speech: bool) -> None:
        """Section 5.2, B41: under manual turns each append's speech verdict plays the
        VAD's part. A hold's first speech names its item; the first quiet append after
        speech asks the pause's partial (one per quiet run), else the cadence asks one;
        all the buffered audio, one at a time, a pause superseding a cadence partial."""
        live = self.live
        if not live.enabled or self.buffer.state != "capturing":
            return
        at = self.clock_samples
        if speech:
            live.last_quiet = False  # speech after the latest partial's audio
        if live.item_id is None:
            if self.buffer.speech_item_id is None:
                self.buffer.speech_item_id = self._new_item_id()
            live.item_id, live.sent_words, live.asked_at = self.buffer.speech_item_id, 0, at
            return
        pause = not speech
        if pause and live.last is not None and live.last_pause and live.last_quiet:
            return  # this quiet run has its partial
        if live.in_flight is not None and (not pause or live.in_flight[2]):
            return  # only a pause supersedes, and only a cadence partial
        if not pause and at - live.asked_at < LIVE_CADENCE_MS * 16:
            return
        live.count += 1
        request_id = f"live:{live.count}"
        live.in_flight = (request_id, live.item_id, pause)
        live.asked_at = at
        pcm16 = self.buffer.pcm_until(None)
        language = self.config.transcription_language
        live.last, live.last_answered, live.last_text = (request_id, pcm16, language), False, None
        live.last_pause, live.last_quiet, live.last_turn_audio = pause, True, None
        self._effect(
            SubmitPartialAsr(
                request_id=request_id, item_id=live.item_id, pcm16=pcm16, language=language
            )
        )

    def _on_partial(self, result: AsrPartial) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D40): a pause's words may start
        # a preemptive response (B35); this model prepares none: what its wire shows is
        # what a session with one must show (tests/stateful/test_preemption_is_invisible.py)
        live = self.live
        if live.last is not None and live.last[0] == result.request_id:
            live.last_answered, live.last_text = True, result.text
        self._live_text(result)
        held = self.vad.held
        if held is not None and self.vad.review_partial == result.request_id:
            self.vad.held = None
            self._apply_verdict(
                TurnEndVerdict(held[0], held[1], result.text, punctuated=self.punctuated)
            )
        waiting = [submit for rid, submit in live.waiting_asr if rid == result.request_id]
        live.waiting_asr = [w for w in live.waiting_asr if w[0] != result.request_id]
        for submit in waiting:
            if result.text is not None:
                self._later.append(AsrTranscript(submit.request_id, result.text))
            elif self.active is not None and submit.request_id in self.active.open:
                self._effect(submit)  # the partial failed: transcribe after all

    def _live_text(self, result: AsrPartial) -> None:
        """Section 5.2: the words beyond those sent become a delta of the utterance."""
        live = self.live
        if live.in_flight is None or live.in_flight[0] != result.request_id:
            return
        _, item_id, _ = live.in_flight
        live.in_flight = None
        if item_id != live.item_id or result.text is None:
            return  # the utterance ended meanwhile, or the partial failed
        words = result.text.split()
        if len(words) <= live.sent_words:
            return
        delta = " ".join(words[live.sent_words :])
        if live.sent_words:
            delta = " " + delta
        live.sent_words = len(words)
        self._emit(InputAudioTranscriptionDelta(item_id=item_id, delta=delta))

    def _speech_stopped(self, audio_end_ms: float, create_response: bool, cut: int) -> None:
        self.live.item_id = None
        self.vad.state = "silence"
        self.vad.high_run = 0
        self.vad.silence_run = 0
        self.vad.pause_partial, self.vad.reviews = None, 0
        self.vad.awaiting, self.vad.wait_ms, self.vad.deadline = None, 0, None
        # speech_started allocated the id; only a detector reset (commit, clear, update)
        # could drop it, and that also ends speech, so it is always there
        item_id = self.buffer.speech_item_id
        if item_id is None:
            # AMBIGUITY (docs/session-semantics.md, decision D24): unreachable by the rules
            # above; a fresh id
            item_id = self.buffer.speech_item_id = self._new_item_id()
        self._emit(InputAudioBufferSpeechStopped(audio_end_ms=int(audio_end_ms), item_id=item_id))
        refusal = self._commit_refusal()
        if refusal is None:
            self._commit(None, create_response, cut)
            return
        code, message = refusal
        self._server_error(code, message)
        if code == ErrorCode.INPUT_BACKPRESSURE:
            # the utterance is dropped: the buffer is cleared and its bytes released
            self.buffer = _Buffer()
            self._emit(InputAudioBufferCleared())
        # AMBIGUITY (docs/session-semantics.md, decision D25): a VAD commit of an empty buffer
        # (nothing appended since the last commit/clear) is answered with `error
        # input_audio_buffer_empty` without event id; the buffer stays as it is.


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
