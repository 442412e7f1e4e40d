"""Effects: what `SessionProtocol` asks the runtime to do, as plain records.

The runtime executes them against a backend and feeds the results back as
`spec.stage_results` records. Every stage request carries its request id, the response
it belongs to and the epoch it was issued in, so late results can be fenced (B11).
"""

from __future__ import annotations

from dataclasses import dataclass

from spec.errors import CloseCode

__all__ = [
    "ASR",
    "TTS",
    "VLM",
    "Abort",
    "CloseSession",
    "Effect",
    "EvictReplica",
    "ItemRef",
    "PromptInput",
    "ScoreVad",
    "Stage",
    "SubmitAsr",
    "SubmitTts",
    "SubmitVlm",
]

#: stage names, as used in request ids (`resp_1:asr:1`)
Stage = str
ASR: Stage = "asr"
VLM: Stage = "vlm"
TTS: Stage = "tts"


@dataclass(frozen=True, slots=True)
class ItemRef:
    """The exact audio part a transcript belongs to (B4, B5)."""

    item_id: str
    version: int
    content_index: int = 0


@dataclass(frozen=True, slots=True)
class PromptInput:
    """What the VLM stage builds its prompt from (B3); frames stay raw bytes (B2)."""

    system: str
    history: tuple[tuple[str, str], ...]  # (role, text), oldest first
    transcript: str | None
    frames: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class SubmitAsr:
    """Transcribe one committed speech segment (pcm16, 16 kHz mono)."""

    request_id: str
    response_id: str
    epoch: int
    item: ItemRef
    pcm16: bytes


@dataclass(frozen=True, slots=True)
class SubmitVlm:
    """Run the vision-language model for one response."""

    request_id: str
    response_id: str
    epoch: int
    prompt: PromptInput


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
class CloseSession:
    """Close the connection after sending what is queued."""

    reason: str
    code: CloseCode = CloseCode.NORMAL


Effect = SubmitAsr | SubmitVlm | SubmitTts | Abort | EvictReplica | ScoreVad | CloseSession
