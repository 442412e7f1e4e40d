"""`ClientReplies`: the assistant's replies as the client plays them, one
`ClientPlayback` per response with audio (B19, B21).

Owned here: the playbacks by response id (finished ones kept as fences, up to
`FENCE_MEMORY`, so their late audio is dropped by id), and when each reply's turn ended,
until its first-audio latency is reported. `ClientProtocol` routes server events and
the playback worklet's reports here; the playbacks' own transitions are the
`client_playback` table's.

On a WebRTC call (`on_track`) no delta arrives: the server's `output_audio_buffer.started`
opens a response's playback and is its `started` (its first-audio latency is taken then),
`output_audio_buffer.stopped` finishes and drains it (`track_started`, `track_stopped`).
The call's reply gate (`client_reply_gate`) is muted by each reply cleared here and opened
by the start of a reply that was not cut: the host mutes the track on `mute_reply` and
unmutes it on `unmute_reply`, so what the server sent before a barge-in is not heard.

Invariants kept: nothing of a cleared or drained response is queued again; an interrupt
clears queued audio at once, also after generation completed; every cursor report a
playback accepts is acknowledged; one latency report per response.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.client_protocol.holds import trim_oldest
from core.statemachines.client_playback import ClientPlayback
from core.statemachines.client_reply_gate import ReplyGate
from spec.tables.client_constants import FENCE_MEMORY, PLAYBACK_RATE_HZ
from spec.tables.client_playback import LIVE_PLAYBACK_STATES

if TYPE_CHECKING:
    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ClientReplies", "base64_bytes"]


def base64_bytes(text: str) -> int:
    """Decoded length of standard base64 `text`, without decoding it."""
    if not text:
        return 0
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return len(text) * 3 // 4 - padding


class ClientReplies:
    """The playbacks of one call."""

    def __init__(self, outbox: ClientOutbox, *, on_track: bool = False) -> None:
        self._out = outbox
        self.on_track = on_track
        self.playbacks: dict[str, ClientPlayback] = {}
        #: on a call: whether the reply track is heard (muted by a cut, see the docstring)
        self.gate = ReplyGate(outbox)
        self._turn_end: dict[str, float] = {}  # taken when its latency is reported

    def get(self, response_id: str | None) -> ClientPlayback | None:
        return self.playbacks.get(response_id) if response_id is not None else None

    def turn_ended(self, response_id: str, at_ms: float) -> None:
        """`response_id` answers a turn that ended at `at_ms` (latency starts there)."""
        self._turn_end[response_id] = at_ms
        trim_oldest(self._turn_end)

    def audio(self, response_id: str, item_id: str | None, audio_b64: str) -> None:
        """`response.output_audio.delta`: queue it (or drop it, if its response is fenced)."""
        audio_ms = base64_bytes(audio_b64) // 2 / (PLAYBACK_RATE_HZ / 1000)
        playback = self.playbacks.get(response_id)
        if playback is None:
            playback = self._open(response_id, item_id)
        playback.fire("audio", audio=audio_b64, audio_ms=audio_ms)

    def _open(self, response_id: str, item_id: str | None) -> ClientPlayback:
        playback = ClientPlayback(self._out, response_id, item_id, on_track=self.on_track)
        self.playbacks[response_id] = playback
        return playback

    def track_started(self, response_id: str, item_id: str | None, now_ms: float) -> None:
        """`output_audio_buffer.started` on a call: the server began playing the reply."""
        if response_id not in self.playbacks:
            self._open(response_id, item_id)
        self.gate.fire("started", response_id=response_id)
        self.started(response_id, now_ms)

    def track_stopped(self, response_id: str) -> None:
        """`output_audio_buffer.stopped` on a call: the reply's last sample went out."""
        playback = self.playbacks.get(response_id)
        if playback is None:
            return
        if playback.accepts("finish"):
            playback.fire("finish")
        if playback.accepts("drained"):
            playback.fire("drained", played_ms=0.0)

    def audio_done(self, response_id: str | None) -> None:
        playback = self.get(response_id)
        if playback is not None:
            playback.fire("finish")

    def done(self, response_id: str, *, cancelled: bool) -> None:
        """`response.done`: a cancelled reply is cleared, any other drains."""
        playback = self.playbacks.get(response_id)
        if playback is None:
            return
        if cancelled:
            self._clear(playback)
        else:
            playback.fire("finish")

    def interrupt(self, response_id: str | None) -> None:
        """Clear the local audio of `response_id` (None: every reply) at once."""
        for playback in self.playbacks.values():
            if response_id in (None, playback.response_id) and playback.state in (
                LIVE_PLAYBACK_STATES
            ):
                self._clear(playback)

    def _clear(self, playback: ClientPlayback) -> None:
        """Clear `playback`; on a call a live reply is cut at the gate too."""
        live = playback.state in LIVE_PLAYBACK_STATES
        playback.fire("clear")
        if self.on_track and live:
            self.gate.fire("cut", response_id=playback.response_id)

    def started(self, response_id: str, now_ms: float) -> None:
        """The worklet made `response_id` audible: report its first-audio latency once."""
        playback = self.playbacks.get(response_id)
        if playback is None:
            return
        playback.fire("started")
        end = self._turn_end.pop(response_id, None)
        if end is not None:
            self._out.emit(
                {"kind": "latency", "response_id": response_id, "first_audio_ms": now_ms - end}
            )

    def report(self, response_id: str, trigger: str, played_ms: float) -> None:
        """A cursor report of the worklet (`stopped` or `drained`), if the playback takes it."""
        playback = self.playbacks.get(response_id)
        if playback is not None and playback.accepts(trigger):
            playback.fire(trigger, played_ms=played_ms)

    def prune(self) -> None:
        done = [p for p in self.playbacks.values() if p.state not in LIVE_PLAYBACK_STATES]
        for playback in done[: max(0, len(done) - FENCE_MEMORY)]:
            del self.playbacks[playback.response_id]
