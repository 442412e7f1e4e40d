"""Client playback: the local audio of one response, and its played cursor (B21).

Spec: `spec.tables.client_playback.CLIENT_PLAYBACK`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about the audio worklet or clocks; callbacks only append to the client outbox.

Theory of operation: a playback exists from the first audio delta of its response. Deltas
are queued in the playback worklet (`play`) while it is `queued` or `playing`; `finish`
asks the worklet to play out and report `drained` (then `playback.ack` with the played
cursor). An interrupt fires `clear`: the worklet drops the response's audio at once, in
any live state, also after generation completed, and reports the cursor it reached
(`stopped`), which is acknowledged. The played cursor is the maximum of every report.
Audio that arrives for a drained or cleared response is dropped (`fenced`): response ids
fence late audio, so an older reply never sounds after an interrupt and clearing one
response never touches another.

On a WebRTC call (`on_track=True`) the server plays the reply onto the call's audio track:
the playback exists from `output_audio_buffer.started`, which is its `started`, and
`output_audio_buffer.stopped` is its `drained`; no audio is queued here, no drain is asked
of a worklet and no `playback.ack` is sent (the server knows what it sent). A `clear` is
still output: the host measures when the track went silent.

Invariants: C1-C3 of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.tables.client_playback import CLIENT_PLAYBACK, ClientPlaybackState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ClientPlayback"]

_RULES = build(CLIENT_PLAYBACK)


class ClientPlayback:
    __slots__ = (
        "item_id",
        "on_track",
        "outbox",
        "played_ms",
        "queued_ms",
        "response_id",
        "state",
    )

    def __init__(
        self,
        outbox: ClientOutbox,
        response_id: str,
        item_id: str | None,
        *,
        on_track: bool = False,
    ) -> None:
        self.outbox = outbox
        self.on_track = on_track  # the server plays it onto a WebRTC audio track
        self.response_id = response_id
        self.item_id = item_id
        self.state = ClientPlaybackState.QUEUED
        self.queued_ms = 0.0
        self.played_ms = 0.0

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    def accepts(self, trigger: str) -> bool:
        """Whether the table has a row for `trigger` now (reports may come late)."""
        return CLIENT_PLAYBACK.allowed(self.state, trigger)

    def snapshot(self) -> dict[str, object]:
        return {
            "response_id": self.response_id,
            "state": self.state.value,
            "queued_ms": self.queued_ms,
            "played_ms": self.played_ms,
        }

    # --- effects --------------------------------------------------------------------

    def enqueue_audio(self, event: EventData) -> None:
        self.queued_ms += float(event.kwargs["audio_ms"])
        self.outbox.emit(
            {"kind": "play", "response_id": self.response_id, "audio": event.kwargs["audio"]}
        )

    def drop_late_audio(self, event: EventData) -> None:
        self.outbox.emit(
            {
                "kind": "fenced",
                "response_id": self.response_id,
                "audio_ms": event.kwargs["audio_ms"],
            }
        )

    def request_drain(self, event: EventData) -> None:
        if self.on_track:
            return  # the server plays it out and says `output_audio_buffer.stopped`
        self.outbox.emit({"kind": "drain", "response_id": self.response_id})

    def clear_local_audio(self, event: EventData) -> None:
        self.outbox.emit({"kind": "clear", "response_id": self.response_id})

    def acknowledge_played(self, event: EventData) -> None:
        reported = float(event.kwargs["played_ms"])
        self.played_ms = max(self.played_ms, reported)
        if self.on_track:
            return  # the server reports what it sent itself
        ack: dict[str, object] = {
            "type": "playback.ack",
            "response_id": self.response_id,
            "played_ms": self.played_ms,
        }
        if self.item_id is not None:
            ack["item_id"] = self.item_id
        self.outbox.send(ack)
