"""`Preemption`: a session's preemptive response, at most one at a time (B35, D40).

What it owns: the one `Speculation` that may be preparing (P1), where its stage results
go, and the decision to adopt or discard it.

- **Start**: when a pause's live transcript (B33) has words and the session could answer
  now (no response active or waiting, the turn would create one, the session's
  `preemptive_response` is on), the session builds the prompt its response would get if
  the turn ended in this pause, and a speculation runs it. A new one replaces one still
  preparing.
- **Hold**: results of its requests are kept, never applied (P2); a failure of one of
  them, or more held audio than one reply may carry, discards it.
- **Adopt**: the response of that utterance's commit takes it when its prompt is the
  speculation's, but for the turn's time marker (the pause's time is the turn's time
  then, D40); everything else about the prompt, words, frames and history, must be equal.
- **Discard**: speech goes on, another prompt, a clear, a cancel or barge-in, an
  utterance that ends without a response, the session's close: silently, with its
  requests aborted (P3).

Every start and end is also an effect (`SpeculationOutcome`), which the runtime counts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from core.statemachines.speculation import HeldResult, ReplyTerms, Speculation
from spec.effects import SpeculationOutcome
from spec.stage_results import StageFailure, TtsAudio, TtsDone, VlmDecisionResult, VlmDelta

if TYPE_CHECKING:
    from core.outbox import Outbox
    from spec.effects import PromptInput
    from spec.stage_results import StageResult

__all__ = ["Preemption"]

_HELD_TYPES = (VlmDelta, VlmDecisionResult, TtsAudio, TtsDone, StageFailure)


class Preemption:
    __slots__ = ("_out", "current")

    def __init__(self, outbox: Outbox) -> None:
        self._out = outbox
        self.current: Speculation | None = None  # the one preparing, if any

    @property
    def preparing(self) -> bool:
        return self.current is not None

    def start(self, item_id: str, prompt: PromptInput, terms: ReplyTerms) -> None:
        """Prepare the reply to `prompt` for the utterance `item_id`."""
        self.discard()
        speculation_id = self._out.next_id("spec")
        self._out.effect(SpeculationOutcome(speculation_id, "started"))
        self.current = Speculation(
            self._out, speculation_id, item_id=item_id, prompt=prompt, terms=terms
        )
        self.current.submit()

    def hold(self, result: StageResult) -> bool:
        """Whether `result` belongs to the speculation preparing (then it is held)."""
        current = self.current
        if current is None or not isinstance(result, _HELD_TYPES):
            return False
        if not current.owns(result.request_id):
            return False
        if not current.hold(result):
            self.discard()
        return True

    def take(
        self, item_id: str | None, prompt: PromptInput, terms: ReplyTerms
    ) -> tuple[Speculation, list[HeldResult]] | None:
        """The speculation, adopted, and its held results, when it was built for the
        utterance `item_id` on `prompt` (time marker aside) with the same `terms`; else
        it is discarded."""
        current = self.current
        if current is None:
            return None
        same = item_id == current.item_id and terms == current.terms
        if not same or not _same_turn(current.prompt, prompt):
            self.discard()
            return None
        self.current = None
        held = current.adopt()
        self._out.effect(SpeculationOutcome(current.id, "adopted"))
        return current, held

    def discard(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.discard()
            self._out.effect(SpeculationOutcome(current.id, "discarded"))


def _same_turn(built: PromptInput, now: PromptInput) -> bool:
    """The prompts are the same turn: equal but for the turn's own time marker."""
    return dataclasses.replace(now, time_s=built.time_s) == built
