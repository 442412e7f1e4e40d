"""Client resume: a resumable session's link through a network drop (B42).

Spec: `spec.tables.client_resume.CLIENT_RESUME`.

House rules: every legal transition is a row of the spec table; this module owns no
socket, reads no clock and draws no random number: time (`now_ms`) and the backoff's
jitter (`jitter`, in [0, 1)) are arguments the host supplies; callbacks only append to
the client outbox.

Theory of operation: the session names itself and its first resume token in
`session.created`; every numbered event moves the cursor (`last_server_event_seq`), and
an event at or below it is a replay already applied, which `ClientProtocol` skips (L2).
The token and the cursor live only in this object (L1): a page reload starts a new
session. When the socket fails once the call is ready, `drop` schedules the first
attempt one backoff later; `attempt` (the deadline passed) asks the host to open a new
socket (`reconnect`), whose `opened` sends `session.resume`; `resumed` ends the drop.
A socket that fails (or an attempt that outlives `RESUME_ATTEMPT_TIMEOUT_MS`) schedules
the next attempt with a doubled backoff, until the attempts or the time since the drop
run out (L3); a refusal (`unknown_session`: the server's grace expired) loses the call
at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.statemachines._rulebook import build, fire
from spec.tables.client_constants import (
    RESUME_ATTEMPT_TIMEOUT_MS,
    RESUME_BACKOFF_FIRST_MS,
    RESUME_BACKOFF_MAX_MS,
    RESUME_GIVE_UP_MS,
    RESUME_MAX_ATTEMPTS,
)
from spec.tables.client_resume import CLIENT_RESUME, LinkState

if TYPE_CHECKING:
    from collections.abc import Mapping

    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ResumeLink", "backoff_ms"]

_RULES = build(CLIENT_RESUME)


def backoff_ms(attempts: int, jitter: float) -> float:
    """The wait before the attempt after `attempts` earlier ones: doubling from the first
    delay up to the cap, scaled by 0.5 + jitter / 2."""
    base: int = min(RESUME_BACKOFF_MAX_MS, RESUME_BACKOFF_FIRST_MS * 2**attempts)
    return base * (0.5 + jitter / 2)


class ResumeLink:
    __slots__ = (
        "attempt_deadline_ms",
        "attempts",
        "dropped_at_ms",
        "jitter",
        "last_server_event_seq",
        "next_attempt_ms",
        "outbox",
        "resume_token",
        "session_id",
        "state",
    )

    def __init__(self, outbox: ClientOutbox) -> None:
        self.outbox = outbox
        self.state = LinkState.CONNECTED
        self.session_id: str | None = None
        self.resume_token: str | None = None
        self.last_server_event_seq = 0
        self.attempts = 0
        self.dropped_at_ms: float | None = None
        self.next_attempt_ms: float | None = None
        self.attempt_deadline_ms: float | None = None
        self.jitter = 0.5

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    def resumable(self) -> bool:
        """The server named a session and a token: a drop can be resumed."""
        return self.session_id is not None and self.resume_token is not None

    def take(self, event: Mapping[str, Any]) -> bool:
        """Note what `event` says about resuming; False if it is numbered at or below the
        cursor (a replay of an event already applied: skip it)."""
        kind = event.get("type")
        if kind == "session.created":
            session = event.get("session")
            session_id = session.get("id") if isinstance(session, dict) else None
            token = event.get("resume_token")
            if isinstance(session_id, str) and isinstance(token, str):
                self.session_id, self.resume_token = session_id, token
        elif kind == "session.resumed" and isinstance(event.get("resume_token"), str):
            self.resume_token = event["resume_token"]
        seq = event.get("server_event_seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if seq <= self.last_server_event_seq:
                return False
            self.last_server_event_seq = seq
        return True

    def snapshot(self) -> dict[str, object]:
        """The link's state, without the token (it never leaves this object)."""
        return {
            "state": self.state.value,
            "session_id": self.session_id,
            "resumable": self.resumable(),
            "last_server_event_seq": self.last_server_event_seq,
            "attempts": self.attempts,
            "next_attempt_ms": self.next_attempt_ms,
            "attempt_deadline_ms": self.attempt_deadline_ms,
        }

    # --- guards ---------------------------------------------------------------------

    def within_limits(self, event: EventData) -> bool:
        assert self.dropped_at_ms is not None
        elapsed = float(event.kwargs["now_ms"]) - self.dropped_at_ms
        return self.attempts < RESUME_MAX_ATTEMPTS and elapsed < RESUME_GIVE_UP_MS

    # --- effects --------------------------------------------------------------------

    def start_backoff(self, event: EventData) -> None:
        self.attempts = 0
        self.dropped_at_ms = float(event.kwargs["now_ms"])
        self.schedule_attempt(event)

    def schedule_attempt(self, event: EventData) -> None:
        self.jitter = float(event.kwargs.get("jitter", self.jitter))
        wait = backoff_ms(self.attempts, self.jitter)
        self.next_attempt_ms = float(event.kwargs["now_ms"]) + wait
        self.attempt_deadline_ms = None
        self.outbox.emit(
            {"kind": "link", "state": "dropped", "attempts": self.attempts, "retry_in_ms": wait}
        )

    def open_socket(self, event: EventData) -> None:
        self.attempts += 1
        self.next_attempt_ms = None
        self.attempt_deadline_ms = float(event.kwargs["now_ms"]) + RESUME_ATTEMPT_TIMEOUT_MS
        self.outbox.emit(
            {"kind": "reconnect", "session_id": self.session_id, "attempt": self.attempts}
        )

    def send_resume(self, event: EventData) -> None:
        self.outbox.send_through(
            {
                "type": "session.resume",
                "session_id": self.session_id,
                "resume_token": self.resume_token,
                "last_received_server_event_seq": self.last_server_event_seq,
            }
        )

    def give_up(self, event: EventData) -> None:
        self.next_attempt_ms = None
        self.attempt_deadline_ms = None
        why = str(event.kwargs["why"])
        if why == "out_of_time":
            message = (
                f"the connection did not come back ({self.attempts} attempts in "
                f"{RESUME_GIVE_UP_MS // 1000} s); the conversation is over: Connect "
                "starts a new session"
            )
        else:
            message = (
                f"the server no longer holds this session ({why}): the connection was down "
                "longer than it waits; Connect starts a new session"
            )
        self.outbox.emit(
            {"kind": "notice", "level": "error", "code": "session_lost", "message": message}
        )

    def report_resumed(self, event: EventData) -> None:
        assert self.dropped_at_ms is not None
        self.attempt_deadline_ms = None
        self.outbox.emit(
            {
                "kind": "link",
                "state": "resumed",
                "attempts": self.attempts,
                "down_ms": float(event.kwargs["now_ms"]) - self.dropped_at_ms,
            }
        )
