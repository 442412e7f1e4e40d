"""Client connection: socket, handshake (`session.update` -> `session.updated`), teardown."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_CONNECTION", "ConnectionState"]


class ConnectionState(enum.Enum):
    CONNECTING = "connecting"
    HANDSHAKING = "handshaking"  # session.update sent, waiting for session.updated
    READY = "ready"
    RESUMING = "resuming"  # the socket dropped; the resume machine brings it back (B42)
    CLOSED = "closed"


N = ConnectionState

CLIENT_CONNECTION = Table(
    name="client_connection",
    doc=(
        "The call. Only a refused handshake, a lost socket, `session.closed`, the "
        "handshake timeout, the turn watchdog or a lost resume end it; an `error` event "
        "after the handshake is a notice and never tears the call down. A resumable "
        "session's socket that fails once ready is resuming, not closed (B42)."
    ),
    states=ConnectionState,
    initial=N.CONNECTING,
    terminal=frozenset({N.CLOSED}),
    transitions=(
        T("open", N.CONNECTING, N.HANDSHAKING, effect="send_session_update"),
        T("ready", N.HANDSHAKING, N.READY),
        T("ready", N.READY, None),
        T("refused", N.HANDSHAKING, N.CLOSED, effect="tear_down"),
        T("drop", N.READY, N.RESUMING, behaviours=("B42",)),
        T("resumed", N.RESUMING, N.READY, behaviours=("B42",)),
        T(
            "lost",
            (N.CONNECTING, N.HANDSHAKING, N.READY, N.RESUMING),
            N.CLOSED,
            effect="tear_down",
        ),
        T("lost", N.CLOSED, None),
    ),
    invariants={"N1": "non-fatal errors never change the connection state"},
)
