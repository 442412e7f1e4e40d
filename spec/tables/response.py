"""Response: one model turn from creation to its single terminal `response.done`."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["ACTIVE_RESPONSE_STATES", "FIRST_CLAUSE_MIN_CHARS", "RESPONSE", "ResponseState"]

#: the first TTS piece of a reply may end at a clause (`,` `;` `:` or a spaced dash) once
#: it is this long, so the first audio need not wait for a whole sentence (section 3.2)
FIRST_CLAUSE_MIN_CHARS = 12


class ResponseState(enum.Enum):
    CREATED = "created"
    TRANSCRIBING = "transcribing"
    GENERATING = "generating"
    SPEAKING = "speaking"
    COMPLETED = "completed"
    LISTENED = "listened"  # the model chose silence: response.listen, no audio
    CANCELLED = "cancelled"
    FAILED = "failed"


S = ResponseState
ACTIVE_RESPONSE_STATES = (S.CREATED, S.TRANSCRIBING, S.GENERATING, S.SPEAKING)

RESPONSE = Table(
    name="response",
    doc=(
        "A response: its segments are transcribed (speech profile), then the VLM generates, "
        "then TTS speaks. Exactly one terminal state is entered, which emits the single "
        "`response.done`. Audio chunks are counter updates in `speaking`."
    ),
    states=ResponseState,
    initial=S.CREATED,
    terminal=frozenset({S.COMPLETED, S.LISTENED, S.CANCELLED, S.FAILED}),
    transitions=(
        T("transcribe", S.CREATED, S.TRANSCRIBING, behaviours=("B1",)),
        T("generate", (S.CREATED, S.TRANSCRIBING), S.GENERATING, behaviours=("B1", "B2", "B3")),
        T("speak", S.GENERATING, S.SPEAKING, effect="emit_output_item", behaviours=("B1",)),
        T(
            "complete",
            (S.GENERATING, S.SPEAKING),
            S.COMPLETED,
            guard="generation_finished",
            effect="emit_done",
        ),
        T(
            "listen",
            S.GENERATING,
            S.LISTENED,
            effect="emit_listen",
            behaviours=("B29", "B30"),  # a silence is history; JoyAI's rules decide listen
        ),
        T("cancel", ACTIVE_RESPONSE_STATES, S.CANCELLED, effect="emit_done", behaviours=("B11",)),
        T(
            "fail",
            ACTIVE_RESPONSE_STATES,
            S.FAILED,
            effect="emit_done",
            behaviours=("B3", "B17", "B18", "B24", "B28"),
        ),
    ),
    invariants={
        "I1": "at most one response is active",
        "I2": "nothing of a cancelled response or an older epoch is emitted after its done",
        "I4": "every response.created is followed by exactly one response.done",
    },
)
