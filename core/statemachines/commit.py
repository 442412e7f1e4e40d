"""Commit: one accepted commit (or queued user item) as an item-bound segment.

Spec: `spec.tables.commit.COMMIT`. Diagram: `docs/statemachines/commit.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: a commit leaves `pending` exactly once, and that transition carries
its single acknowledgement (`input_audio_buffer.committed`, with `no_response` for a quiet
commit) with the client's event id (I3, B15). It then waits (`retained`: no response was
asked, B14; `deferred`: a response is active, B9/B16) or is routed into a response: to the
ASR when it holds speech, else directly to the VLM (B1, B8). Each commit owns its item
version, its PCM and its frames, so batched segments stay separate and every transcript
reaches its own item (B16). Its reserved bytes are released when its stage request is
submitted or it ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.events import InputAudioBufferCommitted
from spec.tables import COMMIT, CommitState

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from core.statemachines.item import Item

__all__ = ["Commit"]

_RULES = build(COMMIT)


class Commit:
    __slots__ = (
        "adopted",
        "client_event_id",
        "content_index",
        "frames",
        "has_speech",
        "item",
        "outbox",
        "pcm16",
        "reserved",
        "state",
        "texts",
        "transcript",
    )

    def __init__(
        self,
        outbox: Outbox,
        item: Item,
        *,
        pcm16: bytes,
        frames: list[bytes],
        has_speech: bool,
        reserved: int,
        client_event_id: str | None = None,
        texts: list[str | None] | None = None,
        content_index: int = 0,
    ) -> None:
        self.outbox = outbox
        self.item = item
        self.pcm16 = pcm16
        self.frames = frames
        self.has_speech = has_speech
        self.reserved = reserved
        self.client_event_id = client_event_id
        # the item's texts in content order (typed, or transcripts the client supplied);
        # None marks the audio part whose ASR transcript goes there
        self.texts: list[str | None] = [None] if texts is None and has_speech else texts or []
        self.content_index = content_index  # the audio part its transcript belongs to
        self.adopted = False  # an item created by the client, not a commit
        self.transcript: str | None = None
        self.state = CommitState.PENDING

    # --- verbs ----------------------------------------------------------------------

    def quiet(self) -> None:
        fire(_RULES, self, "quiet")

    def retain(self) -> None:
        fire(_RULES, self, "retain")

    def adopt(self) -> None:
        fire(_RULES, self, "adopt")
        self.adopted = True

    def defer(self) -> None:
        fire(_RULES, self, "defer")

    def route_asr(self) -> None:
        fire(_RULES, self, "route_asr")

    def route_vlm(self) -> None:
        fire(_RULES, self, "route_vlm")

    def transcribe(self, transcript: str) -> None:
        fire(_RULES, self, "transcribe")
        self.transcript = transcript

    def take_audio(self) -> tuple[bytes, int]:
        """Hand the PCM to its ASR request: (pcm16, bytes no longer reserved); the frames
        stay reserved until the VLM request."""
        pcm16, self.pcm16 = self.pcm16, b""
        frames = sum(len(f) for f in self.frames)
        freed, self.reserved = self.reserved - frames, frames
        return pcm16, freed

    def release(self) -> int:
        """Drop what the segment still holds; returns the bytes no longer reserved."""
        freed, self.reserved = self.reserved, 0
        self.pcm16, self.frames = b"", []
        return freed

    def turn_text(self) -> str:
        """What this segment says: its texts, the ASR transcript in its audio part's place."""
        pieces = (self.transcript if text is None else text for text in self.texts)
        return " ".join(p for p in pieces if p is not None and p.strip())

    def fail(self) -> None:
        fire(_RULES, self, "fail")

    def withdraw(self) -> None:
        fire(_RULES, self, "withdraw")

    # --- effects --------------------------------------------------------------------

    def ack_committed(self, event: EventData) -> None:
        self.outbox.emit(
            InputAudioBufferCommitted(
                item_id=self.item.id,
                previous_item_id=self.item.previous_item_id,
                client_event_id=self.client_event_id,
            )
        )

    def ack_no_response(self, event: EventData) -> None:
        self.outbox.emit(
            InputAudioBufferCommitted(
                item_id=self.item.id,
                previous_item_id=self.item.previous_item_id,
                client_event_id=self.client_event_id,
                no_response=True,
            )
        )
