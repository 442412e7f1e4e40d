"""Stage results: what the runtime feeds back into `SessionProtocol.backend_event`.

Each names the request it answers; `SessionProtocol` drops results whose request belongs
to a response that is no longer active or to an older epoch (B11 fencing).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spec.errors import ErrorCode

__all__ = [
    "AsrPartial",
    "AsrTranscript",
    "DelegationAnswer",
    "StageFailure",
    "StageResult",
    "TtsAudio",
    "TtsDone",
    "TurnEndVerdict",
    "VadScores",
    "VlmAction",
    "VlmCallDelta",
    "VlmDecisionResult",
    "VlmDelta",
]


@dataclass(frozen=True, slots=True)
class VadScores:
    """Speech probabilities of consecutive 32 ms frames of the session's audio, and each
    frame's level (RMS, dB below full scale): the turn detector starts a pause's work at
    the first frame whose level falls well below the utterance's speech (B43). No levels
    (or fewer than probabilities): the frames without one never fade."""

    probabilities: tuple[float, ...]
    levels: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnEndVerdict:
    """The end-of-turn model's answer to a `SubmitTurnEnd`: the probability that the
    speaker has finished; None when there is no verdict (the backend has no end-of-turn
    model, or it failed): the pause then ends as server VAD would end it (D33).
    `transcript`: words the end-of-turn stage heard itself, if it hears any (`punctuated`:
    they end a sentence with `.`, `?` or `!`); None: the session reads the words of the
    partial it asked for the same pause, and waits for them within the verdict's budget."""

    request_id: str
    probability: float | None
    transcript: str | None = None
    punctuated: bool = False


@dataclass(frozen=True, slots=True)
class AsrTranscript:
    request_id: str
    text: str


@dataclass(frozen=True, slots=True)
class AsrPartial:
    """The answer to a `SubmitPartialAsr` (B33); text None: it failed or was skipped."""

    request_id: str
    text: str | None


@dataclass(frozen=True, slots=True)
class VlmDelta:
    request_id: str
    text: str


@dataclass(frozen=True, slots=True)
class VlmCallDelta:
    """A piece of a function call the model is making (B38): `index` tells the calls of
    one request apart (the first delta of an index opens its call, under `name`), `delta`
    continues its JSON arguments. The request's `VlmDecisionResult` ends every call."""

    request_id: str
    index: int
    name: str
    delta: str


class VlmAction(enum.StrEnum):
    """What the model decided to do with a turn."""

    SPEAK = "speak"
    LISTEN = "listen"  # stay silent: `response.listen`, TTS skipped
    DELEGATE = "delegate"  # speak `text` (the note); `question` goes to a background model


@dataclass(frozen=True, slots=True)
class VlmDecisionResult:
    """The last VLM result of a request: `speak`, `listen` or `delegate`."""

    request_id: str
    action: VlmAction
    text: str = ""
    #: `delegate` only: the question handed to the background model (B31)
    question: str = ""


@dataclass(frozen=True, slots=True)
class TtsAudio:
    """A chunk of reply speech (pcm16 at the session's output rate)."""

    request_id: str
    pcm16: bytes
    text: str = ""


@dataclass(frozen=True, slots=True)
class DelegationAnswer:
    """The background model's answer to a delegated question (B31)."""

    request_id: str
    text: str


@dataclass(frozen=True, slots=True)
class TtsDone:
    request_id: str


@dataclass(frozen=True, slots=True)
class StageFailure:
    """A stage request failed. `may_have_accepted`: the engine may hold the request, so it
    must be aborted (B18). `engine_dead`: the engine replica died and must be evicted."""

    request_id: str
    code: ErrorCode
    message: str
    may_have_accepted: bool = False
    engine_dead: bool = False


StageResult = (
    VadScores
    | TurnEndVerdict
    | AsrTranscript
    | AsrPartial
    | VlmDelta
    | VlmCallDelta
    | VlmDecisionResult
    | TtsAudio
    | TtsDone
    | StageFailure
    | DelegationAnswer
)
