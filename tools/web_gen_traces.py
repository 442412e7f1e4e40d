"""Write the generated web files: client tables (`web/spec/*.json`) and recorded client
traces (`tests/web/traces/*.json`). Run after changing `spec/tables/client_*.py`,
`core/client_protocol/protocol.py` or `tests/web/trace_scenarios.py`:

    .venv/bin/python tools/web_gen_traces.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spec.client_tables_export import CLIENT_EXPORTS  # noqa: E402
from tests.web.trace_scenarios import TRACE_DIR, build_traces, render  # noqa: E402


def main() -> int:
    for path, renderer in CLIENT_EXPORTS.items():
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(renderer())
    TRACE_DIR.mkdir(parents=True, exist_ok=True)
    traces = build_traces()
    for stale in TRACE_DIR.glob("*.json"):
        if stale.name not in traces:
            stale.unlink()
    for name, trace in traces.items():
        (TRACE_DIR / name).write_text(render(trace))
    print(f"wrote {len(CLIENT_EXPORTS)} table files and {len(traces)} traces")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
