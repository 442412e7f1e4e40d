"""Stage protocols every backend implements, their request/result records and the
`BackendError` tree (`backends.registry` loads a backend by name).

A backend is four stages behind async interfaces, and an optional fifth:

    Vad   scores 512-sample 16 kHz frames for many sessions in one batched call; one shared
          model, one `VadState` per session (the recurrent state and 64-sample context)
    Asr   committed utterance PCM (float32, 16 kHz) -> transcript
    Vlm   prompt context (`spec.effects.PromptInput`: system, history, transcript, raw
          frames) -> a streamed reply: text deltas, then exactly one decision
          (speak / listen / delegate)
    Tts   text -> streamed pcm16 chunks at the requested rate
    EndOfTurn  (optional) the end of an utterance at a pause -> the probability that the
          speaker has finished (`semantic_vad`, B32); a backend without one answers no
          verdict, and the pause ends as server VAD would end it (D33)

and, optionally, a fifth: `Delegate`, the background model a `delegate` decision hands
its question to (B31); any backend gets one when the server config has a `[delegation]`
table (`backends.registry.load_backend`), and without one delegated questions are dropped.

Stages answer with the records of `spec.stage_results` (`AsrTranscript`, `VlmDelta`,
`VlmDecisionResult`, `TtsAudio`), each naming the stage request it answers; the runtime
files them under the core's own request id (`runtime.stage_executor`). The records are
defined once, in spec, and re-exported here.

Each stage is an async context manager (load on enter, release on exit: the shared
`StageLifecycle` base) with `warmup()` and `abort(request_id)`. Every foreign exception
is translated at one boundary per backend into this tree (drawn as in httpx):

    BackendError                   code engine_error; fails only the owning response
    +-- StageFailed                a stage raised while serving one request
    +-- InvalidPromptContext       the prompt cannot be served: an undecodable frame, or
    |                              system + turn over the budget (request-local)
    +-- BackendTimeout             a stage did not answer within its deadline
    +-- BackendUnavailable         not loaded / not ready; new sessions get resource_exhausted
    |   +-- EngineDead             an engine replica died; it is evicted, its requests fail once
    +-- SubmissionFailed           submitting failed after the engine may have accepted it
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
import numpy.typing as npt

from spec.effects import HistoryTurn, PromptInput
from spec.errors import ErrorCode
from spec.function_tools import TOOL_CHOICE_AUTO, FunctionTool, ToolChoice
from spec.stage_results import (
    AsrTranscript,
    TtsAudio,
    VlmAction,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
)

log = logging.getLogger("joyduplex.backends")

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from types import TracebackType

__all__ = [
    "Asr",
    "AsrRequest",
    "AsrTranscript",
    "Backend",
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "Delegate",
    "DelegationRequest",
    "EndOfTurn",
    "EngineDead",
    "HistoryTurn",
    "InvalidImage",
    "InvalidPromptContext",
    "PromptContext",
    "PromptInput",
    "Stage",
    "StageFailed",
    "StageLifecycle",
    "SubmissionFailed",
    "Tts",
    "TtsAudio",
    "TtsRequest",
    "TurnEndRequest",
    "Vad",
    "VadState",
    "Vlm",
    "VlmAction",
    "VlmCallDelta",
    "VlmDecisionResult",
    "VlmDelta",
    "VlmRequest",
    "score_in_steps",
]

Float32Array = npt.NDArray[np.float32]

VAD_SAMPLE_RATE_HZ = 16_000
VAD_FRAME_SAMPLES = 512


# --- errors ----------------------------------------------------------------------------


class BackendError(Exception):
    """A model or infrastructure failure; fails only the response that owns the request."""

    code: ClassVar[ErrorCode] = ErrorCode.ENGINE_ERROR

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.stage = stage


class StageFailed(BackendError):
    """A stage raised while serving one request."""

    code = ErrorCode.STAGE_FAILED


class InvalidPromptContext(BackendError):
    """The prompt's content cannot be served (a frame the stage cannot decode, a turn
    over the context budget): a request-local client error. Its types are never checked
    here: the `PromptInput` was validated once, where the core built it."""

    code = ErrorCode.INVALID_PROMPT_CONTEXT


class InvalidImage(InvalidPromptContext):
    """A frame the stage will not decode: not an image, or over its pixel limit (a
    decompression bomb included). A request-local client error, like its parent."""

    code = ErrorCode.INVALID_IMAGE


class BackendTimeout(BackendError):
    """A stage did not answer within its deadline."""

    code = ErrorCode.STAGE_FAILED


class BackendUnavailable(BackendError):
    """The backend is not loaded or not ready."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class EngineDead(BackendUnavailable):
    """An engine replica died; it must be evicted and its requests failed exactly once."""


class SubmissionFailed(BackendError):
    """Submitting a request failed after the engine may have accepted it (B18)."""

    code = ErrorCode.STAGE_FAILED


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AsrRequest:
    """One committed utterance to transcribe."""

    request_id: str
    pcm: Float32Array  # mono float32 at 16 kHz
    #: the spoken language (ISO code such as "en", or a name); None: the model detects it
    language: str | None = None
    #: a live transcript of an utterance still being spoken (B33), not a committed one
    partial: bool = False


#: The prompt of one VLM turn (B3): built once by the core from validated session state
#: (`spec.effects.PromptInput`); the VLM stage owns tokenizer and budget. `PromptContext`
#: and `HistoryTurn` are the names backends and their tests use for it.
PromptContext = PromptInput


@dataclass(frozen=True, slots=True)
class VlmRequest:
    """One VLM turn."""

    request_id: str
    context: PromptContext
    #: the session's reply cap (`max_output_tokens`); None: the stage's own cap, which
    #: bounds a number given here too
    max_tokens: int | None = None
    #: the function tools the model may call (B38; empty: none) and the session's choice
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = TOOL_CHOICE_AUTO


@dataclass(frozen=True, slots=True)
class DelegationRequest:
    """A question the VLM delegated, for the background model (B31)."""

    request_id: str
    question: str
    #: the conversation so far as text, oldest first
    history: tuple[HistoryTurn, ...] = ()
    #: the user's words that led to the delegation
    transcript: str | None = None


@dataclass(frozen=True, slots=True)
class TtsRequest:
    """Text to speak, at the session's output rate."""

    request_id: str
    text: str
    sample_rate_hz: int = 24_000
    voice: str | None = None


@dataclass(frozen=True, slots=True)
class TurnEndRequest:
    """The end of an utterance at a pause: has the speaker finished?"""

    request_id: str
    pcm: Float32Array  # mono float32 at 16 kHz, the utterance so far (at most its last 8 s)


@dataclass(slots=True)
class VadState:
    """Per-session VAD state, opaque to everyone but the Vad that made it."""

    data: dict[str, Any] = field(default_factory=dict)


# --- stage protocols -------------------------------------------------------------------


@runtime_checkable
class Stage(Protocol):
    """What every stage offers: load/release as an async context manager, warm-up, abort."""

    name: str

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def warmup(self) -> None: ...

    async def abort(self, request_id: str) -> None: ...


class StageLifecycle:
    """The load/release lifecycle every stage shares, as an async context manager.

    Entering the stage awaits `load()` and returns the stage; leaving it awaits
    `release()`, however the block ended (the exception is not suppressed). Stages
    override the two hooks; both default to nothing.
    """

    async def load(self) -> None:
        """Load models or start engines: what entering the stage does."""

    async def release(self) -> None:
        """Drop what `load` acquired: what leaving the stage does."""

    async def __aenter__(self) -> Self:
        await self.load()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()


class Vad(Stage, Protocol):
    """Speech probability per 512-sample 16 kHz frame; batched over sessions."""

    def new_state(self) -> VadState: ...

    async def score(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        """Score `frames[i]` (shape [n, 512]) with `states[i]`; returns n probabilities."""
        ...

    async def score_sequences(
        self, states: Sequence[VadState], sequences: Sequence[Float32Array]
    ) -> list[Float32Array]:
        """Score `sequences[i]` (shape [k_i, 512], in time order) with `states[i]`; one
        array of k_i probabilities per state. The model is recurrent, so step j scores
        frame j of every sequence that has one; all steps in one call (one thread hop)."""
        ...


def score_in_steps(
    score: Callable[[Sequence[VadState], Float32Array], Float32Array],
    states: Sequence[VadState],
    sequences: Sequence[Float32Array],
) -> list[Float32Array]:
    """`Vad.score_sequences` over a synchronous batch `score`: one call per time step."""
    if len(states) != len(sequences):
        raise StageFailed(
            f"vad: {len(sequences)} frame sequences for {len(states)} states", stage="vad"
        )
    out = [np.empty(len(sequence), dtype=np.float32) for sequence in sequences]
    for step in range(max((len(sequence) for sequence in sequences), default=0)):
        live = [i for i, sequence in enumerate(sequences) if len(sequence) > step]
        frames = np.stack([sequences[i][step] for i in live])
        for i, probability in zip(live, score([states[i] for i in live], frames), strict=True):
            out[i][step] = probability
    return out


class Asr(Stage, Protocol):
    """Speech to text. Its capabilities reach each session as constructor arguments
    (`runtime.host`), never looked up with `getattr`."""

    @property
    def live_transcripts(self) -> bool:
        """It transcribes a growing utterance cheaply too: the session asks for live
        partials (B33)."""
        ...

    @property
    def punctuates(self) -> bool:
        """It ends what it hears as a sentence with `.`, `?` or `!` and leaves a phrase
        it hears cut off unpunctuated: a cue `semantic_vad` reads at a pause (B32)."""
        ...

    @property
    def languages(self) -> tuple[str, ...] | None:
        """The languages it transcribes, as lower-case ISO 639 codes (`("en",)` for an
        English-only model), known once it is loaded: `session.created` names them and
        `session.update` refuses to pin any other. None: it is multilingual and detects
        the language of each utterance. Never empty."""
        ...

    async def transcribe(self, request: AsrRequest) -> AsrTranscript: ...


class Vlm(Stage, Protocol):
    @property
    def prepares_frames(self) -> bool:
        """Work on a frame pays off when it arrives, before its turn (the transformers
        runtime encodes it): the session hands each accepted frame to `prepare_frame`."""
        ...

    async def prepare_frame(self, frame: bytes) -> None:
        """Best effort, never raising: a frame the stage could not prepare (busy, not
        decodable) is handled at its turn as if never prepared."""
        ...

    @property
    def function_calling(self) -> bool:
        """Whether its model chooses function tools (B37, `session.created`'s
        capabilities): a stage that cannot accepts a session's tools and never calls one."""
        ...

    def generate(
        self, request: VlmRequest
    ) -> AsyncIterator[VlmDelta | VlmCallDelta | VlmDecisionResult]:
        """The reply's text deltas and function call pieces (`VlmCallDelta`, only of
        `request.tools`), then its one decision."""
        ...


class Tts(Stage, Protocol):
    output_sample_rate_hz: int

    @property
    def voices(self) -> frozenset[str] | None:
        """The voices it can speak with, known once it is loaded: `session.update` refuses
        any other; None: it accepts any name."""
        ...

    def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsAudio]: ...


class Delegate(Stage, Protocol):
    """The background model: answers one delegated question with text to speak."""

    async def answer(self, request: DelegationRequest) -> str: ...


class EndOfTurn(Stage, Protocol):
    """Whether a speaker has finished their turn, from the sound of its end (B32)."""

    async def predict(self, request: TurnEndRequest) -> float:
        """The probability, in [0, 1], that the utterance is a finished turn."""
        ...


@dataclass(slots=True)
class Backend:
    """The stages of one backend, entered and warmed up together."""

    name: str
    vad: Vad | None
    asr: Asr | None
    vlm: Vlm
    tts: Tts
    description: str = ""
    ready: bool = False
    #: stages whose engine died -> why (B18): the backend serves no new session
    dead: dict[str, str] = field(default_factory=dict)
    #: the background model for delegated questions (B31); None: they are dropped. It
    #: never takes the backend out of service: a failure fails only that answer
    delegate: Delegate | None = None

    #: the end-of-turn model of `semantic_vad` (B32); None: the backend has none (D33)
    turn_end: EndOfTurn | None = None

    def stages(self) -> list[Stage]:
        stages = (self.vad, self.asr, self.vlm, self.tts, self.delegate, self.turn_end)
        return [s for s in stages if s is not None]

    async def __aenter__(self) -> Self:
        entered: list[Stage] = []
        try:
            for stage in self.stages():
                await stage.__aenter__()
                entered.append(stage)
        except BaseException:
            for stage in reversed(entered):
                await stage.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.ready = False
        for stage in reversed(self.stages()):
            await stage.__aexit__(exc_type, exc, tb)

    async def warmup(self) -> None:
        for stage in self.stages():
            await stage.warmup()
        self.ready = True

    def evict(self, stage: str, reason: str = "its engine died") -> None:
        """A stage's engine died (B18): record it once; readiness fails from now on, so
        `/readyz` reports it and new sessions get `resource_exhausted`."""
        if stage in self.dead:
            return
        self.dead[stage] = reason
        log.error("backend %s: stage %s is out of service: %s", self.name, stage, reason)

    def restore(self, stage: str) -> None:
        """A stage out of service can serve again (a remote stage's replica is healthy
        again): readiness returns once no stage is left in `dead`."""
        if self.dead.pop(stage, None) is not None:
            log.info("backend %s: stage %s is back in service", self.name, stage)
