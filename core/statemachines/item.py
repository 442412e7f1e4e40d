"""Conversation item: a versioned public id and the transcript slot of its audio part.

Spec: `spec.tables.item.ITEM`. Diagram: `docs/statemachines/item.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: an item is created `in_progress` (a committed audio part awaiting its
transcript) and becomes `completed` by `transcribe` (the transcript is written to the exact
part), `fail_transcription`, or `complete` (nothing to wait for). `delete` ends the
version; re-creating the public id makes a new `Item` with `version + 1`, so a late
transcript addressed to the old version finds a deleted object and is dropped (I7, B5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import msgspec

from core.statemachines._rulebook import build, fire
from spec.events import (
    ContentPart,
    ConversationItem,
    ConversationItemDeleted,
    ConversationItemDone,
    ConversationItemTruncated,
    ErrorDetail,
    InputAudioTranscriptionCompleted,
    InputAudioTranscriptionFailed,
)
from spec.tables import ITEM, ItemState

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox

__all__ = ["HistoryLedger", "Item"]


class HistoryLedger(Protocol):
    """Who keeps the total of completed history bytes (`core.conversation.Conversation`)."""

    history_bytes: int


_RULES = build(ITEM)


class Item:
    """One version of a conversation item."""

    __slots__ = (
        "arguments",
        "call_id",
        "content",
        "history_bytes",
        "id",
        "incomplete",
        "ledger",
        "name",
        "outbox",
        "output",
        "previous_item_id",
        "response_id",
        "role",
        "state",
        "type",
        "version",
    )

    def __init__(
        self,
        outbox: Outbox,
        item_id: str,
        *,
        version: int,
        role: str,
        content: list[ContentPart],
        previous_item_id: str | None = None,
        response_id: str | None = None,
        type: str = "message",
        call_id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
        output: str | None = None,
    ) -> None:
        self.outbox = outbox
        self.id = item_id
        self.version = version
        self.role = role
        self.content = content
        self.previous_item_id = previous_item_id
        self.response_id = response_id
        self.state = ItemState.IN_PROGRESS
        #: `message`, `function_call` (B38) or `function_call_output` (B39); a function
        #: item has no content: its call id, name, arguments or output instead
        self.type = type
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.output = output
        #: a function call cut during its arguments: completed, but `incomplete` on the wire
        self.incomplete = False
        #: UTF-8 bytes of `text()` while completed (0 before), kept in the ledger's total
        self.history_bytes = 0
        self.ledger: HistoryLedger | None = None

    def wire(self, *, completing: bool = False) -> ConversationItem:
        """The wire form; `completing`: as it will be once the chain under way completes it."""
        in_progress = self.state is ItemState.IN_PROGRESS and not completing
        status = "in_progress" if in_progress else "completed"
        if self.type != "message":
            return ConversationItem(
                id=self.id,
                type=self.type,
                role=msgspec.UNSET,
                status="incomplete" if self.incomplete else status,
                call_id=self.call_id,
                name=self.name,
                arguments=self.arguments,
                output=self.output,
            )
        parts = [
            ContentPart(type=p.type, text=p.text, transcript=p.transcript) for p in self.content
        ]
        return ConversationItem(id=self.id, role=self.role, status=status, content=parts)

    def text(self) -> str:
        """What this item contributes to history: its texts and transcripts, in order; a
        function call's name and arguments, a function output's output."""
        if self.type == "function_call":
            return f"{self.name}({self.arguments or ''})"
        if self.type == "function_call_output":
            return self.output or ""
        pieces = [p.text or p.transcript or "" for p in self.content]
        return " ".join(p for p in pieces if p)

    # --- verbs ----------------------------------------------------------------------

    def transcribe(self, *, transcript: str, content_index: int) -> None:
        fire(_RULES, self, "transcribe", transcript=transcript, content_index=content_index)

    def fail_transcription(self, *, content_index: int, error: ErrorDetail) -> None:
        fire(_RULES, self, "fail_transcription", content_index=content_index, error=error)

    def complete(self) -> None:
        fire(_RULES, self, "complete")

    def truncate(self, *, audio_end_ms: int, transcript: str) -> None:
        fire(_RULES, self, "truncate", audio_end_ms=audio_end_ms, transcript=transcript)

    def delete(self) -> None:
        fire(_RULES, self, "delete")

    # --- guards and effects (named in the table) --------------------------------------

    def is_assistant_audio(self, event: EventData) -> bool:
        return self.role == "assistant" and any(p.type == "output_audio" for p in self.content)

    def emit_transcript_and_done(self, event: EventData) -> None:
        index: int = event.kwargs["content_index"]
        transcript: str = event.kwargs["transcript"]
        self.content[index].transcript = transcript
        self.outbox.emit(
            InputAudioTranscriptionCompleted(
                item_id=self.id, content_index=index, transcript=transcript
            )
        )
        self.emit_done(event)

    def emit_failed_and_done(self, event: EventData) -> None:
        self.outbox.emit(
            InputAudioTranscriptionFailed(
                item_id=self.id,
                content_index=event.kwargs["content_index"],
                error=event.kwargs["error"],
            )
        )
        self.emit_done(event)

    def emit_done(self, event: EventData) -> None:
        self.outbox.emit(
            ConversationItemDone(item=self.wire(), previous_item_id=self.previous_item_id)
        )
        self._measure()

    def _measure(self) -> None:
        """Keep the ledger's total of completed history bytes exact (section 10)."""
        size = len(self.text().encode())
        if self.ledger is not None:
            self.ledger.history_bytes += size - self.history_bytes
        self.history_bytes = size

    def emit_truncated(self, event: EventData) -> None:
        for part in self.content:
            if part.type == "output_audio":
                part.transcript = event.kwargs["transcript"]
        self.outbox.emit(
            ConversationItemTruncated(
                item_id=self.id, content_index=0, audio_end_ms=event.kwargs["audio_end_ms"]
            )
        )
        self._measure()

    def emit_deleted(self, event: EventData) -> None:
        self.outbox.emit(ConversationItemDeleted(item_id=self.id))
