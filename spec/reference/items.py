"""The oracle's conversation items: create, delete and truncate
(docs/session-semantics.md section 2.4).
"""

from __future__ import annotations

from spec.errors import ErrorCode
from spec.events import (
    ContentPart,
    ConversationItemAdded,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemDeleted,
    ConversationItemDone,
    ConversationItemTruncate,
    ConversationItemTruncated,
)
from spec.reference.input import AudioInput
from spec.reference.media import (
    _data_url_image,
)
from spec.reference.records import (
    _Item,
    _reject,
    _Segment,
)

__all__ = [
    "ConversationItems",
]


class ConversationItems(AudioInput):
    """Conversation items (section 2.4)."""

    # --- items (section 2.4) -----------------------------------------------------------

    def _on_item_create(self, event: ConversationItemCreate) -> None:
        eid = event.event_id
        wire = event.item
        if wire.type in ("function_call", "function_call_output"):
            self.calls.on_create(event)  # section 3.8
            return
        if wire.type != "message":
            raise _reject(ErrorCode.BAD_EVENT, "only message items are supported", "item.type", eid)
        if wire.role not in ("user", "assistant", "system"):
            raise _reject(ErrorCode.BAD_EVENT, "unknown role", "item.role", eid)
        if wire.id is not None and wire.id in self.items:
            raise _reject(ErrorCode.BAD_EVENT, "an item with this id exists", "item.id", eid)
        if len(wire.content) > self.limits.max_content_parts:
            raise _reject(ErrorCode.BAD_EVENT, "too many content parts", "item.content", eid)
        user = wire.role == "user"
        texts: list[str | None] = []
        frames: list[bytes] = []
        audio = b""
        audio_index: int | None = None
        content: list[ContentPart] = []
        for i, part in enumerate(wire.content):
            where = f"item.content[{i}]"
            if part.type in ("input_text", "text", "output_text"):
                if part.text is None:
                    # AMBIGUITY (docs/session-semantics.md, decision D7): "needs `text`" names no
                    # code; bad_event at the missing field
                    raise _reject(
                        ErrorCode.BAD_EVENT, "a text part needs text", f"{where}.text", eid
                    )
                texts.append(part.text)
                content.append(ContentPart(type=part.type, text=part.text))
            elif part.type in ("input_audio", "audio", "output_audio"):
                data = part.audio or b""
                if len(data) % 2:
                    raise _reject(
                        ErrorCode.BAD_AUDIO, "audio must be 16 kHz pcm16", f"{where}.audio", eid
                    )
                if part.transcript is not None:
                    texts.append(part.transcript)
                elif data:
                    # AMBIGUITY (docs/session-semantics.md, decision D8): "at most one audio part
                    # may lack a transcript" counts audio parts that carry audio; the param is the
                    # second such part's `transcript`.
                    if audio_index is not None:
                        raise _reject(
                            ErrorCode.BAD_EVENT,
                            "at most one audio part may lack a transcript",
                            f"{where}.transcript",
                            eid,
                        )
                    audio, audio_index = data, i
                    texts.append(None)
                content.append(ContentPart(type=part.type, transcript=part.transcript))
            elif part.type == "input_image" and user:
                image = _data_url_image(part.image_url)
                if image is None:
                    raise _reject(
                        ErrorCode.INVALID_IMAGE,
                        "image_url must be a JPEG or PNG data URL",
                        f"{where}.image_url",
                        eid,
                    )
                frames.append(image)
                content.append(ContentPart(type="input_image"))
            else:
                raise _reject(ErrorCode.BAD_EVENT, "unsupported content part", f"{where}.type", eid)
        held_audio = len(audio) if user else 0
        held_frames = sum(map(len, frames))
        if user and self.pending_bytes() + held_audio + held_frames > (
            self.limits.max_pending_input_bytes
        ):
            raise _reject(ErrorCode.INPUT_BACKPRESSURE, "pending input is full", None, eid)

        item_id = wire.id if wire.id is not None else self._new_item_id()
        version = self._new_version(item_id)
        seq = self._next_seq()
        # a user item with untranscribed audio awaits its ASR in the `speech` profile
        awaiting = user and audio_index is not None and self.profile == "speech"
        item = _Item(
            item_id,
            version,
            wire.role,
            "in_progress" if awaiting else "completed",
            content,
            seq,
            awaiting_index=audio_index if awaiting else None,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        if not awaiting:
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
        if user:
            self._tick(item)
            self.unanswered.append(
                _Segment(
                    item_id=item_id,
                    version=version,
                    seq=seq,
                    speech=audio_index is not None,
                    audio=audio,
                    content_index=audio_index or 0,
                    frames=frames,
                    texts=texts,
                    audio_held=held_audio,
                    frames_held=held_frames,
                )
            )

    def _on_item_delete(self, event: ConversationItemDelete) -> None:
        item = self.items.get(event.item_id)
        if item is None:
            raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", event.event_id)
        self._delete_item(item)

    def _delete_item(self, item: _Item) -> None:
        del self.items[item.id]
        self.calls.forget(item)
        self.kept_frames = [k for k in self.kept_frames if (k[0], k[1]) != (item.id, item.version)]

        def keep(s: _Segment) -> bool:
            return not (s.item_id == item.id and s.version == item.version)

        # AMBIGUITY (docs/session-semantics.md, decision D9): "the item leaves history and queues":
        # a deleted item's queued commit (retained/deferred) or unanswered item is dropped and its
        # bytes are released at once.
        self.retained = [s for s in self.retained if keep(s)]
        self.deferred = [s for s in self.deferred if keep(s)]
        self.unanswered = [s for s in self.unanswered if keep(s)]
        self._emit(ConversationItemDeleted(item_id=item.id))

    def _on_truncate(self, event: ConversationItemTruncate) -> None:
        eid = event.event_id
        item = self.items.get(event.item_id)
        if item is None:
            raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", eid)
        resp = self.responses.get(item.response_id) if item.response_id else None
        if (
            item.role != "assistant"
            or item.call is not None  # a function call has no audio (3.8)
            or item.status != "completed"
            or resp is None
            or not resp.audio_started
        ):
            raise _reject(
                ErrorCode.INVALID_TRUNCATE,
                "not a completed assistant audio item",
                "audio_end_ms",
                eid,
            )
        if event.audio_end_ms > resp.generated_ms:
            raise _reject(
                ErrorCode.INVALID_TRUNCATE, "beyond the generated audio", "audio_end_ms", eid
            )
        cap = float(event.audio_end_ms)
        resp.truncated_ms = cap if resp.truncated_ms is None else min(resp.truncated_ms, cap)
        item.content = [ContentPart(type="output_audio", transcript=self._assistant_text(resp))]
        self._emit(
            ConversationItemTruncated(
                item_id=item.id, content_index=event.content_index, audio_end_ms=event.audio_end_ms
            )
        )
