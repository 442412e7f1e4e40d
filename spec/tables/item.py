"""Conversation item: a versioned public id and the transcript slot of its audio part."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["ITEM", "ItemState"]


class ItemState(enum.Enum):
    IN_PROGRESS = "in_progress"  # a committed audio part awaits its transcript
    COMPLETED = "completed"
    DELETED = "deleted"


S = ItemState

ITEM = Table(
    name="item",
    doc=(
        "A conversation item. Its public id may be deleted and created again: each creation "
        "is a new version, and a transcript is written only to the version whose audio "
        "produced it."
    ),
    states=ItemState,
    initial=S.IN_PROGRESS,
    terminal=frozenset({S.DELETED}),
    transitions=(
        T(
            "transcribe",
            S.IN_PROGRESS,
            S.COMPLETED,
            effect="emit_transcript_and_done",
            behaviours=("B4", "B5", "B16"),
        ),
        T(
            "fail_transcription",
            S.IN_PROGRESS,
            S.COMPLETED,
            effect="emit_failed_and_done",
            behaviours=("B11", "B17"),
        ),
        T("complete", S.IN_PROGRESS, S.COMPLETED, effect="emit_done", behaviours=("B1",)),
        T(
            "truncate",
            S.COMPLETED,
            None,
            guard="is_assistant_audio",
            effect="emit_truncated",
            behaviours=("B19",),
        ),
        T(
            "delete",
            (S.IN_PROGRESS, S.COMPLETED),
            S.DELETED,
            effect="emit_deleted",
            behaviours=("B5",),
        ),
    ),
    invariants={
        "I7": "a transcript is only written to the item version that produced it",
        "ITEM-1": "a deleted version never changes again",
    },
)
