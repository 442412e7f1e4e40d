"""Preemptive response: a reply prepared while the person may still be finishing (B35)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["SPECULATION", "SpeculationState"]


class SpeculationState(enum.Enum):
    PREPARING = "preparing"  # the VLM and TTS run on the pause's words; nothing is sent
    ADOPTED = "adopted"  # the turn ended on the same prompt: its response took it over
    DISCARDED = "discarded"  # speech went on, the prompt changed or a stage failed


S = SpeculationState

SPECULATION = Table(
    name="speculation",
    doc=(
        "A reply the server prepares from a pause's live transcript before the turn has "
        "ended (preemptive response). Its VLM and TTS requests run and their results are "
        "held: nothing reaches the wire. When the turn ends and the response's prompt is "
        "the one it was built on (the same words and frames, the same history), the "
        "response adopts it: the held results are applied in arrival order, exactly as if "
        "they had come then. Anything else discards it silently, its requests aborted."
    ),
    states=SpeculationState,
    initial=S.PREPARING,
    terminal=frozenset({S.ADOPTED, S.DISCARDED}),
    transitions=(
        T("adopt", S.PREPARING, S.ADOPTED, behaviours=("B35",)),
        T("discard", S.PREPARING, S.DISCARDED, effect="abort_requests", behaviours=("B35",)),
    ),
    invariants={
        "P1": "at most one speculation of a session is preparing",
        "P2": "no server event comes from a preparing speculation",
        "P3": "a discarded speculation has no open stage request",
    },
)
