"""Input buffer: idle retention versus utterance capture, with byte accounting.

Spec: `spec.tables.input_buffer.INPUT_BUFFER`. Diagram: `docs/statemachines/input_buffer.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: appends are counter updates, not transitions. While `idle` the
buffer keeps only the newest frame and a pre-roll window (the newest appends covering at
most PREROLL_MS, but always the newest append whole), so an idle camera session's memory
is flat (B12, I6). `start_capture` (a speech verdict or VAD speech start) keeps the
pre-roll as the utterance start and from then on keeps everything until `take` (commit)
or `clear`. Every byte kept is counted in `held_bytes`; dropping returns the count freed
so the session can release its reservation (I5).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING

from core.audio import BYTES_PER_MS_16K
from core.statemachines._rulebook import build, fire
from spec.events import InputAudioBufferCleared
from spec.tables import INPUT_BUFFER, BufferState
from spec.tables.input_buffer import PREROLL_MS

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox

__all__ = ["InputBuffer"]

_RULES = build(INPUT_BUFFER)
_PREROLL_BYTES = PREROLL_MS * BYTES_PER_MS_16K


class InputBuffer:
    """Uncommitted audio (16 kHz pcm16 chunks) and camera frames."""

    __slots__ = (
        "audio_bytes",
        "chunks",
        "frame_bytes",
        "frames",
        "outbox",
        "since_commit",
        "speech_item_id",
        "state",
    )

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.state = BufferState.IDLE
        self.chunks: deque[bytes] = deque()
        self.audio_bytes = 0
        self.frames: list[bytes] = []
        self.frame_bytes = 0
        self.since_commit = False  # anything appended since the last commit or clear
        #: the item id announced by VAD `speech_started` for what this buffer captures
        self.speech_item_id: str | None = None

    @property
    def held_bytes(self) -> int:
        return self.audio_bytes + self.frame_bytes

    @property
    def capturing(self) -> bool:
        return self.state is BufferState.CAPTURING

    # --- counter updates ------------------------------------------------------------

    def add_audio(self, pcm16: bytes) -> int:
        """Keep `pcm16`; returns the bytes dropped by idle retention."""
        self.since_commit = True
        if not pcm16:
            return 0
        self.chunks.append(pcm16)
        self.audio_bytes += len(pcm16)
        if self.state is BufferState.CAPTURING:
            return 0
        freed = 0
        while len(self.chunks) > 1 and self.audio_bytes > _PREROLL_BYTES:
            dropped = self.chunks.popleft()
            self.audio_bytes -= len(dropped)
            freed += len(dropped)
        return freed

    def add_frames(self, frames: list[bytes], max_frames: int) -> int:
        """Keep frames (idle: only the newest one); returns the bytes dropped."""
        self.since_commit = True
        if not frames:
            return 0
        self.frames.extend(frames)
        self.frame_bytes += sum(len(f) for f in frames)
        keep = max_frames if self.capturing else 1
        freed = 0
        while len(self.frames) > keep:
            dropped = self.frames.pop(0)
            self.frame_bytes -= len(dropped)
            freed += len(dropped)
        return freed

    def idle_bytes_after(self, added_audio: int, added_frames: list[bytes]) -> int:
        """Bytes held after such an append, if it were made now (for the backpressure check)."""
        if self.capturing:
            return self.held_bytes + added_audio + sum(len(f) for f in added_frames)
        # what `add_audio` would keep: the oldest chunks go while more than the preroll is
        # held, never the newest (walks only the chunks that would go: the append path)
        audio = self.audio_bytes + added_audio
        droppable = len(self.chunks) - (0 if added_audio else 1)
        for chunk in itertools.islice(self.chunks, max(droppable, 0)):
            if audio <= _PREROLL_BYTES:
                break
            audio -= len(chunk)
        frames = len(added_frames[-1]) if added_frames else self.frame_bytes
        return audio + frames

    def bytes_after(
        self, added_audio: int, added_frames: list[bytes], *, capture: bool, max_frames: int
    ) -> int:
        """Bytes held after an append that starts (or continues) capture when `capture`,
        if it were made now (for the backpressure check)."""
        if not capture:
            return self.idle_bytes_after(added_audio, added_frames)
        if not added_frames:
            return self.held_bytes + added_audio
        kept = (self.frames + added_frames)[-max_frames:]
        return self.audio_bytes + added_audio + sum(len(f) for f in kept)

    def audio_tail(self, max_bytes: int, *, drop_bytes: int = 0) -> bytes:
        """At most the last `max_bytes` of the audio held, ending `drop_bytes` before its
        end (a copy; the buffer keeps everything)."""
        parts: list[bytes] = []
        skip, want = drop_bytes, max_bytes
        for chunk in reversed(self.chunks):
            if want <= 0:
                break
            end = len(chunk)
            if skip:
                cut = min(skip, end)
                skip -= cut
                end -= cut
            if end:
                parts.append(chunk[max(0, end - want) : end])
                want -= min(want, end)
        return b"".join(reversed(parts))

    def audio(self) -> bytes:
        """The buffered audio, in order (a copy; the buffer keeps it)."""
        return b"".join(self.chunks)

    # --- verbs ----------------------------------------------------------------------

    def start_capture(self) -> None:
        fire(_RULES, self, "start_capture")

    def take(self, keep_audio_bytes: int | None = None) -> tuple[bytes, list[bytes]]:
        """Hand the content to a commit and return to idle (the bytes stay reserved).

        With `keep_audio_bytes` (a VAD end), only that much audio goes to the commit; the
        audio after it stays, as idle audio, the start of what comes next: when one append
        holds the end of an utterance and the start of the next, nothing of the next is
        lost. Idle retention applies to it as to any idle audio (the bytes it drops are
        `held_bytes` no more)."""
        chunks, frames = list(self.chunks), self.frames
        fire(_RULES, self, "take")
        self._reset()
        audio = b"".join(chunks)
        if keep_audio_bytes is None or keep_audio_bytes >= len(audio):
            return audio, frames
        keep = max(0, keep_audio_bytes)
        at = 0
        for chunk in chunks:  # the rest keeps its append boundaries
            piece = chunk[max(0, keep - at) :]
            at += len(chunk)
            if piece:
                self.add_audio(piece)
        return audio[:keep], frames

    def clear(self) -> int:
        """Drop everything; returns the bytes freed."""
        freed = self.held_bytes
        fire(_RULES, self, "clear")
        self._reset()
        return freed

    def _reset(self) -> None:
        self.chunks = deque()
        self.audio_bytes = 0
        self.frames = []
        self.frame_bytes = 0
        self.since_commit = False
        self.speech_item_id = None

    # --- effects --------------------------------------------------------------------

    def emit_cleared(self, event: EventData) -> None:
        self.outbox.emit(InputAudioBufferCleared())
