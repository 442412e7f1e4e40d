"""The behaviour catalogue: B1..B42 as data.

Each behaviour names, directly, everything that makes it true: the sections of
`docs/session-semantics.md` that explain it, the state-table rows (`spec/tables`) and the
invariants that enforce it, and the tests (pytest node ids) that prove it. Table rows name
the behaviours they serve too (`T.behaviours`); `tests/spec/test_behaviours.py` keeps the
two directions in agreement and checks that every row, invariant, section and test named
here exists. `docs/behaviours.md` is generated from this module (`make docs`).

The entries themselves live in `spec/behaviour_catalogue/`, one module per range of ids,
so that no module holds the whole catalogue; this module joins them and stays the one
import surface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spec.behaviour_catalogue import b1_to_b14, b15_to_b27, b28_to_b36, b37_to_b44
from spec.behaviour_catalogue.entry import Behaviour, RowRef
from spec.tables import TABLES
from spec.tables.client_constants import CLIENT_TABLES

if TYPE_CHECKING:
    from spec.tables import T, Table

__all__ = [
    "ALL_TABLES",
    "BEHAVIOURS",
    "BEHAVIOUR_IDS",
    "SEMANTICS",
    "SESSION_INVARIANTS",
    "Behaviour",
    "RowRef",
    "behaviour",
    "invariant_text",
    "rows_of",
    "table_named",
]

#: the document every `sections` entry is a heading of
SEMANTICS: Final = "docs/session-semantics.md"

#: every machine table, the server's and the client's
ALL_TABLES: tuple[Table, ...] = (*TABLES, *CLIENT_TABLES)

#: the observable invariants of a session (docs/session-semantics.md section 8); the tables
#: repeat the ones a single machine enforces under the same ids
SESSION_INVARIANTS: Final[dict[str, str]] = {
    "I1": "at most one active response",
    "I2": "nothing of a cancelled/failed response or an older epoch is emitted after its "
    "response.done",
    "I3": "every accepted commit gets exactly one input_audio_buffer.committed carrying its "
    "client event id; a rejected one exactly one error with its event id",
    "I4": "every response.created is followed by exactly one response.done for that id "
    "(unless the session closed)",
    "I5": "pending bytes never exceed max_pending_input_bytes",
    "I6": "an idle input buffer holds at most one frame and at most PREROLL_MS of audio plus "
    "one append",
    "I7": "a transcript is only written to the item version that produced it",
    "I8": "played_ms <= generated_ms for every response",
    "I9": "nothing is emitted after session.closed",
    "I10": "a connection refused for its key or origin never reaches a session: it is "
    "answered with HTTP 401 or 403 and never upgraded",
    "I11": "at most two live-transcript requests are out per session (a pause's partial "
    "may supersede a cadence one, whose answer is dropped), and a transcription delta "
    "only names the utterance still being spoken",
    "I12": "a refused session.update changes nothing: the tools and tool choice a session "
    "offers its model are the ones its last session.updated echoed",
}


#: the catalogue in id order, joined from its ranges (`spec/behaviour_catalogue/`)
BEHAVIOURS: tuple[Behaviour, ...] = (
    *b1_to_b14.BEHAVIOURS,
    *b15_to_b27.BEHAVIOURS,
    *b28_to_b36.BEHAVIOURS,
    *b37_to_b44.BEHAVIOURS,
)

#: every behaviour id, in catalogue order
BEHAVIOUR_IDS: tuple[str, ...] = tuple(b.id for b in BEHAVIOURS)

_BY_ID: dict[str, Behaviour] = {b.id: b for b in BEHAVIOURS}


def behaviour(behaviour_id: str) -> Behaviour:
    """The catalogue entry of `behaviour_id` ("B11").

    Raises:
        KeyError: no such behaviour.
    """
    return _BY_ID[behaviour_id]


def table_named(name: str) -> Table | None:
    """The machine table called `name`, if there is one."""
    return next((t for t in ALL_TABLES if t.name == name), None)


def rows_of(ref: RowRef) -> tuple[T, ...]:
    """The rows `ref` names, in table order; empty when it names none."""
    table = table_named(ref.machine)
    if table is None:
        return ()
    return tuple(
        row
        for row in table.transitions
        if row.trigger == ref.trigger
        and (ref.source is None or any(s.value == ref.source for s in row.source))
    )


def invariant_text(invariant_id: str) -> str | None:
    """The text of an invariant: a session invariant, else a table's; None if unknown."""
    if invariant_id in SESSION_INVARIANTS:
        return SESSION_INVARIANTS[invariant_id]
    for table in ALL_TABLES:
        if invariant_id in table.invariants:
            return table.invariants[invariant_id]
    return None
