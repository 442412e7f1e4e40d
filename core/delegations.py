"""`Delegations`: questions the VLM handed to the background model, until their answers
are spoken (B31; docs/session-semantics.md section 3.6, decision D32).

A `delegate` decision speaks its note in its own response and, when the server has a
background model, asks it the question (`SubmitDelegation`). The request is open here
until its answer or failure comes back; an answer that finds a response active waits
here for the slot (it never overlaps a reply). An interrupt drops every open request
(each gets its `Abort`) and every waiting answer, so a late answer is fenced: it names a
request that is no longer open. The follow-up response itself is an ordinary
`Response`, started by `core.responses.Responses`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spec.effects import DELEGATION, Abort, SubmitDelegation
from spec.error_events import error_event
from spec.errors import ErrorCode

if TYPE_CHECKING:
    from core.outbox import Outbox
    from spec.effects import PromptInput

__all__ = ["Delegations", "OpenDelegation"]


@dataclass(frozen=True, slots=True)
class OpenDelegation:
    """A question at the background model."""

    request_id: str
    response_id: str  # the response that spoke the note


class Delegations:
    __slots__ = ("enabled", "open", "waiting")

    def __init__(self, *, enabled: bool = False) -> None:
        #: whether the server has a background model; without one the question is dropped
        self.enabled = enabled
        self.open: dict[str, OpenDelegation] = {}  # request id -> request, oldest first
        self.waiting: deque[str] = deque()  # answers waiting for the active slot

    def ask(self, out: Outbox, response_id: str, question: str, prompt: PromptInput) -> None:
        """Open the one delegation of response `response_id`: the question goes to the
        background model with the conversation (`prompt`) as its context."""
        request_id = f"{response_id}:{DELEGATION}:1"
        self.open[request_id] = OpenDelegation(request_id, response_id)
        out.effect(
            SubmitDelegation(
                request_id,
                response_id,
                out.epoch,
                question,
                history=prompt.history,
                transcript=prompt.transcript,
            )
        )

    def abort(self, out: Outbox, response_id: str | None) -> None:
        """An interrupt: the open delegations (of the named response's note only, when
        one is named) are aborted and the waiting answers forgotten."""
        for delegation in self.drop(response_id):
            out.effect(Abort(delegation.request_id, DELEGATION, delegation.response_id))

    @staticmethod
    def failed(out: Outbox, message: str) -> None:
        """The background model failed: a typed error; the session and its replies go on."""
        out.emit(
            error_event(
                ErrorCode.DELEGATION_FAILED, f"the background model did not answer: {message}"
            )
        )

    def close(self, request_id: str) -> OpenDelegation | None:
        """The request answered or failed: its record, or None when it is not open
        (a late result of a dropped request: fenced)."""
        return self.open.pop(request_id, None)

    def drop(self, response_id: str | None = None) -> list[OpenDelegation]:
        """An interrupt: forget the waiting answers and the open requests (of the named
        response's note only, when one is named); returns the requests to abort."""
        gone = [d for d in self.open.values() if response_id in (None, d.response_id)]
        for delegation in gone:
            del self.open[delegation.request_id]
        if response_id is None:
            self.waiting.clear()
        return gone

    def __bool__(self) -> bool:
        return bool(self.open or self.waiting)
