"""State tables: the one source of truth for every machine's states and transitions.

Each table is plain data: states (an Enum whose values are the wire-visible names), the
initial and terminal states, transitions as `T(trigger, source, dest, guard, effect)` rows
with guards and effects named (never callables), and numbered invariants. `core` builds
one `transitions.Machine` per table at import; `tools/gen_docs.py` draws the Mermaid
diagrams in `docs/statemachines/` from the same rows.
"""

from __future__ import annotations

from spec.tables.attachment import ATTACHMENT, AttachmentState
from spec.tables.base import T, Table
from spec.tables.commit import COMMIT, CommitState
from spec.tables.function_call import FUNCTION_CALL, FunctionCallState
from spec.tables.input_buffer import INPUT_BUFFER, BufferState
from spec.tables.item import ITEM, ItemState
from spec.tables.output_audio_buffer import OUTPUT_AUDIO_BUFFER, OutputBufferState
from spec.tables.playback import PLAYBACK, PlaybackState
from spec.tables.response import RESPONSE, ResponseState
from spec.tables.speculation import SPECULATION, SpeculationState
from spec.tables.turn_detector import TURN_DETECTOR, DetectorState

__all__ = [
    "ATTACHMENT",
    "COMMIT",
    "FUNCTION_CALL",
    "INPUT_BUFFER",
    "ITEM",
    "OUTPUT_AUDIO_BUFFER",
    "PLAYBACK",
    "RESPONSE",
    "SPECULATION",
    "TABLES",
    "TURN_DETECTOR",
    "AttachmentState",
    "BufferState",
    "CommitState",
    "DetectorState",
    "FunctionCallState",
    "ItemState",
    "OutputBufferState",
    "PlaybackState",
    "ResponseState",
    "SpeculationState",
    "T",
    "Table",
]

#: every server-side machine table, in documentation order
TABLES: tuple[Table, ...] = (
    ITEM,
    INPUT_BUFFER,
    COMMIT,
    TURN_DETECTOR,
    RESPONSE,
    FUNCTION_CALL,
    PLAYBACK,
    SPECULATION,
    ATTACHMENT,
    OUTPUT_AUDIO_BUFFER,
)
