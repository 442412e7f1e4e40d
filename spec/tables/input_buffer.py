"""Input buffer: idle retention versus utterance capture, with byte reservations."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["INPUT_BUFFER", "PREROLL_MS", "BufferState"]

#: idle retention keeps at most this much of the most recent audio (plus the newest append)
PREROLL_MS = 500


class BufferState(enum.Enum):
    IDLE = "idle"  # keeps only the latest frame and the pre-roll window
    CAPTURING = "capturing"  # keeps the whole utterance until commit


S = BufferState

INPUT_BUFFER = Table(
    name="input_buffer",
    doc=(
        "Uncommitted input. While idle it keeps only the latest camera frame and a pre-roll "
        "window of audio, so an idle camera session's memory is flat (B12); from speech start "
        "it keeps the whole utterance until commit. Appends are counter updates, not "
        "transitions."
    ),
    states=BufferState,
    initial=S.IDLE,
    terminal=frozenset(),
    transitions=(
        T("start_capture", S.IDLE, S.CAPTURING, behaviours=("B10", "B12")),
        T("take", (S.IDLE, S.CAPTURING), S.IDLE, behaviours=("B12",)),
        T("clear", (S.IDLE, S.CAPTURING), S.IDLE, effect="emit_cleared", behaviours=("B7", "B13")),
    ),
    invariants={
        "I5": "pending bytes never exceed max_pending_input_bytes",
        "I6": "an idle buffer holds at most one frame and PREROLL_MS of audio plus one append",
    },
)
