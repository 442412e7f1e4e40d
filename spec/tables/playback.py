"""Playback (server view): generated, sent and played audio of one response (B19)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["DRAIN_GRACE_MS", "PLAYBACK", "PlaybackState"]

#: after generation ends, audio may still be playing for its duration plus this grace
DRAIN_GRACE_MS = 1000


class PlaybackState(enum.Enum):
    IDLE = "idle"  # no audio sent yet
    STREAMING = "streaming"  # audio is being generated and sent
    SENT = "sent"  # generation ended; the client may still be playing it
    DRAINED = "drained"  # acknowledged in full, or its drain deadline passed
    CLEARED = "cleared"  # the client was told to drop what is queued


S = PlaybackState

PLAYBACK = Table(
    name="playback",
    doc=(
        "The server's view of one response's audio. `playback.ack` moves a monotonic played "
        "cursor (never past what was generated) in any state after the first chunk, so a "
        "late ack still truncates a cancelled reply to what was heard."
    ),
    states=PlaybackState,
    initial=S.IDLE,
    terminal=frozenset({S.DRAINED, S.CLEARED}),
    transitions=(
        T("start", S.IDLE, S.STREAMING, behaviours=("B19",)),
        T("finish", S.STREAMING, S.SENT, behaviours=("B19",)),
        T("drain", S.SENT, S.DRAINED, behaviours=("B19",)),
        T(
            "clear",
            (S.STREAMING, S.SENT),
            S.CLEARED,
            effect="emit_cleared",
            behaviours=("B11", "B19", "B34"),
        ),
        T(
            "ack",
            (S.STREAMING, S.SENT, S.DRAINED, S.CLEARED),
            None,
            effect="emit_acknowledged",
            behaviours=("B19", "B34"),
        ),
    ),
    invariants={"I8": "played_ms <= generated_ms"},
)
