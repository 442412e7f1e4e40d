"""Playback (server view): generated, sent and played audio of one response (B19).

Spec: `spec.tables.playback.PLAYBACK`. Diagram: `docs/statemachines/playback.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: `start` on the first audio chunk, `finish` when generation ends
(`sent`: the client may still be playing it), then `drain` once acknowledged in full or
when its drain deadline passes, or `clear` when the client is told to drop queued audio
(barge-in, cancel). `ack` moves the played cursor monotonically and never past what was
generated (I8), in every state after the first chunk: a late ack of an older response
affects only that response, and still truncates a cancelled reply to what was heard.
Chunk accounting (`generated_ms`) is a counter update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.events import OutputAudioBufferCleared, PlaybackAcknowledged
from spec.tables import PLAYBACK, PlaybackState
from spec.tables.playback import DRAIN_GRACE_MS

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox

__all__ = ["Playback"]

_RULES = build(PLAYBACK)


class Playback:
    __slots__ = (
        "first_audio_ms",
        "generated_ms",
        "item_id",
        "outbox",
        "played_ms",
        "reported",
        "response_id",
        "state",
    )

    def __init__(self, outbox: Outbox, *, response_id: str, item_id: str) -> None:
        self.outbox = outbox
        self.response_id = response_id
        self.item_id = item_id
        self.state = PlaybackState.IDLE
        self.generated_ms = 0.0
        self.played_ms = 0.0
        self.first_audio_ms = 0
        self.reported = False  # the client reported a played position (an ack arrived)

    @property
    def may_be_playing(self) -> bool:
        """Audio was sent and the client may not have finished playing it."""
        return self.state in (PlaybackState.STREAMING, PlaybackState.SENT)

    def drain_deadline(self) -> int | None:
        if self.state is not PlaybackState.SENT:
            return None
        return self.first_audio_ms + int(self.generated_ms) + DRAIN_GRACE_MS

    def add_audio(self, duration_ms: float, now_ms: int) -> None:
        if self.state is PlaybackState.IDLE:
            fire(_RULES, self, "start")
            self.first_audio_ms = now_ms
        self.generated_ms += duration_ms

    # --- verbs ----------------------------------------------------------------------

    def finish(self) -> None:
        fire(_RULES, self, "finish")
        if self.played_ms >= self.generated_ms:
            fire(_RULES, self, "drain")

    def drain(self) -> None:
        fire(_RULES, self, "drain")

    def clear(self) -> None:
        fire(_RULES, self, "clear")

    def ack(self, played_ms: float) -> None:
        played = min(max(self.played_ms, played_ms), self.generated_ms)
        fire(_RULES, self, "ack", played_ms=played)
        self.played_ms = played
        self.reported = True
        if self.state is PlaybackState.SENT and self.played_ms >= self.generated_ms:
            fire(_RULES, self, "drain")

    # --- effects --------------------------------------------------------------------

    def emit_cleared(self, event: EventData) -> None:
        self.outbox.emit(OutputAudioBufferCleared(response_id=self.response_id))

    def emit_acknowledged(self, event: EventData) -> None:
        self.outbox.emit(
            PlaybackAcknowledged(
                response_id=self.response_id,
                item_id=self.item_id,
                played_ms=event.kwargs["played_ms"],
            )
        )
