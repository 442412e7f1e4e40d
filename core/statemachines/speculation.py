"""Speculation: one preemptive response, prepared before its turn has ended (B35).

Spec: `spec.tables.speculation.SPECULATION`. Diagram: `docs/statemachines/speculation.md`.

What it owns: the prompt it was built on, its stage requests (one VLM request, then one
TTS request per piece of the reply, cut by the server's one sentence grammar exactly as a
response cuts it) and every result they returned, held in arrival order. While it is
PREPARING nothing it does reaches the wire (P2): it only emits stage effects.

`adopt` hands the held results over (the response applies them as if they arrived then);
`discard` aborts every request still open (P3) and drops what it held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.effects import TTS, VLM, Abort, SubmitTts, SubmitVlm
from spec.sentences import reply_rest, take_pieces
from spec.stage_results import (
    StageFailure,
    TtsAudio,
    TtsDone,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
)
from spec.tables import SPECULATION, SpeculationState

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from spec.effects import PromptInput

__all__ = ["HeldResult", "ReplyTerms", "Speculation"]

_RULES = build(SPECULATION)


@dataclass(frozen=True, slots=True)
class ReplyTerms:
    """What a reply depends on besides its prompt: whether it is spoken, its audio rate
    and voice, its token cap. A response adopts only a speculation of the same terms."""

    audio: bool
    sample_rate_hz: int
    voice: str | None
    max_tokens: int | None


HeldResult = VlmDelta | VlmDecisionResult | TtsAudio | TtsDone

#: what `pcm16` a held TTS chunk may weigh before more are refused: the bound of one
#: reply's audio the session would have sent anyway (bytes of 24 kHz pcm16, 60 s)
MAX_HELD_AUDIO_BYTES = 60 * 24_000 * 2


class Speculation:
    __slots__ = (
        "held",
        "held_bytes",
        "id",
        "item_id",
        "open_requests",
        "outbox",
        "pending_text",
        "prompt",
        "state",
        "terms",
        "tts_requests",
        "vlm_request",
    )

    def __init__(
        self,
        outbox: Outbox,
        speculation_id: str,
        *,
        item_id: str,
        prompt: PromptInput,
        terms: ReplyTerms,
    ) -> None:
        self.outbox = outbox
        self.id = speculation_id
        self.item_id = item_id  # the utterance whose pause it was built on
        self.prompt = prompt
        self.terms = terms
        self.state = SpeculationState.PREPARING
        self.held: list[HeldResult] = []
        self.held_bytes = 0
        self.pending_text = ""
        self.vlm_request = f"{speculation_id}:{VLM}:1"
        self.tts_requests: list[tuple[str, str]] = []  # (request id, text), in seq order
        self.open_requests: dict[str, str] = {self.vlm_request: VLM}

    def submit(self) -> None:
        """Ask the VLM (once, when it starts)."""
        self.outbox.effect(
            SubmitVlm(
                self.vlm_request,
                self.id,
                self.outbox.epoch,
                self.prompt,
                max_tokens=self.terms.max_tokens,
            )
        )

    def owns(self, request_id: str) -> bool:
        return request_id in self.open_requests

    def hold(self, result: HeldResult | StageFailure) -> bool:
        """Keep a result of one of its requests (and cut the reply's next pieces for TTS);
        False when it cannot go on (a stage failed, or it grew past its bound): the
        caller discards it."""
        if isinstance(result, StageFailure):
            self.open_requests.pop(result.request_id, None)
            return False
        if isinstance(result, TtsAudio):
            self.held_bytes += len(result.pcm16)
            if self.held_bytes > MAX_HELD_AUDIO_BYTES:
                return False
        elif isinstance(result, TtsDone):
            self.open_requests.pop(result.request_id, None)
        elif isinstance(result, VlmDelta):
            self.pending_text += result.text
            if self.terms.audio:
                pieces, self.pending_text = take_pieces(
                    self.pending_text, first=not self.tts_requests
                )
                for piece in pieces:
                    self._speak(piece)
        else:  # the decision: the rest of the reply, as `Response.decide` reads it
            self.open_requests.pop(result.request_id, None)
            streamed = any(isinstance(r, VlmDelta) for r in self.held)
            rest = reply_rest(self.pending_text, result.text, streamed=streamed)
            self.pending_text = ""
            if self.terms.audio and result.action != VlmAction.LISTEN and rest:
                self._speak(rest)
        self.held.append(result)
        return True

    def _speak(self, text: str) -> None:
        seq = len(self.tts_requests) + 1
        request_id = f"{self.id}:{TTS}:{seq}"
        self.tts_requests.append((request_id, text))
        self.open_requests[request_id] = TTS
        self.outbox.effect(
            SubmitTts(
                request_id,
                self.id,
                self.outbox.epoch,
                seq,
                text,
                self.terms.sample_rate_hz,
                self.terms.voice,
            )
        )

    # --- verbs ----------------------------------------------------------------------

    def adopt(self) -> list[HeldResult]:
        """The response takes it over: the held results, in arrival order."""
        fire(_RULES, self, "adopt")
        held, self.held, self.held_bytes = self.held, [], 0
        return held

    def discard(self) -> None:
        fire(_RULES, self, "discard")
        self.held, self.held_bytes, self.tts_requests = [], 0, []

    # --- effects --------------------------------------------------------------------

    def abort_requests(self, event: EventData) -> None:
        for request_id, stage in self.open_requests.items():
            self.outbox.effect(Abort(request_id, stage, self.id))
        self.open_requests.clear()
