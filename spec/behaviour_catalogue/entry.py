"""What one entry of the behaviour catalogue holds: a `Behaviour` and the `RowRef`s of
the state-table rows that carry it out."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Behaviour", "RowRef"]


@dataclass(frozen=True, slots=True)
class RowRef:
    """Rows of one table: those of `trigger`, or only those leaving `source` (a state's
    wire value) when it is given."""

    machine: str
    trigger: str
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One behaviour: what it is, where it is explained, what enforces and proves it."""

    id: str
    title: str
    summary: str
    #: headings of docs/session-semantics.md, the main one first
    sections: tuple[str, ...]
    #: the state-table rows that carry it out
    rows: tuple[RowRef, ...]
    #: invariant ids (SESSION_INVARIANTS or a table's invariants)
    invariants: tuple[str, ...]
    #: pytest node ids, `path::function`, conformance tests first
    tests: tuple[str, ...]
