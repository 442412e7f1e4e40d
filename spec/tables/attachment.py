"""Attachment: which connection carries a resumable session (D27, D28)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["ATTACHMENT", "AttachmentState"]


class AttachmentState(enum.Enum):
    ATTACHED = "attached"  # one connection carries the session's events
    DETACHED = "detached"  # its connection dropped; the session waits for `session.resume`
    EXPIRED = "expired"  # no resume within `resume_grace_s`: the session ended
    CLOSED = "closed"  # the session ended otherwise (close, idle timeout, shutdown, crash)


S = AttachmentState

ATTACHMENT = Table(
    name="attachment",
    doc=(
        "The connection of a resumable session. A dropped connection detaches the session "
        "instead of ending it: its stages keep running and its events wait in the resume "
        "journal. `session.resume` with the current token reattaches it on a new "
        "connection (a new generation and token; the journal replays what the client "
        "missed), also while the old connection is still attached, which is then "
        "replaced. Without a resume within `resume_grace_s` the session expires."
    ),
    states=AttachmentState,
    initial=S.ATTACHED,
    terminal=frozenset({S.EXPIRED, S.CLOSED}),
    transitions=(
        T("detach", S.ATTACHED, S.DETACHED, behaviours=("B27",)),
        T(
            "resume",
            S.DETACHED,
            S.ATTACHED,
            guard="token_matches",
            effect="rotate",
            behaviours=("B27",),
        ),
        T(
            "replace",
            S.ATTACHED,
            None,
            guard="token_matches",
            effect="rotate",
            behaviours=("B27",),
        ),
        T("expire", S.DETACHED, S.EXPIRED, behaviours=("B27",)),
        T("close", (S.ATTACHED, S.DETACHED), S.CLOSED),
    ),
    invariants={
        "ATTACH-1": "only the current resume token reattaches; every reattachment rotates "
        "it and advances the attachment generation",
        "ATTACH-2": "a session is attached to at most one connection; the one it leaves "
        "gets session.replaced (or is already gone)",
        "ATTACH-3": "server_event_seq increases by one per journaled event; a replay after "
        "seq k sends exactly the journaled events above k, in order, once",
    },
)
