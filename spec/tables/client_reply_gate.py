"""Client reply gate: on a WebRTC call, whether the reply track is heard after a barge-in."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_REPLY_GATE", "ReplyGateState"]


class ReplyGateState(enum.Enum):
    OPEN = "open"  # the call's reply track is heard
    MUTED = "muted"  # a reply was cut: the track is silent until another reply starts


G = ReplyGateState

CLIENT_REPLY_GATE = Table(
    name="client_reply_gate",
    doc=(
        "The reply gate of a WebRTC call (B21): the server plays replies onto the call's "
        "audio track, so at a barge-in what it already sent is still in flight and in the "
        "jitter buffer. When the client clears a reply's playback (`cut`) the gate mutes "
        "the track at once (`mute_reply`), as the websocket's worklet drops what it "
        "holds. The server's `output_audio_buffer.started` of a reply that was not cut "
        "unmutes it (`unmute_reply`): the server starts a reply's audio only after it "
        "cleared the cut one. A late start of a cut reply keeps the track muted. On a "
        "websocket the gate stays open (the worklet fences the audio itself)."
    ),
    states=ReplyGateState,
    initial=G.OPEN,
    terminal=frozenset(),
    transitions=(
        T("cut", G.OPEN, G.MUTED, effect="mute_reply", behaviours=("B21",)),
        T("cut", G.MUTED, None, effect="remember_cut", behaviours=("B21",)),
        T(
            "started",
            G.MUTED,
            G.OPEN,
            guard="starts_another_reply",
            effect="unmute_reply",
            behaviours=("B21",),
        ),
        T("started", G.MUTED, None, behaviours=("B21",)),  # a cut reply's late start
        T("started", G.OPEN, None),
    ),
    invariants={
        "R1": "after a reply is cut, none of its audio is heard on the track",
        "R2": "the gate opens only at the start of a reply that was not cut",
    },
)
