"""`Resumption`: what makes a session resumable (B27, docs/session-semantics.md D27,
D28): its attachment to a connection and its journal of numbered events.

It owns the `Attachment` (the current resume token and generation: attached, detached,
expired, closed) and the `ResumeJournal` (every server event of the session, numbered
`server_event_seq` and kept for replay within its byte and age bounds). `SessionProtocol`
stamps each server event through `stamp` before handing it out: its sequence number, and
on `session.created` the token and generation, so the runtime sends events as they are.

A connection that resumes gets `resumed()`: `session.resumed` (the new token, where the
replay starts, the last sequence number), then the journaled events its client missed, or
`session.resync_required` when they are gone. The connection a resume took the session
from gets `replaced()`. Tokens come from the caller (`new_token`): this module draws no
randomness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from core.journal import ReplayImpossible, ResumeJournal
from core.statemachines.attachment import Attachment
from spec.events import (
    ServerEvent,
    SessionCreated,
    SessionReplaced,
    SessionResumed,
    SessionResyncRequired,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Resumption"]

#: an event's size in the journal is its wire length (plain msgspec JSON, the codec's)
_ENCODE = msgspec.json.Encoder().encode


class Resumption:
    __slots__ = ("_new_token", "attachment", "journal", "session_id")

    def __init__(
        self,
        session_id: str,
        *,
        new_token: Callable[[], str],
        max_bytes: int,
        max_age_ms: int,
    ) -> None:
        self.session_id = session_id
        self._new_token = new_token
        self.attachment = Attachment(session_id, new_token())
        self.journal: ResumeJournal[ServerEvent] = ResumeJournal(
            max_bytes=max_bytes, max_age_ms=max_age_ms
        )

    @property
    def attached(self) -> bool:
        return self.attachment.attached

    def stamp(self, event: ServerEvent, now_ms: int) -> None:
        """Number the event and keep it for replay."""
        if isinstance(event, SessionCreated):
            event.resume_token = self.attachment.token
            event.attachment_generation = self.attachment.generation
        event.server_event_seq = self.journal.last_seq + 1
        self.journal.append(event, len(_ENCODE(event)), now_ms)

    def ack(self, seq: int) -> None:
        """`session.event_ack`: the client has every event up to `seq`."""
        self.journal.ack(seq)

    def reattach(self, token: str) -> bool:
        """A resume with `token`: the session goes to the new connection under a new
        token; True when it was still attached to another one (that one is replaced).

        Raises:
            InvalidResumeToken: not the current token; nothing changed.
        """
        return self.attachment.reattach(token, self._new_token())

    def resumed(self, after: int, now_ms: int, event_id: Callable[[], str]) -> list[ServerEvent]:
        """What a resumed connection is sent before the live events: `session.resumed`,
        then the journaled events above `after` (or `session.resync_required`)."""
        attachment, journal = self.attachment, self.journal
        first: list[ServerEvent] = [
            SessionResumed(
                event_id=event_id(),
                session_id=self.session_id,
                resume_token=attachment.token,
                attachment_generation=attachment.generation,
                replay_from_seq=after + 1,
                last_server_event_seq=journal.last_seq,
            )
        ]
        try:
            return first + [entry.payload for entry in journal.replay_after(after, now_ms)]
        except ReplayImpossible as exc:
            first.append(
                SessionResyncRequired(
                    event_id=event_id(),
                    session_id=self.session_id,
                    reason=exc.reason,
                    last_server_event_seq=journal.last_seq,
                )
            )
            return first

    def replaced(self, event_id: Callable[[], str]) -> SessionReplaced:
        """The event for the connection a resume took the session from."""
        return SessionReplaced(
            event_id=event_id(),
            session_id=self.session_id,
            attachment_generation=self.attachment.generation,
        )

    def detach(self) -> None:
        self.attachment.detach()

    def expire(self) -> None:
        self.attachment.expire()

    def close(self) -> None:
        self.attachment.close()
