"""`RememberedResponses`: a session's responses by id, the active one and those it still
remembers, with what their playback answers (B19, docs/session-semantics.md sections 6
and 10).

A dict in creation order: `conversation.item.truncate` and `playback.ack` find their
response here, the client's pace of playback drains them (`drain_due`), and beyond
`max_responses` the oldest that neither is active nor may still be playing are
forgotten (their assistant items stay, entering history with their own text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.prompt_input import played_prefix
from spec import events as ev
from spec.errors import ErrorCode, RemoteProtocolError
from spec.tables import ItemState, PlaybackState

if TYPE_CHECKING:
    from core.outbox import Outbox
    from core.statemachines.item import Item
    from core.statemachines.response import Response

__all__ = ["RememberedResponses"]


class RememberedResponses(dict[str, "Response"]):
    def known(self, response_id: str | None, event_id: str | None) -> None:
        """Refuse a request that names a response this session does not remember."""
        if response_id is not None and response_id not in self:
            raise RemoteProtocolError(
                f"no response `{response_id}`",
                code=ErrorCode.RESPONSE_NOT_ACTIVE,
                param="response_id",
                event_id=event_id,
            )

    def may_be_playing(self, response_id: str | None) -> bool:
        """Whether some response (`response_id`, or any) may still be playing."""
        return any(r.playback.may_be_playing and response_id in (None, r.id) for r in self.values())

    def clear_playing(
        self, out: Outbox, *, force: Response | None = None, only: str | None = None
    ) -> None:
        """Tell the client to drop the queued audio of every response that may be playing
        (or only of response `only`); `force` is told so even if nothing of it plays."""
        for response in self.values():
            if only is not None and response.id != only:
                continue
            if response.playback.may_be_playing:
                response.playback.clear()
            elif response is force:
                out.emit(ev.OutputAudioBufferCleared(response_id=response.id))

    def truncate(self, item: Item, audio_end_ms: int, event_id: str | None) -> None:
        """`conversation.item.truncate`: an assistant audio item keeps what was played."""
        response = self.get(item.response_id or "")
        if (
            response is None
            or item is not response.item  # a function call of that response has no audio
            or item.state is not ItemState.COMPLETED
            or audio_end_ms > response.playback.generated_ms
        ):
            raise RemoteProtocolError(
                "only a completed assistant audio item can be truncated, within its audio",
                code=ErrorCode.INVALID_TRUNCATE,
                param="audio_end_ms",
                event_id=event_id,
            )
        item.truncate(
            audio_end_ms=audio_end_ms,
            transcript=played_prefix(response.text_marks, audio_end_ms),
        )

    def playing(
        self, response_id: str | None, item_id: str | None, event_id: str | None
    ) -> Response:
        """The response a `playback.ack` names (by response id, else by its item id)."""
        response: Response | None = None
        if response_id is not None:
            response = self.get(response_id)
        elif item_id is not None:
            response = next((r for r in self.values() if r.item_id == item_id), None)
        if response is None or response.playback.state is PlaybackState.IDLE:
            raise RemoteProtocolError(
                "no audio was sent for that response",
                code=ErrorCode.PLAYBACK_ITEM_NOT_FOUND,
                param="response_id",
                event_id=event_id,
            )
        if item_id is not None and item_id != response.item_id:
            raise RemoteProtocolError(
                f"item `{item_id}` is not the item of response `{response.id}`",
                code=ErrorCode.PLAYBACK_ITEM_MISMATCH,
                param="item_id",
                event_id=event_id,
            )
        return response

    def forget_oldest(self, keep: int, active: Response | None) -> None:
        """Bounded state (docs/session-semantics.md section 10): beyond `keep` remembered
        responses, the oldest that are neither active nor possibly playing are forgotten
        (their assistant items stay, entering history with their own text)."""
        excess = len(self) - keep
        if excess <= 0:
            return
        gone: list[str] = []
        for response_id, response in self.items():
            if response is not active and not response.playback.may_be_playing:
                gone.append(response_id)
                if len(gone) == excess:
                    break
        for response_id in gone:
            del self[response_id]

    def drain_deadline(self) -> int | None:
        """When the earliest response's audio has played out at the client's pace."""
        deadlines = (r.playback.drain_deadline() for r in self.values())
        return min((d for d in deadlines if d is not None), default=None)

    def drain_due(self, now_ms: int) -> None:
        for response in self.values():
            deadline = response.playback.drain_deadline()
            if deadline is not None and deadline <= now_ms:
                response.playback.drain()
