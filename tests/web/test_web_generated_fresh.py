"""The generated web files are fresh: the client tables and constants in `web/spec/` and
the recorded traces in `tests/web/traces/` equal what `spec/` and the Python
`ClientProtocol` produce now. Regenerate with `.venv/bin/python tools/web_gen_traces.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from spec.client_tables_export import CLIENT_EXPORTS
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
