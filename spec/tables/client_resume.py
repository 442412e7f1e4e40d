"""Client resume: a resumable session's connection through a network drop (B42)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_RESUME", "LINK_DOWN_STATES", "RESUME_REFUSALS", "LinkState"]


class LinkState(enum.Enum):
    CONNECTED = "connected"  # the first connection of the session is up
    DROPPED = "dropped"  # the socket failed; the next attempt waits for its backoff
    RECONNECTING = "reconnecting"  # a new socket is opening, or its session.resume awaits
    RESUMED = "resumed"  # session.resumed arrived: the session goes on over a new socket
    LOST = "lost"  # refused, or out of attempts or time: the call is over


L = LinkState

#: the link is down: no socket carries the session's events now
LINK_DOWN_STATES = frozenset({L.DROPPED, L.RECONNECTING})

#: the server's refusals of a `session.resume` (docs/session-semantics.md 7.1): the session
#: is gone (its grace expired, it ended, the token is stale) and no retry can bring it back
RESUME_REFUSALS = frozenset(
    {"unknown_session", "invalid_resume_token", "session_not_resumable", "resume_expected"}
)

CLIENT_RESUME = Table(
    name="client_resume",
    doc=(
        "A resumable session's connection (B42). A socket that fails after the handshake, "
        "when the server named a resume token, drops the link instead of ending the call: "
        "each attempt waits a backoff (doubling from the first delay up to a cap, each "
        "scaled by a jitter the host draws), opens a new socket and sends `session.resume` "
        "with the last `server_event_seq` received; `session.resumed` resumes the call. "
        "A refusal (the session is gone), or running out of attempts or time, loses it."
    ),
    states=LinkState,
    initial=L.CONNECTED,
    terminal=frozenset({L.LOST}),
    groups={"down": LINK_DOWN_STATES},
    transitions=(
        T(
            "drop",
            (L.CONNECTED, L.RESUMED),
            L.DROPPED,
            effect="start_backoff",
            behaviours=("B42",),
        ),
        T(
            "attempt",
            L.DROPPED,
            L.RECONNECTING,
            guard="within_limits",
            effect="open_socket",
            behaviours=("B42",),
        ),
        T("attempt", L.DROPPED, L.LOST, effect="give_up", behaviours=("B42",)),
        T("opened", L.RECONNECTING, None, effect="send_resume", behaviours=("B42",)),
        T(
            "fail",
            L.RECONNECTING,
            L.DROPPED,
            guard="within_limits",
            effect="schedule_attempt",
            behaviours=("B42",),
        ),
        T("fail", L.RECONNECTING, L.LOST, effect="give_up", behaviours=("B42",)),
        T("refused", L.RECONNECTING, L.LOST, effect="give_up", behaviours=("B42",)),
        T("resumed", L.RECONNECTING, L.RESUMED, effect="report_resumed", behaviours=("B42",)),
    ),
    invariants={
        "L1": "the resume token and the event cursor live in memory only, never in storage",
        "L2": "an event numbered at or below the cursor is applied at most once",
        "L3": "attempts are bounded in number and in time from the drop; then the call is lost",
        "L4": "while the link is down no audio, frame or commit is sent; other sends wait "
        "for the resume",
    },
)
