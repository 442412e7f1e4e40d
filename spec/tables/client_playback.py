"""Client playback: the local audio of one response, from its first delta to drained or cleared."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_PLAYBACK", "LIVE_PLAYBACK_STATES", "ClientPlaybackState"]


class ClientPlaybackState(enum.Enum):
    QUEUED = "queued"  # audio received, not yet audible
    PLAYING = "playing"  # the playback worklet started playing it
    DRAINING = "draining"  # generation ended: the worklet plays out what is queued
    DRAINED = "drained"  # everything was played; the cursor was acknowledged
    CLEARED = "cleared"  # dropped by an interrupt; late audio of it is discarded


P = ClientPlaybackState

#: local audio of the response may still be audible
LIVE_PLAYBACK_STATES = frozenset({P.QUEUED, P.PLAYING, P.DRAINING})

CLIENT_PLAYBACK = Table(
    name="client_playback",
    doc=(
        "The client's playback of one response (B21). Audio is queued in the playback "
        "worklet; `finish` (output audio done, or a completed/failed response.done) asks "
        "the worklet to play out and report `drained`. An interrupt (VAD speech start, "
        "output_audio_buffer.cleared, a cancelled response.done, the stop button) clears "
        "it at once, also after generation completed. The worklet reports the played "
        "cursor before it drops the audio; every report is acknowledged with playback.ack. "
        "Audio of a drained or cleared response is dropped (response-id fencing)."
    ),
    states=ClientPlaybackState,
    initial=P.QUEUED,
    terminal=frozenset({P.DRAINED, P.CLEARED}),
    groups={"live": LIVE_PLAYBACK_STATES},
    transitions=(
        T("audio", (P.QUEUED, P.PLAYING), None, effect="enqueue_audio", behaviours=("B21",)),
        T(
            "audio",
            (P.DRAINING, P.DRAINED, P.CLEARED),
            None,
            effect="drop_late_audio",
            behaviours=("B21",),
        ),
        T("started", P.QUEUED, P.PLAYING),
        T("started", (P.PLAYING, P.DRAINING, P.DRAINED, P.CLEARED), None),
        T("finish", (P.QUEUED, P.PLAYING), P.DRAINING, effect="request_drain", behaviours=("B21",)),
        T("finish", (P.DRAINING, P.DRAINED, P.CLEARED), None),
        T("drained", P.DRAINING, P.DRAINED, effect="acknowledge_played", behaviours=("B21",)),
        T("drained", (P.DRAINED, P.CLEARED), None),
        T(
            "clear",
            (P.QUEUED, P.PLAYING, P.DRAINING),
            P.CLEARED,
            effect="clear_local_audio",
            behaviours=("B21",),
        ),
        T("clear", (P.DRAINED, P.CLEARED), None),
        T("stopped", P.CLEARED, None, effect="acknowledge_played", behaviours=("B21",)),
        T("stopped", P.DRAINED, None),
    ),
    invariants={
        "C1": "the played cursor of a response is monotonic and acknowledged on drain or clear",
        "C2": "no audio of a cleared or drained response is queued after it ended",
        "C3": "clearing one response never touches another response's audio",
    },
)
