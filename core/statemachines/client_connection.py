"""Client connection: socket open, handshake, ready, closed.

Spec: `spec.tables.client_connection.CLIENT_CONNECTION`.

House rules: every legal transition is a row of the spec table; this module owns no
socket; callbacks only append to the client outbox.

Theory of operation: `open` (the socket connected) sends the mode's `session.update`;
`session.updated` makes the call `ready`. An `error` answering the update (or a handshake
timeout) is a refused handshake and ends the call; once ready only a lost socket,
`session.closed` or the turn watchdog end it (`close` output). Non-fatal `error` events
never change this machine (N1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.statemachines._rulebook import build, fire
from spec.tables.client_connection import CLIENT_CONNECTION, ConnectionState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["Connection"]

_RULES = build(CLIENT_CONNECTION)


class Connection:
    __slots__ = ("outbox", "session_payload", "state", "update_event_id")

    def __init__(self, outbox: ClientOutbox, session_payload: dict[str, Any]) -> None:
        self.outbox = outbox
        self.session_payload = session_payload
        self.state = ConnectionState.CONNECTING
        self.update_event_id: str | None = None

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    # --- effects --------------------------------------------------------------------

    def send_session_update(self, event: EventData) -> None:
        self.update_event_id = self.outbox.next_event_id()
        self.outbox.send(
            {
                "type": "session.update",
                "event_id": self.update_event_id,
                "session": self.session_payload,
            }
        )

    def tear_down(self, event: EventData) -> None:
        self.outbox.emit({"kind": "close", "reason": event.kwargs["reason"]})
