"""Runs one of the GPU check scripts as a user would and reads its JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["run_check"]


def run_check(
    script: str, out: Path, *, budget_s: int = 420, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """`python tests/gpu/SCRIPT --out OUT --budget-s BUDGET`; (its report, the run).

    The report must exist even when the check fails: it is written after every part."""
    done = subprocess.run(
        [sys.executable, f"tests/gpu/{script}", "--out", str(out), "--budget-s", str(budget_s)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=budget_s + 60,
        check=False,
    )
    assert out.exists(), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    return report, done
