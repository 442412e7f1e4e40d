"""What resuming a session takes, as the Python client keeps it (D27, B42).

`ResumeState` is what a caller holds to resume (`DuplexClient.connect(url, resume=state)`,
`clients.reconnect.resume_after_drop`): the session id, its current resume token and the
last `server_event_seq` received. `ResumeTracker` keeps it current from the typed events
the client reads, by the shared client resume link's rule
(`core.statemachines.client_resume.ResumeLink`, the browser's too): `session.created`
names the session and its token, `session.resumed` rotates the token, and an event
numbered at or below the cursor was received already and is skipped, so a replay is
applied once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.statemachines.client_outbox import ClientOutbox
from core.statemachines.client_resume import ResumeLink
from spec.events import SessionCreated, SessionResumed

if TYPE_CHECKING:
    from spec.events import ServerEventT

__all__ = ["ResumeState", "ResumeTracker"]


@dataclass(slots=True)
class ResumeState:
    """What resuming a session takes: its id, its current token, and the last event
    received (`server_event_seq`, 0 before any)."""

    session_id: str
    resume_token: str
    last_server_event_seq: int = 0


class ResumeTracker:
    """One connection's resume link, fed typed server events. `state` is None until the
    server named a resume token (a resumable session)."""

    def __init__(self) -> None:
        self.state: ResumeState | None = None
        #: the shared resume link: session id, token and cursor, and which events are new
        self._link = ResumeLink(ClientOutbox())

    def resume_from(self, state: ResumeState) -> None:
        """This connection resumes `state`'s session: start from its token and cursor."""
        self.state = ResumeState(state.session_id, state.resume_token, state.last_server_event_seq)
        link = self._link
        link.session_id, link.resume_token = state.session_id, state.resume_token
        link.last_server_event_seq = state.last_server_event_seq

    def take(self, event: ServerEventT) -> bool:
        """Note what `event` says about resuming; False if it was received before
        (numbered at or below the cursor: skip it)."""
        link = self._link
        facts: dict[str, Any] = {"server_event_seq": event.server_event_seq}
        if isinstance(event, SessionCreated):
            facts |= {
                "type": "session.created",
                "session": {"id": event.session.id},
                "resume_token": event.resume_token,
            }
        elif isinstance(event, SessionResumed):
            facts |= {"type": "session.resumed", "resume_token": event.resume_token}
        fresh = link.take(facts)
        if link.session_id is not None and link.resume_token is not None:
            state = self.state
            if state is None or state.session_id != link.session_id:
                state = self.state = ResumeState(link.session_id, link.resume_token)
            state.resume_token = link.resume_token
            state.last_server_event_seq = link.last_server_event_seq
        return fresh
