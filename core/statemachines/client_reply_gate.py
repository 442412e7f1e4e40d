"""Client reply gate: whether a WebRTC call's reply track is heard after a barge-in (B21).

Spec: `spec.tables.client_reply_gate.CLIENT_REPLY_GATE`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about WebAudio, gain nodes or tracks; callbacks only append to the client outbox.

Why a machine of its own, not rows of `client_playback`: a playback is one response's,
from its first audio to drained or cleared, while the gate is the call's one track across
responses: it is muted by one reply's clear and opened by another reply's start, and a
per-response machine cannot hold a state that outlives the response it belongs to.

Theory of operation: on a WebRTC call the server plays replies onto the call's audio
track; at a barge-in it clears its output buffer, but what it already sent is in flight
and in the browser's jitter buffer and would still play. `ClientReplies` fires `cut` for
each reply whose playback it clears: the gate mutes (`mute_reply`, the host silences the
track at once) and remembers which replies were cut. The server's
`output_audio_buffer.started` is `started`: a reply that was not cut opens the gate
(`unmute_reply`; the server starts a reply's audio only after it cleared the cut one, and
its first packets come after the cut one's last); a cut reply's late start keeps it
muted. A clear of every reply (the stop button, server VAD's speech start) cuts every
live reply, and the next reply that starts opens the gate.

Invariants: R1 (nothing of a cut reply is heard), R2 (only another reply's start opens it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.tables.client_reply_gate import CLIENT_REPLY_GATE, ReplyGateState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ReplyGate"]

_RULES = build(CLIENT_REPLY_GATE)


class ReplyGate:
    __slots__ = ("cut_replies", "outbox", "state")

    def __init__(self, outbox: ClientOutbox) -> None:
        self.outbox = outbox
        self.state = ReplyGateState.OPEN
        #: the replies cut since the gate last muted (their late starts keep it muted)
        self.cut_replies: list[str] = []

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    def snapshot(self) -> dict[str, object]:
        return {"state": self.state.value, "cut_replies": list(self.cut_replies)}

    # --- guards ---------------------------------------------------------------------

    def starts_another_reply(self, event: EventData) -> bool:
        return event.kwargs["response_id"] not in self.cut_replies

    # --- effects --------------------------------------------------------------------

    def mute_reply(self, event: EventData) -> None:
        self.cut_replies = [str(event.kwargs["response_id"])]
        self.outbox.emit({"kind": "mute_reply", "response_id": event.kwargs["response_id"]})

    def remember_cut(self, event: EventData) -> None:
        response_id = str(event.kwargs["response_id"])
        if response_id not in self.cut_replies:
            self.cut_replies.append(response_id)

    def unmute_reply(self, event: EventData) -> None:
        self.cut_replies = []
        self.outbox.emit({"kind": "unmute_reply", "response_id": event.kwargs["response_id"]})
