"""The client tables and constants as JSON for the browser (`web/spec/*.json`).

The web UI runs the very tables of `spec/tables/client_*.py` through a small interpreter
(`web/js/rulebook.js`), so it holds no hand-copied transition logic. The files are
generated with the docs (`make docs`: `tools/gen_docs.py`; `tools/web_gen_traces.py`
writes them with the client traces); tests/spec/test_docs_fresh.py and
tests/web/test_web_generated_fresh.py fail when they are stale.

Table JSON: `{name, doc, states, initial, terminal, groups: {name: [state]},
transitions: [{trigger, source, dest, guard, effect}], invariants}`, states by their wire
value (a group's in table order), `dest` null for an internal transition, rows in table
order (the first row whose source and guard match wins, as in `transitions`). `groups`
are the named state sets the client code tests membership of (`client_hold.live`), so
neither client re-lists them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from spec.tables.client_constants import CLIENT_CONSTANTS, CLIENT_TABLES

if TYPE_CHECKING:
    from collections.abc import Callable

    from spec.tables.base import Table

__all__ = ["CLIENT_EXPORTS", "constants_json", "table_document", "table_json"]


def table_document(table: Table) -> dict[str, Any]:
    """One table as plain JSON data."""
    return {
        "name": table.name,
        "doc": table.doc,
        "states": [state.value for state in table.states],
        "initial": table.initial.value,
        "terminal": sorted(state.value for state in table.terminal),
        "groups": {
            name: [state.value for state in table.states if state in members]
            for name, members in table.groups.items()
        },
        "transitions": [
            {
                "trigger": row.trigger,
                "source": [state.value for state in row.source],
                "dest": row.dest.value if row.dest is not None else None,
                "guard": row.guard,
                "effect": row.effect,
            }
            for row in table.transitions
        ],
        "invariants": dict(table.invariants),
    }


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def table_json(table: Table) -> str:
    return _dump(table_document(table))


def constants_json() -> str:
    return _dump({**CLIENT_CONSTANTS, "tables": [t.name for t in CLIENT_TABLES]})


def _renderer(table: Table) -> Callable[[], str]:
    return lambda: table_json(table)


#: path under the repository root -> renderer
CLIENT_EXPORTS: dict[str, Callable[[], str]] = {
    **{f"web/spec/{t.name}.json": _renderer(t) for t in CLIENT_TABLES},
    "web/spec/client_constants.json": constants_json,
}
