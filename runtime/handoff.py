"""`ConnectionHandoff`: which connection a resumable session is served over (B27,
docs/session-semantics.md D27, D28).

A connection that fails, or closes with any code but 1000, detaches the session instead
of ending it: its work goes on, new events go only to its journal (`core.resume`), and the
session waits `grace_s` for `attach()` (the host's `resume`, from another connection's
task). A reattached connection gets `session.resumed`, the events its client missed, then
the live ones; a connection still attached when a resume comes is sent `session.replaced`
and closed. Without a resume in time the session ends as if its peer had gone
(`expired`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from runtime.channel import ChannelClosed
from spec.errors import CloseCode, SessionNotResumable, UnknownSession

if TYPE_CHECKING:
    from core.session import SessionProtocol
    from runtime.channel import Channel
    from runtime.clock import Clock
    from runtime.metrics import Metrics
    from spec.events import ServerEvent, SessionResume

__all__ = ["CLOSE_DEADLINE_S", "Attached", "ConnectionHandoff", "ResumePolicy"]

log = logging.getLogger("joyduplex.runtime")

#: how long closing a channel may take (a peer that stopped reading may never take it)
CLOSE_DEADLINE_S = 5.0


@dataclass(frozen=True)
class ResumePolicy:
    """How long a resumable session waits for a resume once its connection dropped
    (`spec.limits.Limits.resume_grace_s`); its journal is `core.resume`'s."""

    grace_s: float = 30.0


@dataclass
class Attached:
    """One connection of a session. `after`: a resumed connection's cursor (the last
    event its client received); `ended` is set once the session no longer uses it."""

    channel: Channel
    after: int | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)


class ConnectionHandoff:
    def __init__(
        self,
        protocol: SessionProtocol,
        policy: ResumePolicy | None,
        *,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self.protocol = protocol
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        #: a connection `attach()` handed over, not served yet
        self.next: Attached | None = None
        #: the scope of the connection served now (a resume that replaces it cancels it)
        self.serving: anyio.CancelScope | None = None
        self._reattached = anyio.Event()

    @property
    def resumable(self) -> bool:
        return self.protocol.resume is not None and self.policy is not None

    def take_next(self) -> Attached | None:
        following, self.next = self.next, None
        return following

    def attach(self, channel: Channel, event: SessionResume, *, ended: bool) -> Attached:
        """Hand the session to a new connection (`session.resume`); the caller serves the
        returned connection until its `ended` is set.

        Raises:
            SessionNotResumable: the session was not opened resumable.
            UnknownSession: it has ended.
            InvalidResumeToken: the token is not its current one.
            A refusal changes nothing.
        """
        resume, session_id = self.protocol.resume, self.protocol.session_id
        if resume is None or self.policy is None:
            raise SessionNotResumable(
                f"session `{session_id}` was opened without resume", param="session_id"
            )
        if ended or self.protocol.closed:
            raise UnknownSession(f"session `{session_id}` has ended")
        replaced = resume.reattach(event.resume_token or "")
        conn = Attached(channel, after=event.last_received_server_event_seq or 0)
        if self.next is not None:  # two resumes raced: the earlier one never started
            self.next.ended.set()
        self.next = conn
        self.metrics.resume_event("replaced" if replaced else "resumed")
        if replaced and self.serving is not None:
            self.serving.cancel()
        self._reattached.set()
        return conn

    def replay(self, after: int) -> list[ServerEvent]:
        """What a resumed connection is sent before the live events (`core.resume`)."""
        assert self.protocol.resume is not None
        return self.protocol.resume.resumed(after, self.clock.now_ms(), self.protocol.next_event_id)

    async def detach(self) -> None:
        """The peer went away: wait `grace_s` for `attach()`; expire without one."""
        resume = self.protocol.resume
        assert resume is not None and self.policy is not None
        resume.detach()
        self.metrics.resume_event("detached")
        session_id = self.protocol.session_id
        log.info("session %s detached; resumable for %g s", session_id, self.policy.grace_s)
        self._reattached = anyio.Event()
        with anyio.move_on_after(self.policy.grace_s):
            await self._reattached.wait()
        if self.next is None:
            resume.expire()
            self.metrics.resume_event("expired")
            log.info("session %s expired: no resume within its grace", session_id)

    async def replaced(self, old: Attached) -> None:
        """Send `session.replaced` to the connection a resume took the session from, and
        close it (bounded: that peer may not be reading)."""
        assert self.protocol.resume is not None
        event = self.protocol.resume.replaced(self.protocol.next_event_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
            with contextlib.suppress(ChannelClosed):
                await old.channel.send(event)
            await old.channel.close(int(CloseCode.NORMAL), "session replaced")
        old.ended.set()

    @staticmethod
    async def close(conn: Attached, code: CloseCode, reason: str) -> None:
        """Close the connection the session ended on (bounded: a peer that stopped
        reading may never take the close frame)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
            await conn.channel.close(int(code), reason)
        conn.ended.set()

    @staticmethod
    async def release(conn: Attached) -> None:
        """Close our end of a connection whose peer has gone (nothing can be delivered;
        this only frees it), then let whoever serves it go."""
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLOSE_DEADLINE_S),
            contextlib.suppress(ChannelClosed, OSError),
        ):
            await conn.channel.close(int(CloseCode.GOING_AWAY), "connection lost")
        conn.ended.set()
