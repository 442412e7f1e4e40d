"""Client PTT hold: one push-to-talk hold, or one server-VAD commit, until it ends (B20).

Spec: `spec.tables.client_hold.CLIENT_HOLD`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or the microphone; callbacks only append to the client outbox.

Theory of operation: `press` opens a hold (`muted` when the microphone is muted). The
first audio append it uploads moves it to `recording`; later appends are a counter. On
`release` a hold that uploaded nothing ends `empty` and sends nothing, so a muted or empty
hold never commits and never arms the watchdog; a recording hold sends exactly one
`input_audio_buffer.commit` whose event id keys it among the pending commits. The server
answers that id exactly once (B15): `committed` (a reply is owed: `acknowledged`, then
`answering` once `response.created` binds it), `committed` with `no_response`, or an
`error` (`rejected`). Each answer finishes only the hold with that id, so two pending holds
can be acknowledged in either order. An answering hold ends `settled` when its response
ends or is interrupted. A server-VAD commit (no client event id) enters at
`acknowledged`. Holds never touch playback: a quiet hold made while an older reply is
still draining leaves that reply alone (B20).

Invariants: H1-H4 of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.tables.client_hold import CLIENT_HOLD, HoldState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["Hold"]

_RULES = build(CLIENT_HOLD)


class Hold:
    __slots__ = (
        "commit_event_id",
        "ended_ms",
        "hold_id",
        "item_id",
        "outbox",
        "response_id",
        "state",
        "uploaded_samples",
    )

    def __init__(self, outbox: ClientOutbox, hold_id: str) -> None:
        self.outbox = outbox
        self.hold_id = hold_id
        self.state = HoldState.NEW
        self.commit_event_id: str | None = None
        self.item_id: str | None = None
        self.response_id: str | None = None
        self.ended_ms: float | None = None  # release (PTT) or speech stop (VAD)
        self.uploaded_samples = 0

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    def snapshot(self) -> dict[str, object]:
        return {
            "hold_id": self.hold_id,
            "state": self.state.value,
            "commit_event_id": self.commit_event_id,
            "item_id": self.item_id,
            "response_id": self.response_id,
            "uploaded_samples": self.uploaded_samples,
        }

    # --- guards ---------------------------------------------------------------------

    def mic_muted(self, event: EventData) -> bool:
        return bool(event.kwargs["muted"])

    # --- effects --------------------------------------------------------------------

    def send_commit(self, event: EventData) -> None:
        self.commit_event_id = self.outbox.next_event_id()
        self.outbox.send(
            {
                "type": "input_audio_buffer.commit",
                "event_id": self.commit_event_id,
                "create_response": True,
            }
        )

    def report_rejection(self, event: EventData) -> None:
        self.outbox.emit(
            {
                "kind": "notice",
                "level": "warning",
                "code": event.kwargs["code"],
                "message": event.kwargs["message"],
                "hold_id": self.hold_id,
            }
        )
