"""Output audio buffer: what a WebRTC call plays, and the events that say so (B36).

Spec: `spec.tables.output_audio_buffer.OUTPUT_AUDIO_BUFFER`. Diagram:
`docs/statemachines/output_audio_buffer.md`.

What it owns: which response's audio the call's media track is playing, how much of each
response's audio was generated (`queued`) and paced out (`paced`), and which responses are
done. It decides `output_audio_buffer.started` (the first paced frame of a response),
`output_audio_buffer.stopped` (the response is done and its queue ran dry: O2) and the
played position the call reports to the session (`ack_due`), never past what was
generated (O4). The call's media pacer only executes: it tells the machine what it
paced and asks what to say. Nothing here knows about tracks, codecs or clocks.

A clear (the session's own `output_audio_buffer.cleared`) ends the playing without a stop:
the session has already told the client, and the pacer drops the cleared response's
queue (O3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.events import OutputAudioBufferStarted, OutputAudioBufferStopped
from spec.tables import OUTPUT_AUDIO_BUFFER, OutputBufferState

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox

__all__ = ["OutputAudioBuffer", "PlayedPosition"]

_RULES = build(OUTPUT_AUDIO_BUFFER)

#: responses whose cursors are kept once they stopped or were cleared: the latest few,
#: so that a late report still finds its response and memory stays bounded
_KEPT_RESPONSES = 4


class PlayedPosition:
    """How much of one response's audio was generated and how much went out."""

    __slots__ = ("done", "generated_ms", "played_ms", "reported_ms")

    def __init__(self) -> None:
        self.generated_ms = 0.0
        self.played_ms = 0.0
        self.reported_ms = 0.0
        self.done = False


class OutputAudioBuffer:
    __slots__ = ("_positions", "outbox", "response_id", "state")

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.state = OutputBufferState.IDLE
        #: the response being played (PLAYING), else the last one played
        self.response_id: str | None = None
        self._positions: dict[str, PlayedPosition] = {}

    def _position(self, response_id: str) -> PlayedPosition:
        position = self._positions.get(response_id)
        if position is None:
            position = self._positions[response_id] = PlayedPosition()
            while len(self._positions) > _KEPT_RESPONSES:
                oldest = next(iter(self._positions))
                if oldest == self.response_id:
                    break
                del self._positions[oldest]
        return position

    # --- what the call saw -------------------------------------------------------------

    def queued(self, response_id: str, duration_ms: float) -> None:
        """A chunk of the response's audio went into the pacer's queue."""
        self._position(response_id).generated_ms += duration_ms

    def finished(self, response_id: str) -> None:
        """The session sent the response's `response.done`: no more audio will come."""
        self._position(response_id).done = True

    def paced(self, response_id: str, duration_ms: float) -> None:
        """`duration_ms` of the response's audio went out on the track."""
        if self.state is OutputBufferState.IDLE:
            fire(_RULES, self, "start", response_id=response_id)
        elif response_id != self.response_id:
            fire(_RULES, self, "follow", response_id=response_id)
        position = self._position(response_id)
        position.played_ms = min(position.played_ms + duration_ms, position.generated_ms)

    def ran_dry(self) -> None:
        """The pacer's queue is empty: a done response has played out (O2)."""
        if self.state is not OutputBufferState.PLAYING or self.response_id is None:
            return
        position = self._positions.get(self.response_id)
        if position is None or position.done:
            fire(_RULES, self, "stop")

    def cleared(self, response_id: str | None) -> bool:
        """The session cleared `response_id`'s audio (None: all of it). True when the
        pacer must drop its queue (O3)."""
        if self.state is not OutputBufferState.PLAYING:
            return True  # nothing playing, but a queued, not yet paced chunk goes too
        if response_id is not None and response_id != self.response_id:
            return False
        fire(_RULES, self, "clear")
        return True

    def ack_due(self) -> tuple[str, float] | None:
        """(response id, played ms) when the current response's cursor moved since it
        was last reported; the call then reports it to the session."""
        if self.response_id is None:
            return None
        position = self._positions.get(self.response_id)
        if position is None or position.played_ms <= position.reported_ms:
            return None
        position.reported_ms = position.played_ms
        return self.response_id, position.played_ms

    # --- effects -----------------------------------------------------------------------

    def emit_started(self, event: EventData) -> None:
        self.response_id = event.kwargs["response_id"]
        self.outbox.emit(OutputAudioBufferStarted(response_id=self.response_id))

    def emit_followed(self, event: EventData) -> None:
        # a response whose audio follows another's without a gap: the first one stops
        # (it was done or it would not have been followed) and the next one starts
        if self.response_id is not None:
            self.outbox.emit(OutputAudioBufferStopped(response_id=self.response_id))
        self.response_id = event.kwargs["response_id"]
        self.outbox.emit(OutputAudioBufferStarted(response_id=self.response_id))

    def emit_stopped(self, event: EventData) -> None:
        assert self.response_id is not None
        self.outbox.emit(OutputAudioBufferStopped(response_id=self.response_id))
