"""The oracle's delegation: a background model's answer and the follow-up it leads to
(docs/session-semantics.md section 3.6).
"""

from __future__ import annotations

from spec.effects import (
    DELEGATION,
    Abort,
)
from spec.errors import ErrorCode
from spec.events import (
    Response,
    ResponseCreated,
)
from spec.reference.records import (
    _Response,
)
from spec.reference.responses import ResponseStages
from spec.stage_results import (
    DelegationAnswer,
    StageFailure,
    VlmDelta,
)

__all__ = [
    "Delegation",
]


class Delegation(ResponseStages):
    """Delegation to a background model (section 3.6)."""

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
