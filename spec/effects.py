"""Effects: what `SessionProtocol` asks the runtime to do, as plain records.

The runtime executes them against a backend and feeds the results back as
`spec.stage_results` records. Every stage request carries its request id, the response
it belongs to and the epoch it was issued in, so late results can be fenced (B11).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias

from spec.errors import CloseCode
from spec.function_tools import TOOL_CHOICE_AUTO, FunctionTool, ToolChoice

__all__ = [
    "ASR",
    "DELEGATION",
    "LIVE_CADENCE_MS",
    "TTS",
    "TURN_END",
    "TURN_END_WINDOW_MS",
    "VLM",
    "Abort",
    "CloseSession",
    "Effect",
    "EvictReplica",
    "HistoryTurn",
    "ItemRef",
    "PrepareFrame",
    "PromptInput",
    "ResponseEnded",
    "ScoreVad",
    "SpeculationOutcome",
    "Stage",
    "SubmitAsr",
    "SubmitDelegation",
    "SubmitPartialAsr",
    "SubmitTts",
    "SubmitTurnEnd",
    "SubmitVlm",
]

#: stage names, as used in request ids (`resp_1:asr:1`)
Stage = str
ASR: Stage = "asr"
VLM: Stage = "vlm"
TTS: Stage = "tts"
#: the background model a `delegate` decision hands its question to (B31)
DELEGATION: Stage = "delegation"
#: the end-of-turn model of `semantic_vad` (B32)
TURN_END: Stage = "turn_end"
#: the end-of-turn model hears at most this much of an utterance, its end (Smart Turn v3
#: takes 8 s windows)
TURN_END_WINDOW_MS = 8_000


@dataclass(frozen=True, slots=True)
class ItemRef:
    """The exact audio part a transcript belongs to (B4, B5)."""

    item_id: str
    version: int
    content_index: int = 0


class HistoryTurn(NamedTuple):
    """One earlier turn as text: a user transcript or text, an assistant reply (the heard
    prefix when it was cut, B19), or a system item. A tuple, so `("user", "hi")` equals
    `HistoryTurn("user", "hi")`.

    An empty text is a tick without words: a `user` turn with no text is a camera-only
    observation (its frames, if kept, are in `PromptInput.history_frames`); an
    `assistant` turn with no text is a tick the model answered with silence."""

    role: str  # user | assistant | system: a conversation item's role
    text: str


@dataclass(frozen=True, slots=True)
class PromptInput:
    """What the VLM stage builds its prompt from (B3); frames stay raw bytes (B2).

    The one prompt type from core to the backends (`backends.base.PromptContext` is this
    class). It is built once, by `core.prompt_input.build_prompt`, from session state whose
    client-supplied parts were validated where they entered (event decoding and
    `conversation.item.create`: a malformed one is a request-local `invalid_request_error`),
    so the runtime hands it to the VLM stage as it is and no backend re-validates it.
    """

    system: str
    history: tuple[HistoryTurn, ...] = ()  # oldest first
    transcript: str | None = None  # the spoken or typed instruction of this turn
    frames: tuple[bytes, ...] = ()  # raw JPEG/PNG, in capture order (B2: raw until here)
    #: when this turn was observed, in seconds on the session clock (None: unknown); a
    #: model trained with time markers (JoyAI's `<t seconds>`) gets one per tick
    time_s: float | None = None
    #: per history turn, the same clock (parallel to `history`; empty or None: unknown)
    history_times_s: tuple[float | None, ...] = ()
    #: per history turn, the frames it showed (parallel to `history`; empty: none kept)
    history_frames: tuple[tuple[bytes, ...], ...] = ()
    #: some earlier turn of this session carried words (a query) to the model, even one
    #: that has left `history` since; JoyAI stays silent until the first one (B30)
    asked_before: bool = False


@dataclass(frozen=True, slots=True)
class SubmitAsr:
    """Transcribe one committed speech segment (pcm16, 16 kHz mono)."""

    request_id: str
    response_id: str
    epoch: int
    item: ItemRef
    pcm16: bytes
    #: the session's transcription language (`audio.input.transcription.language`);
    #: None: the ASR model detects it
    language: str | None = None


#: live transcripts (B33, section 5.2): a pause's partial is asked on its first silent
#: frame (D41); while speech goes on, a partial at most this often (of scored audio): long, so
#: that on a small CPU a partial rarely runs when the turn ends (the final transcription
#: would wait for it); most utterances get only their pause partials
LIVE_CADENCE_MS = 3000


@dataclass(frozen=True, slots=True)
class SubmitPartialAsr:
    """Transcribe an utterance still being spoken, for its live transcript (B33): best
    effort, answered by one `AsrPartial` (text None when it failed); one at a time per
    session, except that a pause's may supersede a cadence one still out (whose answer the
    session then drops): at most two are out. `pcm16` starts where the utterance's commit
    will start, so when the turn ends at the same audio the session answers that commit's
    ASR with this result instead of a `SubmitAsr` (the same audio, model and language: the
    same transcription)."""

    request_id: str
    item_id: str  # the utterance's item id, announced by `speech_started`
    pcm16: bytes
    language: str | None = None


@dataclass(frozen=True, slots=True)
class SubmitVlm:
    """Run the vision-language model for one response."""

    request_id: str
    response_id: str
    epoch: int
    prompt: PromptInput
    #: the session's `max_output_tokens`; None (`"inf"`): the VLM backend's own cap, which
    #: also bounds a number given here
    max_tokens: int | None = None
    #: the function tools the model may call for this response (B38): none when the
    #: session declares none or its `tool_choice` is `none`
    tools: tuple[FunctionTool, ...] = ()
    #: the session's `tool_choice` (`required` / a named function: it must call one)
    tool_choice: ToolChoice = TOOL_CHOICE_AUTO


@dataclass(frozen=True, slots=True)
class SubmitTts:
    """Speak one piece of reply text; pieces of a response run in `seq` order."""

    request_id: str
    response_id: str
    epoch: int
    seq: int
    text: str
    sample_rate_hz: int
    voice: str | None = None


@dataclass(frozen=True, slots=True)
class SubmitDelegation:
    """Ask the background model a question the VLM delegated (B31). `response_id` is the
    response that spoke the note; the answer becomes a follow-up response of its own."""

    request_id: str
    response_id: str
    epoch: int
    question: str
    #: the conversation so far as text, oldest first (the background model's context)
    history: tuple[HistoryTurn, ...] = ()
    #: the user's words that led to the delegation, when there were any
    transcript: str | None = None


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop a stage request that may be running (cancellation-safe, idempotent)."""

    request_id: str
    stage: Stage
    response_id: str


@dataclass(frozen=True, slots=True)
class EvictReplica:
    """A stage engine died: evict it so no new request reaches it (B18)."""

    stage: Stage


@dataclass(frozen=True, slots=True)
class ScoreVad:
    """Score this audio (pcm16, 16 kHz) with the session's VAD state; it starts at
    `start_ms` of the session audio clock."""

    pcm16: bytes
    start_ms: int


@dataclass(frozen=True, slots=True)
class SubmitTurnEnd:
    """Ask the end-of-turn model whether the speaker has finished (`semantic_vad`, B32):
    `pcm16` is the end of the utterance so far (16 kHz, at most `TURN_END_WINDOW_MS`),
    up to the pause. Only the verdict of the latest request is applied; an older one (the
    speaker went on, the turn ended) is dropped. `partial_request_id` names the live
    partial asked for the same pause (B33), if one was: the verdict carries its text, so
    words that trail off can hold the pause (`spec.trailing_transcript`)."""

    request_id: str
    item_id: str
    pcm16: bytes
    partial_request_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareFrame:
    """A camera frame was accepted into the session: the VLM may do its share of work on
    it now, before the turn that shows it (its vision encoding). Emitted only where the
    VLM stage says it `prepares_frames`; best effort, answered by nothing: a frame not
    prepared is handled at its turn as always. `frame_id` names it in the session's
    order of arrival (`frame_1`, ...)."""

    frame_id: str
    frame: bytes


@dataclass(frozen=True, slots=True)
class CloseSession:
    """Close the connection after sending what is queued."""

    reason: str
    code: CloseCode = CloseCode.NORMAL


#: every effect, a closed union: executors dispatch with `match` and end with
#: `typing.assert_never`, so mypy reports an effect kind that one of them does not handle
@dataclass(frozen=True, slots=True)
class ResponseEnded:
    """A response is over (`response.done`, whatever its status): nothing of it is
    submitted again, so the runtime lets go of what it keeps for it (its TTS queue)."""

    response_id: str


@dataclass(frozen=True, slots=True)
class SpeculationOutcome:
    """A preemptive response (B35) `started`, was `adopted` by its turn's response, or was
    `discarded` (its requests aborted): the runtime counts them, and lets go of what it
    keeps for a discarded one (its TTS queue), counting the stage time it had spent."""

    speculation_id: str
    outcome: Literal["started", "adopted", "discarded"]


Effect: TypeAlias = (
    SubmitAsr
    | SubmitPartialAsr
    | SubmitVlm
    | SubmitTts
    | SubmitDelegation
    | Abort
    | EvictReplica
    | ScoreVad
    | SubmitTurnEnd
    | CloseSession
    | ResponseEnded
    | SpeculationOutcome
    | PrepareFrame
)
