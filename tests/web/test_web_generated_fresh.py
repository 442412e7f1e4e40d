"""The generated web files are fresh: the client tables and constants in `web/spec/` and
the recorded traces in `tests/web/traces/` equal what `spec/` and the Python
`ClientProtocol` produce now. Regenerate with `.venv/bin/python tools/web_gen_traces.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spec.client_tables_export import CLIENT_EXPORTS
from spec.tables.base import Table
from spec.tables.client_constants import CLIENT_TABLES
from tests.web.trace_scenarios import TRACE_DIR, build_traces, render

ROOT = Path(__file__).resolve().parents[2]
HINT = "stale: run `.venv/bin/python tools/web_gen_traces.py`"


@pytest.mark.parametrize("path", sorted(CLIENT_EXPORTS))
def test_exported_client_table_is_fresh(path: str) -> None:
    target = ROOT / path
    assert target.exists(), f"{path} missing; {HINT}"
    assert target.read_text() == CLIENT_EXPORTS[path](), f"{path} {HINT}"


def test_recorded_traces_are_fresh() -> None:
    traces = build_traces()
    on_disk = {p.name for p in TRACE_DIR.glob("*.json")}
    assert on_disk == set(traces), HINT
    stale = [
        name for name, trace in traces.items() if (TRACE_DIR / name).read_text() != render(trace)
    ]
    assert not stale, f"{stale} {HINT}"


@pytest.mark.parametrize("table", CLIENT_TABLES, ids=lambda t: t.name)
def test_the_browser_reads_state_groups_from_the_spec_instead_of_re_listing_them(
    table: Table,
) -> None:
    """Every state group (and the terminal set) reaches web/js through web/spec/*.json;
    no script spells one out as a literal list of state names."""
    sources = {p.name: p.read_text() for p in (ROOT / "web" / "js").glob("*.js")}
    exported = json.loads((ROOT / "web" / "spec" / f"{table.name}.json").read_text())
    for name, members in table.groups.items():
        assert set(exported["groups"][name]) == {s.value for s in members}
    for members in (*table.groups.values(), table.terminal):
        if len(members) < 2:
            continue
        listed = [s.value for s in table.states if s in members]
        literal = "[" + ", ".join(f'"{v}"' for v in listed) + "]"
        for file, source in sources.items():
            assert literal not in source, f"{file} re-lists {literal}"
