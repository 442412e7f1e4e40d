"""Output audio buffer of a WebRTC call: the reply audio the server paces onto the media
track, and when it says so (B36)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["OUTPUT_AUDIO_BUFFER", "OutputBufferState"]


class OutputBufferState(enum.Enum):
    IDLE = "idle"  # no reply audio is going out on the track
    PLAYING = "playing"  # one response's audio is being paced out in real time


S = OutputBufferState

OUTPUT_AUDIO_BUFFER = Table(
    name="output_audio_buffer",
    doc=(
        "On a WebRTC call the server, not the client, plays the reply: it paces the audio "
        "onto the media track in real time, so what it has sent is what was heard. "
        "`output_audio_buffer.started` goes out with a response's first paced frame, "
        "`output_audio_buffer.stopped` once that response is done and its last sample "
        "went out; a clear (the session's `output_audio_buffer.cleared`, on barge-in, "
        "cancel or the client's `output_audio_buffer.clear`) drops what is queued and "
        "ends the playing without a stop. Every paced frame moves the response's played "
        "cursor, which the call reports to the session as its playback position."
    ),
    states=OutputBufferState,
    initial=S.IDLE,
    terminal=frozenset(),
    transitions=(
        T("start", S.IDLE, S.PLAYING, effect="emit_started", behaviours=("B36",)),
        T("follow", S.PLAYING, None, effect="emit_followed", behaviours=("B36",)),
        T("stop", S.PLAYING, S.IDLE, effect="emit_stopped", behaviours=("B36",)),
        T("clear", S.PLAYING, S.IDLE, behaviours=("B36",)),
    ),
    invariants={
        "O1": "started and stopped alternate, one pair per response that had audio paced",
        "O2": "stopped only after the response's response.done, once its audio all went out",
        "O3": "no audio of a cleared response is paced after the clear",
        "O4": "a response's played cursor never passes the audio it generated",
    },
)
